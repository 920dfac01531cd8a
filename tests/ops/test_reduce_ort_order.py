"""ReduceSum and ReduceMean over the last axis sum in ONNX Runtime's order on the cpu backend (issue 29): a
dynamically quantized transformer re-quantizes the means its RMS and layer norms take, so a mean one rounding
step off flips codes. Bit for bit against ORT, rows of every alignment; long rows keep the float64 sum."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import F, make_model, ort_outputs, requires_gpu
from onnx import helper

import wgsentis as ws
from wgsentis.ops.numeric import LONG_SUM


def _last_axis_model(op: str, shape: tuple[int, ...]):
    """``op`` over the last axis of a float input of ``shape`` (ReduceSum's axes an input from opset 13)."""
    if op == "ReduceMean":
        return make_model([helper.make_node(op, ["x"], ["y"], axes=[-1], keepdims=1)], [("x", F, list(shape))],
                          [("y", F, None)], opset=13)
    return make_model([helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)], [("x", F, list(shape))],
                      [("y", F, None)], {"axes": np.array([-1], np.int64)}, opset=13)


@pytest.mark.parametrize("shape", [(4, 1), (5, 2), (64, 3), (64, 5), (64, 8), (64, 9), (4, 37, 100), (2, 128, 512),
                                   (3, 7, 513), (8, 1001), (16, 4095), (1, 6, 512), (7,)])
@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum"])
def test_last_axis_sums_are_onnx_runtimes_bit_for_bit(op, shape):
    rng = np.random.default_rng(len(shape) * 1000 + shape[-1])
    x = (rng.standard_normal(shape) ** 2).astype(np.float32)  # squares: an RMS norm's mean
    model = _last_axis_model(op, shape)
    expected = ort_outputs(model, {"x": x})[0]
    with ws.Worker(ws.load_model(model), "cpu") as worker:
        got = worker.run({"x": x})["y"]
    assert got.shape == expected.shape
    assert np.array_equal(got, expected), int((got != expected).sum())


def test_a_long_row_still_sums_in_float64():
    x = np.full((2, LONG_SUM + 3), 0.1, np.float32)
    model = make_model([helper.make_node("ReduceMean", ["x"], ["y"], axes=[-1], keepdims=0)],
                       [("x", F, [2, x.shape[1]])], [("y", F, None)], opset=13)
    with ws.Worker(ws.load_model(model), "cpu") as worker:
        got = worker.run({"x": x})["y"]
    np.testing.assert_array_equal(got, np.float32(np.float64(np.float32(0.1))))


@pytest.mark.parametrize("shape", [(4, 1), (5, 2), (64, 3), (64, 9), (4, 37, 100), (2, 128, 512), (3, 7, 513),
                                   (1, 6, 512), (7,), (300, 1500)])
@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum"])
@requires_gpu
def test_gpu_compute_sums_last_axes_in_the_same_order(op, shape):
    # (Rows split into chunks, few and long, sum in blocks instead: e.g. 16 rows of 4095.)
    rng = np.random.default_rng(shape[-1])
    x = (rng.standard_normal(shape) ** 2).astype(np.float32)
    model = _last_axis_model(op, shape)
    with ws.Worker(ws.load_model(model), "cpu") as worker:
        expected = worker.run({"x": x})["y"]
    with ws.Worker(ws.load_model(model), "gpu-compute") as worker:
        got = worker.run({"x": x})["y"]
        assert not worker.stats()["fallback_layers"]
    assert np.array_equal(got, expected), int((got != expected).sum())
    np.testing.assert_array_equal(got, ort_outputs(model, {"x": x})[0])
