"""ai.onnx.ml semantics against ONNX Runtime on every backend (issue 29, point 5): tree ensembles sum their leaf
weights in float32 in tree order (weights that cancel, 1e8, 1, -1e8, 3, give 3 as ORT gives, not float64's 4),
with AVERAGE and base values applied in float32 too; a double X sums in float64, as ORT does. Normalizer MAX
skips NaN, L1 and L2 sum element after element in float32, and L2 is sqrt(x^2 / sum) (NaN where the squares
overflow), rows of NaN, Inf, overflow and zeros alike on cpu, gpu-compute and gpu-pixel."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import BACKENDS, ort_outputs
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import wgsentis as ws

ML = "ai.onnx.ml"
CANCEL = [1e8, 1.0, -1e8, 3.0]  # float32 accumulation in this order: 3; float64: 4


def _model(node: onnx.NodeProto, x_type: int, features: int, outputs: list[tuple[str, int]],
           ml_opset: int = 3) -> onnx.ModelProto:
    graph = h.make_graph([node], "ml29", [h.make_tensor_value_info("X", x_type, [None, features])],
                         [h.make_tensor_value_info(n, t, None) for n, t in outputs])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17), h.make_opsetid(ML, ml_opset)])
    model.ir_version = 8
    return model


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray], backend: str) -> list[np.ndarray]:
    """The model's outputs on ``backend``; a GPU backend must run every layer (no fallback)."""
    with ws.Worker(ws.load_model(model), backend) as worker:
        got = worker.run(feeds)
        if backend != "cpu":
            assert worker.stats()["fallback_layers"] == [], worker.stats()["fallback_layers"]
    return list(got.values())


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    pytest.importorskip("onnxruntime")
    return ort_outputs(model, feeds)


def _stumps(weights: list[float], prefix: str = "target", ids: list[int] | None = None) -> dict:
    """Four depth-1 trees (x <= 0.5: leaf 1, else leaf 2); tree t's leaf 1 holds weights[t], its leaf 2
    weights[t] / 2, each to ``ids[t]`` (default 0)."""
    n = len(weights)
    ids = ids or [0] * n
    attrs = {"nodes_treeids": [t for t in range(n) for _ in range(3)], "nodes_nodeids": [0, 1, 2] * n,
             "nodes_modes": ["BRANCH_LEQ", "LEAF", "LEAF"] * n, "nodes_featureids": [0, 0, 0] * n,
             "nodes_values": [0.5, 0.0, 0.0] * n, "nodes_truenodeids": [1, 0, 0] * n,
             "nodes_falsenodeids": [2, 0, 0] * n}
    attrs[f"{prefix}_treeids"] = [t for t in range(n) for _ in range(2)]
    attrs[f"{prefix}_nodeids"] = [1, 2] * n
    attrs[f"{prefix}_ids"] = [i for i in ids for _ in range(2)]
    attrs[f"{prefix}_weights"] = [v for w in weights for v in (w, w / 2)]
    return attrs


X_TREES = np.array([[0.0], [1.0]], dtype=np.float32)  # row 0 reaches every leaf 1, row 1 every leaf 2


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("aggregate", "base"), [("SUM", None), ("AVERAGE", None), ("SUM", [-1e8])])
def test_regressor_sums_in_float32_as_ort(backend, aggregate, base):
    weights = CANCEL if base is None else [1e8, 3.0]  # with base -1e8: 1e8 + 3 rounds to 1e8, then 0
    extra = {} if base is None else {"base_values": base}
    node = h.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain=ML, n_targets=1, aggregate_function=aggregate,
                       **_stumps(weights), **extra)
    model = _model(node, T.FLOAT, 1, [("Y", T.FLOAT)])
    want = _ort(model, {"X": X_TREES})
    assert want[0][0, 0] == {"SUM": 3.0 if base is None else 0.0, "AVERAGE": 0.75}[aggregate]
    np.testing.assert_array_equal(_run(model, {"X": X_TREES}, backend)[0], want[0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_regressor_two_targets_sum_in_tree_order(backend):
    node = h.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain=ML, n_targets=2,
                       **_stumps([*CANCEL, 5.0], ids=[0, 0, 0, 0, 1]))
    model = _model(node, T.FLOAT, 1, [("Y", T.FLOAT)])
    want = _ort(model, {"X": X_TREES})
    np.testing.assert_array_equal(_run(model, {"X": X_TREES}, backend)[0], want[0])


def test_regressor_double_x_sums_in_float64_as_ort():
    """ORT's ThresholdType is double for a double X: 4 there, and on the cpu (the GPU backends decline float64)."""
    node = h.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain=ML, n_targets=1, **_stumps(CANCEL))
    model = _model(node, T.DOUBLE, 1, [("Y", T.FLOAT)])
    x = X_TREES.astype(np.float64)
    want = _ort(model, {"X": x})
    assert want[0][0, 0] == 4.0
    np.testing.assert_array_equal(_run(model, {"X": x}, "cpu")[0], want[0])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("post", ["NONE", "SOFTMAX"])
