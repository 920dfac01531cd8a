"""Data-driven indices outside their axis raise IndexOutOfRangeError on every backend and every run.

Each model takes its indices as a graph input, so a gpu-compute worker records a plan of GPU dispatches
on its first run and replays it afterwards: the replays, not the recording (which sees the indices on
the host), are where an index past the end used to be clamped silently. Every case runs valid indices,
then bad ones several times (replays), then valid ones again (the worker stays usable), and compares
the valid results with numpy and the error with the CPU backend's: same class, layer, index and bound.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnx.numpy_helper
import pytest
from helpers import BACKENDS, make_model
from onnx import TensorProto, helper

import wgsentis as ws
from wgsentis.errors import IndexOutOfRangeError, LayerError

F, I32, I64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64
_ONNX_OF = {np.dtype(np.float32): F, np.dtype(np.int32): I32, np.dtype(np.int64): I64}


def _model(op: str, feeds: dict[str, np.ndarray], opset: int = 17, **attrs: Any) -> onnx.ModelProto:
    """One ``op`` node (named "node") over ``feeds``, all graph inputs, in their order."""
    node = helper.make_node(op, list(feeds), ["y"], name="node", **attrs)
    return make_model([node], [(k, _ONNX_OF[v.dtype], list(v.shape)) for k, v in feeds.items()],
                      [("y", TensorProto.UNDEFINED, None)], opset=opset)


def _expect_error(worker: ws.Worker, feeds: dict[str, np.ndarray], layer: str, op_type: str, index: int,
                  bound: int) -> None:
    with pytest.raises(IndexOutOfRangeError) as info:
        worker.run(feeds)
    err = info.value
    assert (err.layer, err.op_type, err.index, err.bound) == (layer, op_type, index, bound), str(err)
    assert f"'{layer}'" in str(err) and str(index) in str(err) and f"size {bound}" in str(err)


def _exercise(backend: str, model: onnx.ModelProto, good: dict[str, np.ndarray], want: np.ndarray,
              bad: list[tuple[dict[str, np.ndarray], int, int]], layer: str = "node", op_type: str = "") -> ws.Worker:
    """Valid, each bad feed three times, valid again; then a fresh worker whose first run is bad.
    ``bad``: (feeds, the index the error must name, its bound)."""
    op_type = op_type or model.graph.node[0].op_type
    worker = ws.Worker(ws.load_model(model), backend)
    np.testing.assert_array_equal(worker.run(good)["y"], want)
    if backend == "gpu-compute":
        assert layer in worker.stats()["gpu_layers"], worker.stats()  # replays run the GPU kernel
    for feeds, index, bound in bad:
        for _ in range(3):
            _expect_error(worker, feeds, layer, op_type, index, bound)
        np.testing.assert_array_equal(worker.run(good)["y"], want)
    fresh = ws.Worker(ws.load_model(model), backend)
    feeds, index, bound = bad[0]
    for _ in range(2):
        _expect_error(fresh, feeds, layer, op_type, index, bound)
    np.testing.assert_array_equal(fresh.run(good)["y"], want)
    return worker


def _with(feeds: dict[str, np.ndarray], **changes: Any) -> dict[str, np.ndarray]:
    out = dict(feeds)
    for name, value in changes.items():
        out[name] = np.asarray(value, dtype=feeds[name].dtype).reshape(feeds[name].shape)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_gather(backend, axis, dtype):
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    n = x.shape[axis]
    idx = np.array([[0, n - 1], [-1, -n]], dtype)  # negative indices in range are valid
    feeds = {"x": x, "i": idx}
    bad = [(_with(feeds, i=[[0, n], [1, 2]]), n, n),  # index == dim
           (_with(feeds, i=[[0, 1], [-n - 1, 2]]), -n - 1, n),  # below -dim
           (_with(feeds, i=[[n + 3, n], [-n - 7, 0]]), n + 3, n)]  # the largest past the end is named
    if dtype == np.int64:
        bad.append((_with(feeds, i=[[0, 2**40], [1, 2]]), 2**40, n))  # must not wrap to a valid int32
        bad.append((_with(feeds, i=[[0, -(2**40)], [1, 2]]), -(2**40), n))
    _exercise(backend, _model("Gather", feeds, axis=axis), feeds, np.take(x, idx, axis=axis), bad)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gather_elements(backend):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    idx = np.array([[0, 2, -1], [-3, 1, 0]], np.int64)
    feeds = {"x": x, "i": idx}
    want = np.take_along_axis(x[:2], np.where(idx < 0, idx + 4, idx), axis=1)
    bad = [(_with(feeds, i=[[0, 4, 1], [0, 0, 0]]), 4, 4), (_with(feeds, i=[[0, 1, 1], [0, -5, 0]]), -5, 4),
           (_with(feeds, i=[[2**40, 1, 1], [0, 0, 0]]), 2**40, 4)]
    _exercise(backend, _model("GatherElements", feeds, axis=1), feeds, want, bad)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op, opset", [("ScatterElements", 16), ("Scatter", 10)])
def test_scatter_elements(backend, op, opset):
    x = np.zeros((3, 4), np.float32)
    idx = np.array([[1, -1], [0, 2]], np.int64)
    upd = np.array([[1, 2], [3, 4]], np.float32)
    feeds = {"x": x, "i": idx, "u": upd}
    want = x.copy()
    want[0, 1], want[0, 3], want[1, 0], want[1, 2] = 1, 2, 3, 4
    bad = [(_with(feeds, i=[[1, 4], [0, 2]]), 4, 4), (_with(feeds, i=[[1, 1], [-5, 2]]), -5, 4),
           (_with(feeds, i=[[1, 1], [-(2**40), 2]]), -(2**40), 4)]
    _exercise(backend, _model(op, feeds, opset=opset, axis=1), feeds, want, bad)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gather_nd(backend):
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    idx = np.array([[0, 2], [1, -3]], np.int64)  # tuples over the first two axes: slices of 4
    feeds = {"x": x, "i": idx}
    want = np.stack([x[0, 2], x[1, 0]])
    # The first component whose values leave their axis is named, with that axis's size.
    bad = [(_with(feeds, i=[[0, 3], [1, 0]]), 3, 3), (_with(feeds, i=[[2, 5], [0, 0]]), 2, 2),
           (_with(feeds, i=[[0, 0], [-3, -9]]), -3, 2), (_with(feeds, i=[[0, 2**40], [0, 0]]), 2**40, 3)]
    _exercise(backend, _model("GatherND", feeds), feeds, want, bad)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", ["Gather", "GatherND"])
def test_a_gather_of_empty_slices_still_checks_its_indices(backend, op):
    """Data (12, 0): every slice is empty, so the output is too, and no element of the gather reads an index;
    the GPU programs check them anyway (a YOLO export with NMS gathers from such a tensor when nothing is
    detected), and run on the GPU rather than fall back."""
    x = np.zeros((12, 0), np.float32)
    idx = np.array([1, 11, -12], np.int64) if op == "Gather" else np.array([[1], [11], [-12]], np.int64)
    feeds = {"x": x, "i": idx}
    bad = [(_with(feeds, i=[1, 12, 0]), 12, 12), (_with(feeds, i=[-13, 0, 0]), -13, 12),
           (_with(feeds, i=[2**40, 0, 0]), 2**40, 12)]
    worker = _exercise(backend, _model(op, feeds), feeds, np.zeros((3, 0), np.float32), bad)
    if backend != "cpu":
        assert worker.stats()["fallback_layers"] == [], worker.stats()["placements"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_array_feature_extractor(backend):
    """ai.onnx.ml's ArrayFeatureExtractor takes indices 0 .. last dim - 1 only: on the GPU, a Gather whose device
    check counts a negative index as out of range too (faults.wgsl checked_nonneg)."""
    feeds = {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "i": np.array([2, 0, 2], np.int64)}
    node = helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], name="node", domain="ai.onnx.ml")
    model = make_model([node], [("x", F, [2, 3]), ("i", I64, [3])], [("y", F, None)],
                       domains=[("ai.onnx.ml", 3)])
    bad = [(_with(feeds, i=[0, 3, 1]), 3, 3), (_with(feeds, i=[0, -1, 1]), -1, 3),
           (_with(feeds, i=[-7, 5, 1]), 5, 3), (_with(feeds, i=[0, -3, 1]), -3, 3)]
    worker = _exercise(backend, model, feeds, feeds["x"][:, [2, 0, 2]], bad)
    if backend != "cpu":
        assert worker.stats()["fallback_layers"] == [], worker.stats()["placements"]
    with pytest.raises(IndexOutOfRangeError, match=r"valid: 0\.\.2"):
        worker.run(_with(feeds, i=[0, -1, 1]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_gather_nd_batch_dims(backend):
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    idx = np.array([[[2, 3]], [[-1, 0]]], np.int64)  # (batch 2, 1 tuple, k 2)
    feeds = {"x": x, "i": idx}
    want = np.array([[x[0, 2, 3]], [x[1, 2, 0]]], np.float32)
    bad = [(_with(feeds, i=[[[2, 4]], [[0, 0]]]), 4, 4), (_with(feeds, i=[[[0, 0]], [[-4, 0]]]), -4, 3)]
    _exercise(backend, _model("GatherND", feeds, batch_dims=1), feeds, want, bad)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("opset", [11, 16])
def test_scatter_nd(backend, opset):
    x = np.zeros((3, 2), np.float32)
    idx = np.array([[2], [-3]], np.int64)
    upd = np.array([[1, 2], [3, 4]], np.float32)
    feeds = {"x": x, "i": idx, "u": upd}
    want = np.array([[3, 4], [0, 0], [1, 2]], np.float32)
    bad = [(_with(feeds, i=[[3], [0]]), 3, 3), (_with(feeds, i=[[1], [-4]]), -4, 3),
           (_with(feeds, i=[[2**40], [0]]), 2**40, 3)]
    _exercise(backend, _model("ScatterND", feeds, opset=opset), feeds, want, bad)


@pytest.mark.parametrize("backend", BACKENDS)
def test_indices_computed_on_the_device(backend):
    """Indices produced by an earlier layer exist only on the device: even the recorded first run
    relies on the kernel's own check."""
    x = np.arange(10, dtype=np.float32)
    feeds = {"x": x, "i": np.array([2, 3], np.int64)}
    # (A Max, not an Add: an int64 Add runs on the host, its sum could pass the int32 words the device holds.)
    nodes = [helper.make_node("Max", ["i", "lowest"], ["j"], name="shift"),
             helper.make_node("Gather", ["x", "j"], ["y"], name="node")]
    model = make_model(nodes, [("x", F, [10]), ("i", I64, [2])], [("y", F, None)],
                       initializers={"lowest": np.array(-100, np.int64)})
    worker = _exercise(backend, model, feeds, x[[2, 3]], [(_with(feeds, i=[10, 0]), 10, 10),
                                                          (_with(feeds, i=[0, -11]), -11, 10)], op_type="Gather")
    if backend == "gpu-compute":
        assert worker.stats()["gpu_layers"] == ["shift", "node"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_fault_reported_before_a_host_layer_reads_its_output(backend):
    """A host layer (an int64 ScatterElements add, which the GPU leaves to the host: its result could pass the
    int32 words the device holds int64 in) reading a faulted Gather's output downloads it mid-run: the Gather's
    error is what the run reports, as on the CPU, not the host layer's own error about its own bad indices."""
    x = np.arange(12, dtype=np.int64).reshape(4, 3)
    feeds = {"x": x, "i": np.array([0, 3], np.int64), "j": np.array([[0, 1, 2]], np.int64),
             "u": np.ones((1, 3), np.int64)}
    nodes = [helper.make_node("Gather", ["x", "i"], ["g"], name="node", axis=0),
             helper.make_node("ScatterElements", ["g", "j", "u"], ["y"], name="scatter", axis=1, reduction="add")]
    model = make_model(nodes, [("x", I64, [4, 3]), ("i", I64, [2]), ("j", I64, [1, 3]), ("u", I64, [1, 3])],
                       [("y", I64, None)])
    want = x[[0, 3]].copy()
    want[0] += 1
    bad = _with(feeds, i=[0, 4], j=[[0, 3, 1]])  # both layers at fault: the first one is named
    worker = _exercise(backend, model, feeds, want, [(bad, 4, 4)], op_type="Gather")
    if backend == "gpu-compute":
        assert worker.stats()["fallback_layers"] == ["scatter"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_hot_out_of_range_is_an_all_off_row(backend):
    """ONNX OneHot: indices outside [-depth, depth) give a row of off values, not an error."""
    idx = np.array([1, -1, 4, -5, 2**40], np.int64)
    i32 = np.array([1, -1, 4, -5, 2**31 - 1], np.int32)
    flt = np.array([1.7, -1.2, 4.0, np.nan, 3e9], np.float32)
    nodes = [helper.make_node("OneHot", ["i", "d", "v"], ["y"], name="node")]
    for values in (idx, i32, flt):
        model = make_model(nodes, [("i", _ONNX_OF[values.dtype], [5])], [("y", F, None)],
                           initializers={"d": np.array(4, np.int64), "v": np.array([0, 9], np.float32)})
        worker = ws.Worker(ws.load_model(model), backend)
        for _ in range(2):  # record, then replay
            got = worker.run({"i": values})["y"]
            np.testing.assert_array_equal(got, [[0, 9, 0, 0], [0, 0, 0, 9], [0] * 4, [0] * 4, [0] * 4])


@pytest.mark.parametrize("backend", BACKENDS)
def test_top_k_larger_than_the_axis_is_an_error(backend):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    nodes = [helper.make_node("TopK", ["x", "k"], ["y", "ix"], name="node", axis=1)]
    model = make_model(nodes, [("x", F, [2, 3]), ("k", I64, [1])], [("y", F, None), ("ix", I64, None)], opset=11)
    worker = ws.Worker(ws.load_model(model), backend)
    np.testing.assert_array_equal(worker.run({"x": x, "k": np.array([2], np.int64)})["y"], [[2, 1], [5, 4]])
    for _ in range(2):
        with pytest.raises(LayerError, match=r"layer 'node' \(TopK\): .*k=4 is out of range for axis"):
            worker.run({"x": x, "k": np.array([4], np.int64)})


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("axis", [None, 0])
def test_compress_condition_longer_than_the_axis(backend, axis):
    """A condition longer than the axis (or the flattened input) selects nothing beyond it, as in ORT."""
    x = np.array([1, 2, 3], np.float32)
    attrs = {} if axis is None else {"axis": axis}
    nodes = [helper.make_node("Compress", ["x", "c"], ["y"], name="node", **attrs)]
    model = make_model(nodes, [("x", F, [3]), ("c", TensorProto.BOOL, [5])], [("y", F, None)])
    worker = ws.Worker(ws.load_model(model), backend)
    for _ in range(2):
        got = worker.run({"x": x, "c": np.array([1, 0, 1, 0, 1], bool)})["y"]
        np.testing.assert_array_equal(got, [1, 3])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_gather_from_an_empty_host_made_tensor_runs_on_the_gpu(backend):
    """NonZero of an all-negative input is (2, 0) and lives on the host (its size is data-dependent); the Gather
    after it (an NMS's selected rows, when it selected none) has no element to read and runs on the GPU."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("NonZero", ["r"], ["nz"]),
             helper.make_node("Gather", ["nz", "k"], ["y"], name="node", axis=0)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [3, 4])],
                              [helper.make_tensor_value_info("y", I64, None)],
                              [onnx.numpy_helper.from_array(np.array(1, np.int64), "k")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    with ws.Worker(ws.load_model(model), backend) as worker:
        for x in (-np.ones((3, 4), np.float32), np.eye(3, 4, dtype=np.float32)):
            np.testing.assert_array_equal(worker.run({"x": x})["y"], np.nonzero(np.maximum(x, 0))[1])
            if backend != "cpu":
                assert worker.stats()["fallback_layers"] == ["NonZero_1"], worker.stats()["placements"]
