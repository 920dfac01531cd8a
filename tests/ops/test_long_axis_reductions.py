"""Issue 29, point 2: sums whose error does not grow with the length summed, on every backend.

A float32 running sum loses accuracy with its length: numpy sums pairwise only along a contiguous axis, so a
Softmax over axis 0 of (9e6, 4) had column sums of 1.0156 on cpu (and on gpu-compute, which runs it on the host).
Now long sums accumulate in float64 on the cpu (``numeric.sum_dtype``, from ``LONG_SUM`` elements; a
GlobalAveragePool plane from ``pool.LONG_GLOBAL_POOL``, below which it keeps ONNX Runtime's order), in blocks of
64 in gpu-compute's reduce.wgsl, softmax.wgsl and norm shaders, and as a 64-ary tree of chunks in gpu-pixel's
reductions from ``reduce_pixel.LONG_TEXELS`` texels. Each case's bound is one a naive float32 sum of that length fails
(the error before the change is noted beside it); errors are max |y - ref| / max |ref| against float64."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import BACKENDS, F, make_model
from onnx import helper, numpy_helper

import wgsentis as ws
from wgsentis.ops.numeric import LONG_SUM, sum_dtype

RNG = np.random.default_rng(29)


def _axes(value: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, np.int64), "axes")


def _softmax(n: int, width: int, op: str = "Softmax") -> tuple[onnx.ModelProto, np.ndarray, np.ndarray]:
    x = RNG.uniform(-1, 1, (n, width)).astype(np.float32)
    x64 = x.astype(np.float64)
    shifted = x64 - x64.max(0)
    total = np.exp(shifted).sum(0)
    ref = np.exp(shifted) / total if op == "Softmax" else shifted - np.log(total)
    model = make_model([helper.make_node(op, ["x"], ["y"], axis=0)], [("x", F, [n, width])], [("y", F, None)],
                       opset=13)
    return model, x, ref


def _reduce(op: str, n: int, width: int) -> tuple[onnx.ModelProto, np.ndarray, np.ndarray]:
    x = RNG.uniform(0, 1, (n, width)).astype(np.float32)
    x64 = x.astype(np.float64)
    ref = {"ReduceSum": x64.sum(0), "ReduceMean": x64.mean(0), "ReduceSumSquare": (x64 * x64).sum(0),
           "ReduceL2": np.sqrt((x64 * x64).sum(0)), "ReduceLogSumExp": np.log(np.exp(x64).sum(0))}[op]
    model = make_model([helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)], [("x", F, [n, width])],
                       [("y", F, None)], opset=18)
    model.graph.initializer.append(_axes([0]))
    return model, x, ref


def _global_average_pool(side: int) -> tuple[onnx.ModelProto, np.ndarray, np.ndarray]:
    x = np.random.default_rng(0).uniform(0, 1, (1, 4, side, side)).astype(np.float32)
    model = make_model([helper.make_node("GlobalAveragePool", ["x"], ["y"])], [("x", F, list(x.shape))],
                       [("y", F, None)], opset=13)
    return model, x, x.astype(np.float64).mean((2, 3), keepdims=True)


def _layer_norm(n: int) -> tuple[onnx.ModelProto, np.ndarray, np.ndarray]:
    x = RNG.uniform(0, 1, (2, n)).astype(np.float32)
    x64 = x.astype(np.float64)
    mean = x64.mean(-1, keepdims=True)
    ref = (x64 - mean) / np.sqrt(((x64 - mean) ** 2).mean(-1, keepdims=True) + 1e-5)
    model = make_model([helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1)],
                       [("x", F, [2, n])], [("y", F, None)],
                       [("s", np.ones(n, np.float32)), ("b", np.zeros(n, np.float32))], opset=17)
    return model, x, ref


def _error(model: onnx.ModelProto, x: np.ndarray, ref: np.ndarray, backend: str) -> float:
    with ws.Worker(ws.load_model(model), backend) as worker:
        y = worker.run({"x": x})["y"]
    return float(np.max(np.abs(y.astype(np.float64) - ref)) / np.max(np.abs(ref)))


# name -> (case, bound). Quick: they run on every backend in a few seconds on lavapipe.
QUICK = {
    # on the device on both GPU backends: 1.7e-6 before on both, 3e-7 / 3.9e-7 after
    "softmax-axis0-5000x4": (lambda: _softmax(5000, 4), 8e-7),
    # many long columns (no split for parallelism): gpu-compute/gpu-pixel 8.6e-6 before, 7.5e-7 / 6.6e-7 after
    "reducesum-axis0-20000x256": (lambda: _reduce("ReduceSum", 20000, 256), 2e-6),
    # the cpu kernel's strided axis and gpu-compute's host path: 7.5e-6 before, 1.8e-7 after
    "softmax-axis0-100000x4": (lambda: _softmax(100_000, 4), 1e-6),
    "logsoftmax-axis0-100000x4": (lambda: _softmax(100_000, 4, "LogSoftmax"), 1e-6),
    # a 316x316 plane (past LONG_GLOBAL_POOL): ORT's lane order, kept on cpu and gpu-compute, 2.8e-6 before
    "globalaveragepool-316x316": (lambda: _global_average_pool(316), 1e-6),
    # the case at 2e6 rows (about a second on lavapipe): cpu 2.8e-4 before, 1.9e-7 after
    "softmax-axis0-2e6x4": (lambda: _softmax(2_000_000, 4), 1e-6),
}

# name -> (case, bound): lengths where the naive error grows past 1e-5 on some backend (slow on lavapipe).
SLOW = {
    "reducemean-axis0-2e6x4": (lambda: _reduce("ReduceMean", 2_000_000, 4), 1e-6),  # cpu 3.8e-5 before
    "reducesumsquare-axis0-2e6x4": (lambda: _reduce("ReduceSumSquare", 2_000_000, 4), 1e-6),
    "reducel2-axis0-2e6x4": (lambda: _reduce("ReduceL2", 2_000_000, 4), 1e-6),
    "reducelogsumexp-axis0-2e6x4": (lambda: _reduce("ReduceLogSumExp", 2_000_000, 4), 1e-6),
    "globalaveragepool-1500x1500": (lambda: _global_average_pool(1500), 1e-6),
    # a regression guard (2.6e-7 / 4e-7 before on the GPU backends): the norm shaders' blocked sums, chunked sums
    "layernorm-2x1e6": (lambda: _layer_norm(1_000_000), 2e-6),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(QUICK))
def test_a_long_sum_keeps_its_accuracy(backend, name):
    make, bound = QUICK[name]
    error = _error(*make(), backend)
    assert error < bound, f"{name} on {backend}: relative error {error:.2e}, bound {bound:.0e}"


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(SLOW))
def test_a_very_long_sum_keeps_its_accuracy(backend, name):
    make, bound = SLOW[name]
    error = _error(*make(), backend)
    assert error < bound, f"{name} on {backend}: relative error {error:.2e}, bound {bound:.0e}"


def test_short_sums_keep_numpys_float32_order_and_long_ones_take_float64():
    short = np.zeros((LONG_SUM - 1, 4), np.float32)
    assert sum_dtype(short, (0,)) is None and sum_dtype(short, None) == np.float64  # 4 * 4095 elements in all
    assert sum_dtype(np.zeros((LONG_SUM, 2), np.float32), 0) == np.float64
    assert sum_dtype(np.zeros((LONG_SUM, 2), np.float64), 0) is None  # already float64
    assert sum_dtype(np.zeros((LONG_SUM, 2), np.int32), 0) is None  # integer sums are exact (wrapping)


def test_a_short_softmax_is_bit_identical_to_the_float32_formula():
    """Below LONG_SUM the cpu kernel's order is unchanged: the fast path and what ORT-order tests pin."""
    x = RNG.standard_normal((1, 1000)).astype(np.float32)
    model = make_model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [("x", F, [1, 1000])],
                       [("y", F, None)], opset=13)
    with ws.Worker(ws.load_model(model), "cpu") as worker:
        y = worker.run({"x": x})["y"]
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_array_equal(y, e / e.sum(-1, keepdims=True))


@pytest.mark.parametrize("width", [1, 7, 256, 1000, LONG_SUM - 1])
def test_a_short_layer_norm_row_is_bit_identical_to_the_general_path(width):
    """LayerNormalization's Y-only float32 path for rows shorter than LONG_SUM (norm._layer_norm_rows) gives the
    general path's bits: the same model asked for Mean and InvStdDev too takes the general path."""
    x = (RNG.standard_normal((3, 2, width)) * 3 + 1).astype(np.float32)
    scale = RNG.standard_normal(width).astype(np.float32)
    bias = RNG.standard_normal(width).astype(np.float32)
    results = []
    for outputs in (["y"], ["y", "mean", "inv_std"]):
        model = make_model(
            [helper.make_node("LayerNormalization", ["x", "s", "b"], outputs, axis=-1, epsilon=1e-5)],
            [("x", F, [3, 2, width])], [(name, F, None) for name in outputs], opset=17,
            initializers={"s": scale, "b": bias})
        with ws.Worker(ws.load_model(model), "cpu") as worker:
            results.append(worker.run({"x": x})["y"])
    np.testing.assert_array_equal(results[0], results[1])
