"""The ai.onnx.ml GPU programs on both GPU backends (gpu-compute and gpu-pixel) vs the numpy kernel, with no
fallback layer. Tree ensembles (TreeEnsembleRegressor, TreeEnsembleClassifier, TreeEnsemble 5): forests and
boosted ensembles of realistic size, every aggregate, post transform and branch mode, NaNs, set membership,
binary classifiers as ORT decides them, tree blocks under the loop limit, and the cases the GPU declines (they
run the numpy kernel). Linear and SVM models and the feature transforms: also against ONNX Runtime."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper
from test_ml_ops import _classifier, _model, _regressor, _tensor

import gpu_check
import wgsentis as ws
from wgsentis.errors import LayerError
from ml_models import to_tree_ensemble
from wgsentis.dtypes import NUMPY_TO_ONNX
from wgsentis.ops import ml_trees_gpu, ml_trees_pixel

ort = pytest.importorskip("onnxruntime")

pytestmark = gpu_check.requires_gpu

ALL_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")


def _x(rng: np.random.Generator, rows: int, features: int, nan: float = 0.0) -> np.ndarray:
    X = rng.normal(size=(rows, features)).astype(np.float32)
    X[rng.random(X.shape) < nan] = np.nan
    return X


def _compare(model, X, **kw):
    return gpu_check.compare(model, {"X": X}, **kw)  # both GPU backends


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

    blocks = ml_trees_gpu._tree_blocks(Limited(2000), 1000, 10, 3)
    assert blocks is not None and len(blocks) > 1
    assert blocks[0][0] == 0 and blocks[-1][1] == 1000
    assert all(a[1] == b[0] for a, b in itertools.pairwise(blocks))
    assert ml_trees_gpu._tree_blocks(Limited(10), 1000, 10, 3) is None


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


def test_pixel_tree_blocks_split_under_the_loop_limit():
    class Limited:
        def loops_fit(self, passes: int) -> bool:
            return passes <= 3000

    blocks = ml_trees_pixel.tree_blocks(Limited(), 100, 8, 0, 10)
    assert blocks is not None and len(blocks) > 1 and blocks[-1][1] == 100
    assert all(a[1] == b[0] for a, b in itertools.pairwise(blocks))
    assert ml_trees_pixel.tree_blocks(Limited(), 100, 3000, 0, 10) is None


# -- linear and SVM models, feature transforms: both GPU backends vs the numpy kernel and ONNX Runtime ------------


def _ml_model(node, inputs: dict[str, np.ndarray], outputs: list[tuple[str, int]], constants=None):
    graph = h.make_graph([node], "ml", [_tensor(k, NUMPY_TO_ONNX[v.dtype], list(v.shape)) for k, v in inputs.items()],
                         [_tensor(name, dtype, None) for name, dtype in outputs],
                         [numpy_helper.from_array(v, k) for k, v in (constants or {}).items()])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 8
    return model


def _everywhere(model, feeds: dict[str, np.ndarray], rtol: float = 1e-4, atol: float = 1e-5,
                with_ort: bool = True) -> None:
    """Both GPU backends against the numpy kernel (no fallback), and against ONNX Runtime."""
    got = gpu_check.compare(model, feeds, rtol=rtol, atol=atol)
    if not with_ort:
        return
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for out, expected in zip(model.graph.output, session.run(None, feeds), strict=True):
        if expected.dtype.kind in "iub":
            np.testing.assert_array_equal(got[out.name], expected)
        else:
            np.testing.assert_allclose(got[out.name], expected, rtol=rtol, atol=atol, err_msg=out.name)


def _linear(rng, op: str, count: int, features: int, **attrs):
    outputs = [("Y", T.FLOAT)] if op == "LinearRegressor" else [("label", T.INT64), ("scores", T.FLOAT)]
    return h.make_node(op, ["X"], [o[0] for o in outputs], domain="ai.onnx.ml",
                       coefficients=rng.normal(size=count * features).astype(np.float32).tolist(), **attrs), outputs


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC"])
def test_linear_regressor(post):
    rng = np.random.default_rng(20)
    node, outputs = _linear(rng, "LinearRegressor", 3, 20, targets=3, intercepts=[0.5, -1.0, 0.25],
                            post_transform=post)
    X = _x(rng, 1000, 20)
    _everywhere(_ml_model(node, {"X": X}, outputs), {"X": X})


@pytest.mark.parametrize(("post", "count", "labels"), [
    ("NONE", 4, [4, 5, 6, 9]), ("SOFTMAX", 4, [4, 5, 6, 9]), ("LOGISTIC", 3, [1, 2, 3]),
    ("SOFTMAX_ZERO", 3, [0, 1, 2]), ("NONE", 1, [3, 7]), ("LOGISTIC", 1, [3, 7]), ("PROBIT", 1, [3, 7]),
    ("SOFTMAX", 1, [3, 7]), ("NONE", 1, [1]),
])
def test_linear_classifier(post, count, labels):
    """Multiclass argmax, and the one-score binary model (labels by its sign, ORT's two columns)."""
    rng = np.random.default_rng(21)
    scale = 0.02 if post == "PROBIT" else 1.0
    node, outputs = _linear(rng, "LinearClassifier", count, 20, intercepts=(rng.normal(size=count) * scale).tolist(),
                            classlabels_ints=labels, post_transform=post)
    coef = next(a for a in node.attribute if a.name == "coefficients")
    coef.floats[:] = (np.array(coef.floats) * scale + (0.5 if post == "PROBIT" else 0)).astype(np.float32).tolist()
    X = np.abs(_x(rng, 1000, 20)) / 40 if post == "PROBIT" else _x(rng, 1000, 20)
    # ORT 1.32 writes a binary PROBIT's N scores into an (N, 2) output, row-major (half of it garbage), and
    # refuses one score with one label: the numpy kernel is the reference there.
    _everywhere(_ml_model(node, {"X": X}, outputs), {"X": X}, atol=2e-4 if post == "PROBIT" else 1e-5,
                with_ort=(post != "PROBIT" and len(labels) == 2) or count > 1)


def _svm_node(rng, op: str, kernel: str, features: int, supports: int, **attrs):
    return h.make_node(op, ["X"], ["label", "scores"] if op == "SVMClassifier" else ["Y"], domain="ai.onnx.ml",
                       kernel_type=kernel, kernel_params=[0.05, 0.5, 3.0],
                       support_vectors=rng.normal(size=supports * features).astype(np.float32).tolist(), **attrs)


@pytest.mark.parametrize(("kernel", "one_class"), [("LINEAR", 0), ("POLY", 0), ("RBF", 0), ("SIGMOID", 0),
                                                   ("RBF", 1)])
def test_svm_regressor(kernel, one_class):
    rng = np.random.default_rng(22)
    node = _svm_node(rng, "SVMRegressor", kernel, 20, 50, n_supports=50, one_class=one_class, rho=[0.3],
                     coefficients=rng.normal(size=50).astype(np.float32).tolist())
    X = _x(rng, 1000, 20)
    _everywhere(_ml_model(node, {"X": X}, [("Y", T.FLOAT)]), {"X": X})


def test_linear_svm_regressor():
    rng = np.random.default_rng(23)
    node = h.make_node("SVMRegressor", ["X"], ["Y"], domain="ai.onnx.ml", n_supports=0, rho=[0.3],
                       kernel_type="LINEAR", kernel_params=[0.0, 0.0, 1.0],
                       coefficients=rng.normal(size=20).astype(np.float32).tolist())
    X = _x(rng, 1000, 20)
    _everywhere(_ml_model(node, {"X": X}, [("Y", T.FLOAT)]), {"X": X})


@pytest.mark.parametrize(("kernel", "classes", "post"), [("RBF", 3, "NONE"), ("RBF", 5, "NONE"), ("POLY", 4, "NONE"),
                                                         ("SIGMOID", 3, "NONE"), ("LINEAR", 2, "NONE"),
                                                         ("RBF", 2, "LOGISTIC"), ("RBF", 2, "NONE")])
def test_svm_classifier(kernel, classes, post):
    """One-vs-one decision values and votes (scores; probabilities stay on the host)."""
    rng = np.random.default_rng(24)
    per, pairs = 12, classes * (classes - 1) // 2
    node = _svm_node(rng, "SVMClassifier", kernel, 20, per * classes, vectors_per_class=[per] * classes,
                     coefficients=rng.normal(size=(classes - 1) * per * classes).astype(np.float32).tolist(),
                     rho=rng.normal(size=pairs).astype(np.float32).tolist(),
                     classlabels_ints=list(range(3, 3 + classes)), post_transform=post)
    X = _x(rng, 1000, 20)
    _everywhere(_ml_model(node, {"X": X}, [("label", T.INT64), ("scores", T.FLOAT)]), {"X": X})


def test_linear_svm_classifier():
    rng = np.random.default_rng(25)
    node = h.make_node("SVMClassifier", ["X"], ["label", "scores"], domain="ai.onnx.ml", kernel_type="LINEAR",
                       kernel_params=[0.0, 0.0, 1.0], coefficients=rng.normal(size=4 * 20).astype(np.float32).tolist(),
                       rho=[0.1, 0.2, -0.1, 0.0], classlabels_ints=[0, 1, 2, 3])
    X = _x(rng, 1000, 20)
    _everywhere(_ml_model(node, {"X": X}, [("label", T.INT64), ("scores", T.FLOAT)]), {"X": X})


def test_scaler():
    rng = np.random.default_rng(26)
    node = h.make_node("Scaler", ["X"], ["Y"], domain="ai.onnx.ml", offset=rng.normal(size=20).tolist(),
                       scale=rng.random(20).tolist())
    X = _x(rng, 1000, 20)
    _everywhere(_ml_model(node, {"X": X}, [("Y", T.FLOAT)]), {"X": X}, rtol=0, atol=0)


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
def test_normalizer(norm):
    rng = np.random.default_rng(27)
    node = h.make_node("Normalizer", ["X"], ["Y"], domain="ai.onnx.ml", norm=norm)
    X = _x(rng, 1000, 21)
    X[0] = 0
    X[1] = -np.abs(X[1])
    _everywhere(_ml_model(node, {"X": X}, [("Y", T.FLOAT)]), {"X": X}, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_binarizer(dtype):
    rng = np.random.default_rng(28)
    node = h.make_node("Binarizer", ["X"], ["Y"], domain="ai.onnx.ml", threshold=0.25)
    X = _x(rng, 1000, 20) if dtype == np.float32 else rng.integers(-3, 4, size=(1000, 20))
    X[0, :3] = [0.25, np.float32(0.25000003), -0.0] if dtype == np.float32 else [0, 1, -1]
    # ORT has no integer Binarizer
    _everywhere(_ml_model(node, {"X": X}, [("Y", NUMPY_TO_ONNX[np.dtype(dtype)])]), {"X": X}, rtol=0, atol=0,
                with_ort=dtype == np.float32)


def test_binarizer_refuses_a_nan_with_the_cpu_kernels_error_on_every_backend():
    node = h.make_node("Binarizer", ["X"], ["Y"], domain="ai.onnx.ml", threshold=0.25)
    X = np.random.default_rng(31).standard_normal((40, 9)).astype(np.float32)
    bad = X.copy()
    bad[7, 2] = bad[3, 5] = np.nan  # flat indices 65 and 32: the smaller is named
    model = _ml_model(node, {"X": X}, [("Y", T.FLOAT)])
    for backend in ("cpu", *gpu_check.GPU_BACKENDS):
        with ws.Worker(ws.load_model(model), backend) as worker:
            with pytest.raises(LayerError, match=r"Binarizer.*X holds a NaN at flat index 32"):
                worker.run({"X": bad})
            # The fault is the run's: the next run, NaN-free, answers (a replay of the same plan on the GPU).
            assert np.array_equal(worker.run({"X": X})["Y"], (X > 0.25).astype(np.float32))
            assert worker.stats().get("fallback_layers", []) == []


@pytest.mark.parametrize("kind", ["float_nan", "float_value", "int"])
def test_imputer(kind):
    rng = np.random.default_rng(29)
    if kind == "int":
        node = h.make_node("Imputer", ["X"], ["Y"], domain="ai.onnx.ml", imputed_value_int64s=list(range(20)),
                           replaced_value_int64=-1)
        X = rng.integers(-1, 3, size=(1000, 20))
    else:
        replaced = float("nan") if kind == "float_nan" else 0.5
        node = h.make_node("Imputer", ["X"], ["Y"], domain="ai.onnx.ml", replaced_value_float=replaced,
                           imputed_value_floats=rng.normal(size=20).astype(np.float32).tolist())
        X = _x(rng, 1000, 20)
        X[rng.random(X.shape) < 0.2] = replaced
    dtype = NUMPY_TO_ONNX[X.dtype]
    _everywhere(_ml_model(node, {"X": X}, [("Y", dtype)]), {"X": X}, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_array_feature_extractor(dtype):
    rng = np.random.default_rng(30)
    X = (rng.normal(size=(1000, 20)) * 10).astype(dtype)
    node = h.make_node("ArrayFeatureExtractor", ["X", "Y"], ["Z"], domain="ai.onnx.ml")
    index = np.array([3, 0, 19, 3, 7], np.int64)
    _everywhere(_ml_model(node, {"X": X}, [("Z", NUMPY_TO_ONNX[X.dtype])], {"Y": index}), {"X": X}, rtol=0, atol=0)
    _everywhere(_ml_model(node, {"X": X[0]}, [("Z", NUMPY_TO_ONNX[X.dtype])], {"Y": index}), {"X": X[0]},
                rtol=0, atol=0)


def test_one_hot_encoder():
    rng = np.random.default_rng(31)
    node = h.make_node("OneHotEncoder", ["X"], ["Y"], domain="ai.onnx.ml", cats_int64s=[3, 1, 8, 5, 2**40],
                       zeros=1)
    X = rng.integers(0, 10, size=(1000, 4))
    _everywhere(_ml_model(node, {"X": X}, [("Y", T.FLOAT)]), {"X": X}, rtol=0, atol=0)


def test_one_hot_encoder_zeros_0_refuses_an_unknown_value_with_the_cpu_kernels_error_on_every_backend():
    node = h.make_node("OneHotEncoder", ["X"], ["Y"], domain="ai.onnx.ml", cats_int64s=[3, 1, 8, 5, 3, 2**40],
                       zeros=0)
    X = np.random.default_rng(33).choice([3, 1, 8, 5], size=(50, 4)).astype(np.int64)
    bad = X.copy()
    bad[9, 1], bad[4, 3] = -2, 7  # flat indices 37 and 19: the smaller is named
    model = _ml_model(node, {"X": X}, [("Y", T.FLOAT)])
    want = (X[..., None] == np.array([3, 1, 8, 5, -1, -1])).astype(np.float32)
    want[..., 4] = 0  # the repeated 3 never matches
    for backend in ("cpu", *gpu_check.GPU_BACKENDS):
        with ws.Worker(ws.load_model(model), backend) as worker:
            assert np.array_equal(worker.run({"X": X})["Y"], want)
            for _ in range(2):  # recorded, then replayed
                with pytest.raises(LayerError, match=r"OneHotEncoder.*not one of the categories \(zeros=0\) at "
                                                     r"flat index 19"):
                    worker.run({"X": bad})
            assert np.array_equal(worker.run({"X": X})["Y"], want)
            if backend != "cpu":  # the check ran on the device (2**40, never a device value, is a usable no-match)
                assert worker.stats()["gpu_layers"] == ["OneHotEncoder_0"], worker.stats()["placements"]


def test_feature_vectorizer():
    rng = np.random.default_rng(32)
    feeds = {"A": _x(rng, 1000, 3), "B": _x(rng, 1000, 5), "C": _x(rng, 1000, 1)}
    node = h.make_node("FeatureVectorizer", list(feeds), ["Y"], domain="ai.onnx.ml", inputdimensions=[2, 7, 1])
    _everywhere(_ml_model(node, feeds, [("Y", T.FLOAT)]), feeds, rtol=0, atol=0)


@pytest.mark.parametrize("case", ["string_labels", "probabilities"])
def test_declined_models_run_the_numpy_kernel(case):
    rng = np.random.default_rng(33)
    if case == "string_labels":
        node, outputs = _linear(rng, "LinearClassifier", 3, 5, classlabels_strings=["a", "b", "c"])
        outputs = [("label", T.STRING), ("scores", T.FLOAT)]
    else:
        node = _svm_node(rng, "SVMClassifier", "RBF", 5, 6, vectors_per_class=[2, 2, 2], classlabels_ints=[0, 1, 2],
                         coefficients=rng.normal(size=12).tolist(), rho=[0.1, 0.2, 0.3], prob_a=[-1.0] * 3,
                         prob_b=[0.1] * 3)
        outputs = [("label", T.INT64), ("scores", T.FLOAT)]
    X = _x(rng, 50, 5)
    model = _ml_model(node, {"X": X}, outputs)
    expected = ws.Worker(ws.load_model(model), "cpu").run({"X": X})
    for backend in gpu_check.GPU_BACKENDS:
        with ws.Worker(ws.load_model(model), backend) as worker:
            got = worker.run({"X": X})
            assert worker.stats()["fallback_layers"]
        for name, value in expected.items():
            assert got[name].tolist() == value.tolist()
