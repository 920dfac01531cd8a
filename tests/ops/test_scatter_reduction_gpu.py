"""ScatterElements with a reduction (add, mul, max, min) on both GPU backends (issue 29, point 13): each output
element folds the updates that name it in update order, so the answer is the cpu's bit for bit, duplicate indices,
NaN (numpy's max and min propagate it), signed zeros and subnormals included; no layer falls back, a walk past the
loop limit is split, and an index out of range raises the cpu's IndexOutOfRangeError, indices computed on the
device included. The cpu agrees with ONNX Runtime where ORT's answer does not hinge on NaN (ORT's max and min
drop a NaN). int64 add and mul stay on the host (the device holds int64 in 32 bits), with that reason. ScatterND's
reductions (gpu-compute declined them all, gpu-pixel float max and min) share the fold and are checked the same way."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import BACKENDS, make_model, ort_outputs, requires_gpu
from onnx import TensorProto, helper

import wgsentis as ws
from wgsentis.errors import IndexOutOfRangeError

REDUCTIONS = ("add", "mul", "max", "min")
GPU = [pytest.param("gpu-compute", marks=requires_gpu), pytest.param("gpu-pixel", marks=requires_gpu)]
_ONNX = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int32): TensorProto.INT32,
         np.dtype(np.int64): TensorProto.INT64}


def _model(data: np.ndarray, indices: np.ndarray, reduction: str, axis: int = 0) -> onnx.ModelProto:
    node = helper.make_node("ScatterElements", ["data", "indices", "updates"], ["y"], name="scatter", axis=axis,
                            reduction=reduction)
    return make_model([node], [("data", _ONNX[data.dtype], data.shape), ("indices", _ONNX[indices.dtype],
                                                                          indices.shape),
                               ("updates", _ONNX[data.dtype], indices.shape)], [("y", _ONNX[data.dtype], None)],
                      opset=18)


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray], backend: str) -> tuple[np.ndarray, list[str]]:
    """The output on ``backend`` (equal on a replay) and the layers that fell back."""
    with ws.Worker(ws.load_model(model), backend) as worker:
        got = worker.run(feeds)["y"]
        again = worker.run(feeds)["y"]
        fallback = list(worker.stats().get("fallback_layers", []))
    np.testing.assert_array_equal(again.view(np.int32) if again.dtype == np.float32 else again,
                                  got.view(np.int32) if got.dtype == np.float32 else got)
    return got, fallback


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.int32) if a.dtype == np.float32 else a


def _case(dtype, axis: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """(3, 4, 2) data, (5, 3, 2) or (3, 4, 2)-ish indices with duplicates and negative indices along ``axis``;
    float data with NaN, -0, +0 and subnormals among the values."""
    shape = [3, 4, 2]
    ishape = [2, 3, 2]
    ishape[axis] = 7  # more updates than positions: duplicates
    if np.dtype(dtype) == np.float32:
        data = rng.normal(size=shape).astype(np.float32)
        updates = (rng.normal(size=ishape) * 3).astype(np.float32)
        data.flat[[0, 5, 9]] = [np.nan, -0.0, 1e-40]
        updates.flat[[1, 4, 7, 10, 13]] = [np.nan, 0.0, -0.0, 3e-39, -1e-41]
    else:
        data = rng.integers(-9, 9, shape).astype(dtype)
        updates = rng.integers(-9, 9, ishape).astype(dtype)
    n = shape[axis]
    indices = rng.integers(-n, n, ishape).astype(np.int64)
    return {"data": data, "indices": indices, "updates": updates}


@pytest.mark.parametrize("backend", GPU)
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_bit_equal_to_cpu_without_fallback(backend, reduction, dtype):
    rng = np.random.default_rng(29)
    for axis in (0, 1, 2):
        feeds = _case(dtype, axis, rng)
        model = _model(feeds["data"], feeds["indices"], reduction, axis)
        want, _ = _run(model, feeds, "cpu")
        got, fallback = _run(model, feeds, backend)
        np.testing.assert_array_equal(_bits(got), _bits(want), err_msg=f"{backend} {reduction} axis {axis}")
        host = np.dtype(dtype) == np.int64 and reduction in ("add", "mul")
        assert fallback == (["scatter"] if host else []), fallback


@pytest.mark.parametrize("backend", GPU)
def test_int64_add_past_int32_is_exact(backend):
    """The host's answer, not a 32-bit wrap: int64 add falls back with its reason."""
    feeds = {"data": np.array([2**31 - 1, 5], np.int64), "indices": np.array([0, 0], np.int64),
             "updates": np.array([1, 2**31 - 1], np.int64)}
    got, fallback = _run(_model(feeds["data"], feeds["indices"], "add"), feeds, backend)
    np.testing.assert_array_equal(got, [2**32 - 1, 5])
    assert fallback == ["scatter"]


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cpu_matches_ort_with_duplicates(reduction, dtype):
    pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(7)
    for axis in (0, 1):
        feeds = _case(dtype, axis, rng)
        if np.dtype(dtype) == np.float32:  # ORT's max and min drop NaN where numpy's (the cpu's) keep it
            for k in ("data", "updates"):
                feeds[k] = np.nan_to_num(feeds[k], nan=1.5)
        model = _model(feeds["data"], feeds["indices"], reduction, axis)
        want = ort_outputs(model, feeds)[0]
        got, _ = _run(model, feeds, "cpu")
        np.testing.assert_array_equal(_bits(got), _bits(want), err_msg=f"{reduction} axis {axis}")