def test_classifier_sums_in_float32_as_ort(backend, post):
    node = h.make_node("TreeEnsembleClassifier", ["X"], ["L", "P"], domain=ML, classlabels_int64s=[0, 1, 2],
                       post_transform=post, **_stumps([*CANCEL, 2.5, 2.0], "class", ids=[0, 0, 0, 0, 1, 2]))
    model = _model(node, T.FLOAT, 1, [("L", T.INT64), ("P", T.FLOAT)])
    want = _ort(model, {"X": X_TREES})
    labels, scores = _run(model, {"X": X_TREES}, backend)
    np.testing.assert_array_equal(labels, want[0])  # 3 beats 2.5 (with float64: 4)
    np.testing.assert_allclose(scores, want[1], rtol=1e-6, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_tree_ensemble_5_sums_in_float32_as_ort(backend):
    n = len(CANCEL)
    node = h.make_node(
        "TreeEnsemble", ["X"], ["Y"], domain=ML, n_targets=1, aggregate_function=1, post_transform=0,
        tree_roots=list(range(n)), nodes_featureids=[0] * n,
        nodes_modes=numpy_helper.from_array(np.zeros(n, np.uint8)),
        nodes_splits=numpy_helper.from_array(np.full(n, 0.5, np.float32)),
        nodes_truenodeids=list(range(0, 2 * n, 2)), nodes_trueleafs=[1] * n,
        nodes_falsenodeids=list(range(1, 2 * n, 2)), nodes_falseleafs=[1] * n,
        leaf_targetids=[0] * 2 * n,
        leaf_weights=numpy_helper.from_array(np.array([v for w in CANCEL for v in (w, w / 2)], np.float32)))
    model = _model(node, T.FLOAT, 1, [("Y", T.FLOAT)], ml_opset=5)
    want = _ort(model, {"X": X_TREES})
    assert want[0][0, 0] == 3.0
    np.testing.assert_array_equal(_run(model, {"X": X_TREES}, backend)[0], want[0])


NAN, INF = np.nan, np.inf
NORMALIZER_ROWS = np.array([
    [NAN, 1, 2], [NAN, NAN, NAN], [INF, 1, 2], [-INF, 1, 2], [-INF, -INF, -INF], [INF, -INF, 1],
    [1e30, 1e30, 1], [3e38, 3e38, 1], [-3e38, -3e38, 0], [1e-30, 1e-30, 0], [0, 0, 0], [-1, -2, 0],
    [-0.0, 3, 4], [-5, -3, -1], [0.1, 0.7, 1e7],
    [1e-40, 2e-40, 0], [1e-20, 1e-20, 0], [1, 1e-40, 0], [1e-38, -3e-39, 1e-45],  # subnormals

], dtype=np.float32)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
def test_normalizer_matches_ort(backend, norm):
    """MAX of [nan, 1, 2] is 2 ([nan, 0.5, 1]), all-NaN rows stay NaN, [-inf]*3 becomes +inf (divided by the
    lowest float); L1 of an overflowing row is 0 (x / inf); L2 of [1e30, 1e30, 1] is [nan, nan, 0]."""
    node = h.make_node("Normalizer", ["X"], ["Y"], domain=ML, norm=norm)
    model = _model(node, T.FLOAT, 3, [("Y", T.FLOAT)], ml_opset=1)
    want = _ort(model, {"X": NORMALIZER_ROWS})[0]
    got = _run(model, {"X": NORMALIZER_ROWS}, backend)[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{backend} {norm}: NaN positions")
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0, err_msg=f"{backend} {norm}")
    finite = ~np.isnan(want)
    np.testing.assert_array_equal(np.signbit(got[finite]), np.signbit(want[finite]), err_msg="signs (zeros too)")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("norm", ["L1", "L2"])
def test_normalizer_long_row_sums_in_order(backend, norm):
    """A long row whose float32 sum depends on the order: ORT adds one element after the other."""
    x = np.concatenate([[1e7], np.full(63, 0.3), [-1e7], np.full(7, 0.7)]).astype(np.float32)[None, :]
    node = h.make_node("Normalizer", ["X"], ["Y"], domain=ML, norm=norm)
    model = _model(node, T.FLOAT, x.shape[1], [("Y", T.FLOAT)], ml_opset=1)
    want = _ort(model, {"X": x})[0]
    np.testing.assert_allclose(_run(model, {"X": x}, backend)[0], want, rtol=1e-6, atol=0)
