"""ReduceSum and ReduceMean over the last axis sum in ONNX Runtime's order on the cpu backend (issue 29): a
dynamically quantized transformer re-quantizes the means its RMS and layer norms take, so a mean one rounding
step off flips codes. Bit for bit against ORT, rows of every alignment; long rows keep the float64 sum."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import F, make_model, ort_outputs
from onnx import helper

import wgsentis as ws
from wgsentis.ops.numeric import LONG_SUM


@pytest.mark.parametrize("shape", [(4, 1), (5, 2), (64, 3), (64, 5), (64, 8), (64, 9), (4, 37, 100), (2, 128, 512),
                                   (3, 7, 513), (8, 1001), (16, 4095), (1, 6, 512), (7,)])
@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum"])
def test_last_axis_sums_are_onnx_runtimes_bit_for_bit(op, shape):
    rng = np.random.default_rng(len(shape) * 1000 + shape[-1])
    x = (rng.standard_normal(shape) ** 2).astype(np.float32)  # squares: an RMS norm's mean
    if op == "ReduceMean":
        model = make_model([helper.make_node(op, ["x"], ["y"], axes=[-1], keepdims=1)], [("x", F, list(shape))],
                           [("y", F, None)], opset=13)
    else:
        model = make_model([helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)], [("x", F, list(shape))],
                           [("y", F, None)], {"axes": np.array([-1], np.int64)}, opset=13)
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