@pytest.mark.parametrize("backend", GPU)
@pytest.mark.parametrize("reduction", ["add", "max"])
def test_walk_past_the_loop_limit(backend, reduction):
    """70000 updates into 3 rows: more passes than lavapipe's loop limit, split into dispatches (draws) that go
    on where the last one stopped, in order: the cpu's sum bit for bit."""
    rng = np.random.default_rng(3)
    feeds = {"data": rng.normal(size=(3, 1)).astype(np.float32),
             "indices": rng.integers(0, 3, (70000, 1)).astype(np.int64),
             "updates": rng.normal(size=(70000, 1)).astype(np.float32)}
    model = _model(feeds["data"], feeds["indices"], reduction)
    want, _ = _run(model, feeds, "cpu")
    got, fallback = _run(model, feeds, backend)
    assert fallback == []
    np.testing.assert_array_equal(_bits(got), _bits(want))


def _shifted_model(reduction: str) -> onnx.ModelProto:
    """ScatterElements whose int32 indices are computed on the device (i + shift), so only the GPU kernel can
    check them."""
    nodes = [helper.make_node("Add", ["i", "shift"], ["j"], name="shift"),
             helper.make_node("ScatterElements", ["data", "j", "updates"], ["y"], name="scatter", axis=1,
                              reduction=reduction)]
    return make_model(nodes, [("data", TensorProto.FLOAT, [2, 3]), ("i", TensorProto.INT32, [2, 2]),
                              ("updates", TensorProto.FLOAT, [2, 2])], [("y", TensorProto.FLOAT, None)],
                      initializers={"shift": np.array(1, np.int32)}, opset=18)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_out_of_range_is_the_cpus_error(backend, reduction):
    model = _shifted_model(reduction)
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    updates = np.full((2, 2), 2.0, np.float32)
    good = {"data": data, "i": np.array([[0, 0], [-2, 1]], np.int32), "updates": updates}
    want, _ = _run(model, good, "cpu")
    worker = ws.Worker(ws.load_model(model), backend)
    np.testing.assert_array_equal(worker.run(good)["y"], want)
    if backend != "cpu":
        assert worker.stats()["fallback_layers"] == []
    for bad, index in (([[0, 2], [1, 0]], 3), ([[0, -5], [1, 0]], -4)):
        for _ in range(2):  # recorded, then replayed
            with pytest.raises(IndexOutOfRangeError) as info:
                worker.run({**good, "i": np.array(bad, np.int32)})
            assert (info.value.index, info.value.bound) == (index, 3)
            assert "scatter" in str(info.value) and "ScatterElements" in str(info.value)
        np.testing.assert_array_equal(worker.run(good)["y"], want)
    worker.close()


