"""Data-driven indices of the ops that run only on the host raise IndexOutOfRangeError on every backend.

These kernels (MaxUnpool, RoiAlign, MaxRoiPool, RotaryEmbedding, TensorScatter, the losses, the sequence
ops) have no GPU program: on gpu-compute they fall back to the CPU kernel, which must
raise the same typed error as the cpu backend (same layer, index and bound) instead of letting numpy wrap a
negative index or read past the end. Each case takes its indices as a graph input, runs valid ones (checked
against ONNX Runtime), then bad ones twice (record, replay), then valid ones again on the same worker.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from helpers import BACKENDS, make_model, ort_outputs
from onnx import TensorProto, helper

import wgsentis as ws
from wgsentis.errors import IndexOutOfRangeError

F, I64 = TensorProto.FLOAT, TensorProto.INT64
_ONNX_OF = {np.dtype(np.float32): F, np.dtype(np.int64): I64}
ML = ("ai.onnx.ml", 3)


def _model(op: str, feeds: dict[str, np.ndarray], opset: int, domains=(), **attrs: Any) -> onnx.ModelProto:
    """One ``op`` node (named "node") over ``feeds``, all graph inputs, in their order."""
    domain = "ai.onnx.ml" if domains else ""
    node = helper.make_node(op, list(feeds), ["y"], name="node", domain=domain, **attrs)
    return make_model([node], [(k, _ONNX_OF[v.dtype], list(v.shape)) for k, v in feeds.items()],
                      [("y", F, None)], opset=opset, domains=domains)


def _with(feeds: dict[str, np.ndarray], **changes: Any) -> dict[str, np.ndarray]:
    out = dict(feeds)
    for name, value in changes.items():
        out[name] = np.asarray(value, dtype=feeds[name].dtype).reshape(feeds[name].shape)
    return out


def _exercise(backend: str, model: onnx.ModelProto, good: dict[str, np.ndarray],
              bad: list[tuple[dict[str, np.ndarray], int, int, bool]], op_type: str = "") -> None:
    """Valid feeds match ONNX Runtime; each bad feed raises twice (record, replay), then valid ones still run.
    ``bad``: (feeds, the index the error must name, its bound, whether negative indices are valid)."""
    op_type = op_type or model.graph.node[0].op_type
    want = ort_outputs(model, good)[0]
    worker = ws.Worker(ws.load_model(model), backend)
    np.testing.assert_allclose(worker.run(good)["y"], want, rtol=1e-5, atol=1e-6)
    if backend == "gpu-compute":
        assert "node" in worker.stats()["fallback_layers"], worker.stats()  # no GPU program: the CPU kernel
    for feeds, index, bound, negative_ok in bad:
        for _ in range(2):
            with pytest.raises(IndexOutOfRangeError) as info:
                worker.run(feeds)
            err = info.value
            assert (err.layer, err.op_type, err.index, err.bound) == ("node", op_type, index, bound), str(err)
            lowest = -bound if negative_ok else 0
            assert f"'node' ({op_type})" in str(err) and f"value {index} " in str(err), str(err)
            assert f"size {bound} (valid: {lowest}..{bound - 1})" in str(err), str(err)
        np.testing.assert_allclose(worker.run(good)["y"], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_unpool(backend):
    """I holds linear indices into the (N, C, H, W) output: 0 .. N*C*H*W - 1."""
    feeds = {"x": np.array([[[[5, 6], [7, 8]]]], np.float32), "i": np.array([[[[5, 7], [13, 15]]]], np.int64)}
    bad = [(_with(feeds, i=[5, 7, 13, 16]), 16, 16, False), (_with(feeds, i=[5, -1, 13, 15]), -1, 16, False),
           (_with(feeds, i=[2**40, 7, -3, 15]), 2**40, 16, False)]
    _exercise(backend, _model("MaxUnpool", feeds, 11, kernel_shape=[2, 2], strides=[2, 2]), feeds, bad)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("opset", [10, 16])
def test_roi_align_batch_indices(backend, opset):
    feeds = {"x": np.arange(32, dtype=np.float32).reshape(2, 1, 4, 4),
             "rois": np.array([[0, 0, 3, 3], [1, 1, 2.5, 3]], np.float32), "b": np.array([1, 0], np.int64)}
    bad = [(_with(feeds, b=[0, 2]), 2, 2, False), (_with(feeds, b=[-1, 0]), -1, 2, False)]
    model = _model("RoiAlign", feeds, opset, output_height=2, output_width=2, sampling_ratio=2)
    _exercise(backend, model, feeds, bad)


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_roi_pool_batch_id(backend):
    """The batch_id (rois[:, 0], a float) is truncated toward zero, as ONNX Runtime does: -0.5 is image 0."""
    feeds = {"x": np.arange(32, dtype=np.float32).reshape(2, 1, 4, 4),
             "rois": np.array([[1.7, 0, 0, 3, 3], [-0.5, 1, 1, 2, 3]], np.float32)}
    bad = [(_with(feeds, rois=[[2, 0, 0, 3, 3], [0, 1, 1, 2, 3]]), 2, 2, False),
           (_with(feeds, rois=[[1, 0, 0, 3, 3], [-1, 1, 1, 2, 3]]), -1, 2, False)]
    _exercise(backend, _model("MaxRoiPool", feeds, 17, pooled_shape=[2, 2]), feeds, bad)


@pytest.mark.parametrize("backend", BACKENDS)
def test_rotary_embedding_position_ids(backend):
    """position_ids pick rows of the (max_position_id_plus_1, dim/2) caches: 0 .. max_position_id."""
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((1, 2, 3, 4)).astype(np.float32),
             "cos": rng.standard_normal((5, 2)).astype(np.float32),
             "sin": rng.standard_normal((5, 2)).astype(np.float32), "p": np.array([[4, 0, 2]], np.int64)}
    bad = [(_with(feeds, p=[[0, 5, 1]]), 5, 5, False), (_with(feeds, p=[[0, 1, -1]]), -1, 5, False)]
    _exercise(backend, _model("RotaryEmbedding", feeds, 23), feeds, bad)


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_scatter_linear(backend):
    """Linear mode: write index w needs 0 <= w and w + sequence_length <= max_sequence_length (here 0 .. 2)."""
    feeds = {"cache": np.zeros((2, 1, 4, 2), np.float32), "u": np.arange(8, dtype=np.float32).reshape(2, 1, 2, 2) + 1,
             "w": np.array([0, 2], np.int64)}
    bad = [(_with(feeds, w=[0, 3]), 3, 3, False), (_with(feeds, w=[-1, 0]), -1, 3, False)]
    _exercise(backend, _model("TensorScatter", feeds, 24), feeds, bad)


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_scatter_circular(backend):
    """Circular mode: any w >= 0 is valid (taken modulo max_sequence_length); a negative one is not."""
    feeds = {"cache": np.zeros((2, 1, 4, 2), np.float32), "u": np.arange(8, dtype=np.float32).reshape(2, 1, 2, 2) + 1,
             "w": np.array([9, 3], np.int64)}
    bad = [(_with(feeds, w=[0, -1]), -1, 4, False)]
    _exercise(backend, _model("TensorScatter", feeds, 24, mode="circular"), feeds, bad)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
def test_loss_targets(backend, op):
    """Targets are classes 0 .. C-1; ignore_index (here -1) is skipped, any other negative is an error."""
    feeds = {"x": np.linspace(-1, 1, 12, dtype=np.float32).reshape(2, 3, 2),
             "t": np.array([[0, 2], [-1, 1]], np.int64)}
    bad = [(_with(feeds, t=[[0, 3], [-1, 1]]), 3, 3, False), (_with(feeds, t=[[0, 2], [-2, 1]]), -2, 3, False)]
    _exercise(backend, _model(op, feeds, 13, reduction="none", ignore_index=-1), feeds, bad)


def _sequence_model(op: str, with_tensor: bool) -> onnx.ModelProto:
    """SequenceConstruct(a, b, c) -> ``op`` at graph input ``p`` (node "node") -> a tensor ``y``."""
    nodes = [helper.make_node("SequenceConstruct", ["a", "b", "c"], ["s"], name="construct")]
    if op == "SequenceAt":
        nodes.append(helper.make_node(op, ["s", "p"], ["y"], name="node"))
    else:
        nodes.append(helper.make_node(op, ["s", "a", "p"] if with_tensor else ["s", "p"], ["t"], name="node"))
        nodes.append(helper.make_node("ConcatFromSequence", ["t"], ["y"], name="concat", axis=0))
    inputs = [(n, F, [1, 2]) for n in "abc"] + [("p", I64, [])]
    return make_model(nodes, inputs, [("y", F, None)], opset=17)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op, good, bad", [  # bad: (position, sequence length)
    ("SequenceAt", -3, [(3, 3), (-4, 3)]),
    ("SequenceErase", 2, [(3, 3), (-4, 3)]),
    ("SequenceInsert", 3, [(4, 3), (-4, 3)]),  # 3 == length appends; -length .. length - 1 insert before
])
def test_sequence_positions(backend, op, good, bad):
    """Sequence positions count from the back when negative: -length .. length - 1 are valid."""
    feeds = {n: np.full((1, 2), v, np.float32) for n, v in zip("abc", (1, 2, 3), strict=True)}
    feeds["p"] = np.array(good, np.int64)
    model = _sequence_model(op, with_tensor=op == "SequenceInsert")
    _exercise(backend, model, feeds, [(_with(feeds, p=p), p, bound, True) for p, bound in bad], op)
