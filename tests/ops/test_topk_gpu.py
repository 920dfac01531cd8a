"""TopK on both GPU backends (sort_gpu.py): values and indices identical to the CPU kernel's, which follows
numpy's order (NaN the largest; equal values by index), on every axis, for largest and smallest, float and
int, k from 0 to the row's length, with no fallback layer; a k past the axis is the CPU kernel's error on
every backend."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import gpu_check
import wgsentis as ws
from wgsentis.errors import LayerError

pytestmark = gpu_check.requires_gpu
RNG = np.random.default_rng(5)


def _model(shape: list[int], dtype: int, axis: int, largest: int) -> onnx.ModelProto:
    # Identity first: the data reaches TopK on the device, as it does after any layer.
    nodes = [h.make_node("Identity", ["xin"], ["x"]),
             h.make_node("TopK", ["x", "k"], ["values", "indices"], axis=axis, largest=largest)]
    graph = h.make_graph(nodes, "topk", [h.make_tensor_value_info("xin", dtype, shape),
                                         h.make_tensor_value_info("k", T.INT64, [1])],
                         [h.make_tensor_value_info("values", dtype, None),
                          h.make_tensor_value_info("indices", T.INT64, None)])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _data(shape, dtype):
    if dtype == T.INT32:
        return RNG.integers(-5, 6, shape).astype(np.int32)  # many ties
    x = np.round(RNG.standard_normal(shape), 1).astype(np.float32)  # ties too
    x.reshape(-1)[RNG.choice(x.size, max(1, x.size // 20), replace=False)] = np.nan
    x.reshape(-1)[:3] = [np.inf, -np.inf, -0.0]
    return x


@pytest.mark.parametrize("backend", gpu_check.GPU_BACKENDS)
@pytest.mark.parametrize("dtype", [T.FLOAT, T.INT32])
@pytest.mark.parametrize("shape, axis", [([7, 300], -1), ([6, 9, 5], 1), ([40, 3], 0)])
@pytest.mark.parametrize("largest", [1, 0])
def test_top_k_matches_the_cpu_kernel_bit_for_bit(backend, dtype, shape, axis, largest):
    x = _data(shape, dtype)
    model = _model(shape, dtype, axis, largest)
    length = shape[axis]
    with ws.Worker(ws.load_model(model), "cpu") as cpu, ws.Worker(ws.load_model(model), backend) as gpu:
        for k in (0, 1, 3, length):
            feeds = {"xin": x, "k": np.array([k], np.int64)}
            want, got = cpu.run(feeds), gpu.run(feeds)
            np.testing.assert_array_equal(got["indices"], want["indices"], err_msg=f"k={k}")
            np.testing.assert_array_equal(got["values"], want["values"], err_msg=f"k={k}")
            assert gpu.stats()["fallback_layers"] == [], gpu.stats()["placements"]


@pytest.mark.parametrize("backend", ["cpu", *gpu_check.GPU_BACKENDS])
def test_k_past_the_axis_is_the_cpu_kernels_error(backend):
    model = _model([4, 5], T.FLOAT, 1, 1)
    with ws.Worker(ws.load_model(model), backend) as worker, pytest.raises(LayerError, match=r"k=6 is out of range"):
        worker.run({"xin": np.zeros((4, 5), np.float32), "k": np.array([6], np.int64)})


@pytest.mark.parametrize("backend", gpu_check.GPU_BACKENDS)
def test_a_detector_sized_row(backend):
    """A TopK over 4,000 candidate scores, as a detector keeps its best boxes before NMS."""
    x = RNG.random((1, 4000)).astype(np.float32)
    feeds = {"xin": x, "k": np.array([100], np.int64)}
    model = _model([1, 4000], T.FLOAT, 1, 1)
    with ws.Worker(ws.load_model(model), backend) as worker:
        got = worker.run(feeds)
        assert worker.stats()["fallback_layers"] == []
    order = np.argsort(-x[0], kind="stable")[:100]
    np.testing.assert_array_equal(got["indices"][0], order)
    np.testing.assert_array_equal(got["values"][0], x[0, order])
