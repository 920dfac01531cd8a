"""Tree ensembles (TreeEnsembleRegressor, TreeEnsembleClassifier, TreeEnsemble 5) on gpu-compute vs the numpy
kernel, with no fallback layer: forests and boosted ensembles of realistic size, every aggregate, post transform
and branch mode, NaNs, set membership, binary classifiers as ORT decides them, tree blocks under the loop limit,
and the cases the GPU declines (they run the numpy kernel)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from test_ml_ops import _classifier, _model, _regressor, _tensor

import gpu_check
import wgsentis as ws
from ml_models import to_tree_ensemble
from wgsentis.ops import ml_gpu

pytestmark = gpu_check.requires_gpu

ALL_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")


def _x(rng: np.random.Generator, rows: int, features: int, nan: float = 0.0) -> np.ndarray:
    X = rng.normal(size=(rows, features)).astype(np.float32)
    X[rng.random(X.shape) < nan] = np.nan
    return X


def _compare(model, X, **kw):
    return gpu_check.compare(model, {"X": X}, backend="gpu-compute", **kw)


def test_random_forest_classifier_of_realistic_size():
    """100 trees of depth 8 over 20 features, 10 classes, 1000 rows; labels are computed on the GPU."""
    rng = np.random.default_rng(0)
    node, outputs = _classifier(rng, 100, 8, 20, 10, scale=0.01)
    got = _compare(_model(node, [_tensor("X", T.FLOAT, [None, 20])], outputs), _x(rng, 1000, 20))
    assert got["label"].dtype == np.int64


@pytest.mark.parametrize("post", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"])
def test_boosted_classifier_post_transforms(post):
    rng = np.random.default_rng(1)
    scale = 0.005 if post == "PROBIT" else 0.3
    node, outputs = _classifier(rng, 100, 6, 20, 4, positive=post == "PROBIT", scale=scale, post_transform=post,
                                base_values=[0.1, -0.2, 0.3, 0.0] if post != "PROBIT" else [0.1] * 4,
                                modes=ALL_MODES, missing=True)
    X = _x(rng, 1000, 20, nan=0.05)
    _compare(_model(node, [_tensor("X", T.FLOAT, [None, 20])], outputs), X, atol=2e-4 if post == "PROBIT" else 1e-5)


@pytest.mark.parametrize(("class_id", "positive", "post", "base"), [
    (0, True, "NONE", None), (0, False, "LOGISTIC", None), (1, True, "NONE", None), (0, False, "NONE", [0.3]),
    (0, False, "LOGISTIC", [0.0, 0.2]), (0, True, "PROBIT", None), (None, True, "SOFTMAX", None),
])
def test_binary_classifier(class_id, positive, post, base):
    """LightGBM / gradient boosting's one score per row and random forests' two columns, as ORT decides them."""
    rng = np.random.default_rng(2)
    extra = {"post_transform": post} | ({"base_values": base} if base else {})
    node, outputs = _classifier(rng, 100, 6, 20, 2, class_ids=None if class_id is None else [class_id],
                                positive=positive, scale=0.01, labels={"classlabels_int64s": [-3, 7]}, **extra)
    _compare(_model(node, [_tensor("X", T.FLOAT, [None, 20])], outputs), _x(rng, 1000, 20),
             atol=2e-4 if post == "PROBIT" else 1e-5)


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
def test_regressor_aggregates(aggregate):
    rng = np.random.default_rng(3)
    node = _regressor(rng, 100, 7, 20, 3, aggregate_function=aggregate, base_values=[0.5, -1.0, 2.0],
                      missing=True, modes=ALL_MODES)
    _compare(_model(node, [_tensor("X", T.FLOAT, [None, 20])], [_tensor("Y", T.FLOAT, None)]),
             _x(rng, 1000, 20, nan=0.05), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("post", [0, 2])
def test_tree_ensemble_v5(post):
    rng = np.random.default_rng(4)
    node = to_tree_ensemble(_regressor(rng, 100, 8, 20, 1, aggregate_function="AVERAGE", missing=True))
    node.attribute.append(h.make_attribute("post_transform", post))
    model = _model(node, [_tensor("X", T.FLOAT, [None, 20])], [_tensor("Y", T.FLOAT, None)], ml_opset=5)
    _compare(model, _x(rng, 1000, 20, nan=0.02))


def test_tree_ensemble_v5_set_membership():
    """BRANCH_MEMBER sets of up to 40 values (the shader's binary search), NaN tracked as missing."""
    rng = np.random.default_rng(5)
    count, leaves = 63, 64
    members, modes = [], []
    for _ in range(count):
        member = rng.random() < 0.6
        modes.append(6 if member else int(rng.integers(0, 6)))
        if member:
            members += [*rng.choice(50, size=int(rng.integers(1, 41)), replace=False).astype(float), float("nan")]
    node = h.make_node(
        "TreeEnsemble", ["X"], ["Y"], domain="ai.onnx.ml", n_targets=2, tree_roots=[0, 1, 2],
        nodes_featureids=rng.integers(0, 6, count).tolist(),
        nodes_modes=_array(np.array(modes, np.uint8)),
        nodes_splits=_array(rng.integers(0, 50, count).astype(np.float32)),
        membership_values=_array(np.array(members, np.float32)),
        nodes_truenodeids=[2 * k + 1 if 2 * k + 1 < count else 2 * k + 1 - count for k in range(count)],
        nodes_falsenodeids=[2 * k + 2 if 2 * k + 2 < count else 2 * k + 2 - count for k in range(count)],
        nodes_trueleafs=[int(2 * k + 1 >= count) for k in range(count)],
        nodes_falseleafs=[int(2 * k + 2 >= count) for k in range(count)],
        nodes_missing_value_tracks_true=rng.integers(0, 2, count).tolist(),
        leaf_targetids=rng.integers(0, 2, leaves).tolist(),
        leaf_weights=_array(rng.normal(size=leaves).astype(np.float32)))
    X = rng.integers(0, 50, size=(1000, 6)).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan
    _compare(_model(node, [_tensor("X", T.FLOAT, [None, 6])], [_tensor("Y", T.FLOAT, None)], ml_opset=5), X)


def _array(value: np.ndarray):
    from onnx import numpy_helper

    return numpy_helper.from_array(value)


def test_tree_blocks_split_under_the_loop_limit():
    """A block of trees whose weight gathering would pass the loop limit is split into several dispatches."""

    class Limited:
        def __init__(self, limit: int) -> None:
            self.limit = limit

        def loops_fit(self, passes: int) -> bool:
            return passes <= self.limit

    blocks = ml_gpu._tree_blocks(Limited(2000), 1000, 10, 3)
    assert blocks is not None and len(blocks) > 1
    assert blocks[0][0] == 0 and blocks[-1][1] == 1000
    assert all(a[1] == b[0] for a, b in itertools.pairwise(blocks))
    assert ml_gpu._tree_blocks(Limited(10), 1000, 10, 3) is None


@pytest.mark.parametrize("case", ["string_labels", "double_thresholds", "double_input"])
def test_declined_cases_run_the_numpy_kernel(case):
    rng = np.random.default_rng(6)
    if case == "string_labels":
        node, outputs = _classifier(rng, 10, 4, 5, 3, labels={"classlabels_strings": ["a", "b", "c"]})
        model, X = _model(node, [_tensor("X", T.FLOAT, [None, 5])], outputs), _x(rng, 50, 5)
    else:
        node = _regressor(rng, 10, 4, 5, 1)
        if case == "double_thresholds":
            values = next(a for a in node.attribute if a.name == "nodes_values")
            node.attribute.remove(values)
            node.attribute.append(h.make_attribute("nodes_values_as_tensor", _array(
                np.array(values.floats, np.float64) + 1e-9)))
        dtype = T.DOUBLE if case == "double_input" else T.FLOAT
        model = _model(node, [_tensor("X", dtype, [None, 5])], [_tensor("Y", T.FLOAT, None)])
        X = _x(rng, 50, 5).astype(np.float64 if case == "double_input" else np.float32)
    wg = ws.load_model(model)
    expected = ws.Worker(wg, "cpu").run({"X": X})
    with ws.Worker(wg, "gpu-compute") as worker:
        got = worker.run({"X": X})
        if case != "double_input":  # a float64 X stays on the host: the layer runs there, planned, not a fallback
            assert worker.stats()["fallback_layers"]
    for name, value in expected.items():
        assert got[name].tolist() == value.tolist()