def _nd_model(data: np.ndarray, indices: np.ndarray, updates: np.ndarray, reduction: str) -> onnx.ModelProto:
    node = helper.make_node("ScatterND", ["data", "indices", "updates"], ["y"], name="scatter", reduction=reduction)
    return make_model([node], [("data", _ONNX[data.dtype], data.shape), ("indices", TensorProto.INT64, indices.shape),
                               ("updates", _ONNX[data.dtype], updates.shape)], [("y", _ONNX[data.dtype], None)],
                      opset=18)


@pytest.mark.parametrize("backend", GPU)
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_scatter_nd_bit_equal_to_cpu_without_fallback(backend, reduction, dtype):
    """ScatterND's reductions too (gpu-compute declined them, gpu-pixel float max and min): tuples of one and two
    components, repeated tuples, negative components."""
    rng = np.random.default_rng(18)
    for k in (1, 2):
        data = _case(dtype, 0, rng)["data"]  # (3, 4, 2), NaN, -0 and a subnormal among float values
        indices = np.stack([rng.integers(-d, d, 6) for d in data.shape[:k]], axis=-1).astype(np.int64)
        updates = np.resize(_case(dtype, 0, rng)["updates"], (6, *data.shape[k:]))  # (NaN, zeros, subnormals)
        feeds = {"data": data, "indices": indices, "updates": updates}
        model = _nd_model(data, indices, updates, reduction)
        want, _ = _run(model, feeds, "cpu")
        got, fallback = _run(model, feeds, backend)
        np.testing.assert_array_equal(_bits(got), _bits(want), err_msg=f"{backend} {reduction} k {k}")
        assert fallback == []


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("reduction", ["add", "max"])
def test_scatter_nd_out_of_range_is_the_cpus_error(backend, reduction):
    """ScatterND's index tuples picked on the device (a Gather from a table holding bad components): the GPU
    kernel checks them and the run raises the cpu's error, naming component 1's bound."""
    table = np.array([[0, 1], [2, -1], [1, 3], [-3, -4]], np.int64)  # rows 2 and 3: component 1 out of range
    nodes = [helper.make_node("Gather", ["table", "pick"], ["j"], name="pick", axis=0),
             helper.make_node("ScatterND", ["data", "j", "updates"], ["y"], name="scatter", reduction=reduction)]
    model = make_model(nodes, [("data", TensorProto.FLOAT, [3, 3]), ("pick", TensorProto.INT64, [2]),
                               ("updates", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, None)],
                       initializers={"table": table}, opset=18)
    good = {"data": np.arange(9, dtype=np.float32).reshape(3, 3), "pick": np.array([0, 1], np.int64),
            "updates": np.array([5.0, -2.0], np.float32)}
    want, _ = _run(model, good, "cpu")
    worker = ws.Worker(ws.load_model(model), backend)
    np.testing.assert_array_equal(worker.run(good)["y"], want)
    if backend != "cpu":
        assert worker.stats()["fallback_layers"] == []
    for pick, index in (([0, 2], 3), ([3, 1], -4)):
        for _ in range(2):  # recorded, then replayed
            with pytest.raises(IndexOutOfRangeError) as info:
                worker.run({**good, "pick": np.array(pick, np.int64)})
            assert (info.value.index, info.value.bound) == (index, 3)
            assert "scatter" in str(info.value)
        np.testing.assert_array_equal(worker.run(good)["y"], want)
    worker.close()


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_scatter_nd_cpu_matches_ort_with_repeated_tuples(reduction):
    pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(5)
    for k in (1, 2):
        data = rng.normal(size=(3, 4, 2)).astype(np.float32)
        indices = np.stack([rng.integers(-d, d, 6) for d in data.shape[:k]], axis=-1).astype(np.int64)
        updates = (rng.normal(size=(6, *data.shape[k:])) * 100).astype(np.float32)
        feeds = {"data": data, "indices": indices, "updates": updates}
        model = _nd_model(data, indices, updates, reduction)
        got, _ = _run(model, feeds, "cpu")
        np.testing.assert_array_equal(_bits(got), _bits(ort_outputs(model, feeds)[0]), err_msg=f"k {k}")
