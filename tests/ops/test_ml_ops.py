"""The ai.onnx.ml kernels of wgsentis.ops.ml (tree ensembles, linear and SVM models, feature transforms,
ZipMap) checked against ONNX Runtime on models built with onnx.helper, run through load_model and a cpu
Worker."""

from __future__ import annotations

import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import wgsentis as ws
from wgsentis.ops import ml

ort = pytest.importorskip("onnxruntime")

ML = "ai.onnx.ml"
RTOL = 1e-5


def _model(node: onnx.NodeProto, inputs: list, outputs: list, ml_opset: int = 3, extra: list | None = None):
    graph = h.make_graph([node, *(extra or [])], "ml", inputs, outputs)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17), h.make_opsetid(ML, ml_opset)])
    model.ir_version = 8
    return model


def _both(model: onnx.ModelProto, feeds: dict) -> tuple[list, list]:
    """(onnxruntime's outputs, wgsentis' outputs) in the graph's output order."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    with ws.Worker(ws.load_model(model.SerializeToString()), "cpu") as worker:
        got = worker.run(feeds)
    return expected, [got[o.name] for o in model.graph.output]


def _close(got, expected, rtol: float = RTOL, atol: float = 1e-6) -> None:
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    if expected.dtype.kind in "OUSib":
        assert got.tolist() == expected.tolist()
    else:
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


def _check(model: onnx.ModelProto, feeds: dict, rtol: float = RTOL, atol: float = 1e-6) -> list:
    expected, got = _both(model, feeds)
    for e, g in zip(expected, got, strict=True):
        _close(g, e, rtol, atol)
    return got


def _tensor(name: str, dtype: int, shape: list | None) -> onnx.ValueInfoProto:
    return h.make_tensor_value_info(name, dtype, shape)


# -- tree ensembles ----------------------------------------------------------------------------------


def _forest(rng: np.random.Generator, trees: int, depth: int, features: int, modes: tuple[str, ...] = ("BRANCH_LEQ",),
            missing: bool = False) -> tuple[dict, list[tuple[int, int]]]:
    """Random trees (uneven depths; node ids restart at 0 per tree): the nodes_* attributes and the
    (tree, node) of each leaf."""
    attrs: dict[str, list] = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_values",
                                              "nodes_modes", "nodes_truenodeids", "nodes_falsenodeids",
                                              "nodes_missing_value_tracks_true")}
    leaves = []
    for tree in range(trees):
        pending, next_id = [(0, 0)], 1
        while pending:
            node, level = pending.pop()
            attrs["nodes_treeids"].append(tree)
            attrs["nodes_nodeids"].append(node)
            split = level < depth and (level < 2 or rng.random() < 0.8)
            attrs["nodes_missing_value_tracks_true"].append(int(missing and rng.random() < 0.5))
            if split:
                true_id, false_id = next_id, next_id + 1
                next_id += 2
                attrs["nodes_featureids"].append(int(rng.integers(features)))
                attrs["nodes_values"].append(float(np.float32(rng.normal() * 0.7)))
                attrs["nodes_modes"].append(str(rng.choice(modes)))
                attrs["nodes_truenodeids"].append(true_id)
                attrs["nodes_falsenodeids"].append(false_id)
                pending += [(true_id, level + 1), (false_id, level + 1)]
            else:
                attrs["nodes_featureids"].append(0)
                attrs["nodes_values"].append(0.0)
                attrs["nodes_modes"].append("LEAF")
                attrs["nodes_truenodeids"].append(0)
                attrs["nodes_falsenodeids"].append(0)
                leaves.append((tree, node))
    if not missing:
        del attrs["nodes_missing_value_tracks_true"]
    return attrs, leaves


def _classifier(rng, trees, depth, features, classes, *, class_ids=None, positive=True, labels=None, scale=1.0,
                **extra):
    attrs, leaves = _forest(rng, trees, depth, features, **{k: extra.pop(k) for k in ("modes", "missing")
                                                              if k in extra})
    ids = class_ids if class_ids is not None else list(range(classes))
    weights = {"class_treeids": [], "class_nodeids": [], "class_ids": [], "class_weights": []}
    for tree, node in leaves:
        for c in ids:
            weights["class_treeids"].append(tree)
            weights["class_nodeids"].append(node)
            weights["class_ids"].append(c)
            w = (rng.random() if positive else rng.normal()) * scale
            weights["class_weights"].append(float(np.float32(w)))
    if labels is None:
        labels = {"classlabels_int64s": list(range(10, 10 + classes))}
    node = h.make_node("TreeEnsembleClassifier", ["X"], ["label", "probabilities"], domain=ML,
                       **attrs, **weights, **labels, **extra)
    string = "classlabels_strings" in labels
    return node, [_tensor("label", T.STRING if string else T.INT64, None),
                  _tensor("probabilities", T.FLOAT, None)]


@pytest.mark.parametrize("post", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"])
def test_tree_classifier_multiclass_post_transforms(post):
    rng = np.random.default_rng(1)
    if post == "PROBIT":  # probit needs scores in (0, 1)
        node, outputs = _classifier(rng, 8, 5, 6, 4, post_transform=post, scale=0.1)
    else:
        node, outputs = _classifier(rng, 8, 5, 6, 4, post_transform=post, base_values=[0.1, -0.2, 0.3, 0.0])
    X = rng.normal(size=(200, 6)).astype(np.float32)
    # ORT's PROBIT is a float32 closed-form erfinv whose last step cancels: ~1e-4 absolute is its precision.
    atol = 2e-4 if post == "PROBIT" else 1e-6
    _check(_model(node, [_tensor("X", T.FLOAT, [None, 6])], outputs), {"X": X}, atol=atol)


def test_tree_classifier_with_zipmap_like_skl2onnx():
    """label + a sequence of maps label -> probability, string labels, all BRANCH modes, NaNs."""
    rng = np.random.default_rng(2)
    labels = ["cat", "dog", "eel"]
    node, outputs = _classifier(rng, 10, 6, 5, 3, labels={"classlabels_strings": labels},
                                modes=("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"),
                                missing=True)
    node.output[1] = "scores"
    zipmap = h.make_node("ZipMap", ["scores"], ["probabilities"], domain=ML, classlabels_strings=labels)
    seq = h.make_sequence_type_proto(h.make_map_type_proto(T.STRING, h.make_tensor_type_proto(T.FLOAT, None)))
    model = _model(node, [_tensor("X", T.FLOAT, [None, 5])],
                   [outputs[0], h.make_value_info("probabilities", seq)], extra=[zipmap])
    X = rng.normal(size=(100, 5)).astype(np.float32)
    X[rng.random(X.shape) < 0.1] = np.nan
    X[:10, :] = np.float32(h.get_attribute_value(next(a for a in node.attribute if a.name == "nodes_values"))[0])
    expected, got = _both(model, {"X": X})
    _close(got[0], expected[0])
    maps = got[1]
    assert all(isinstance(m, dict) for m in maps)  # a sequence of maps, as ORT gives it
    assert len(maps) == len(expected[1])
    for mine, theirs in zip(maps, expected[1], strict=True):
        assert list(mine) == list(theirs)
        np.testing.assert_allclose([mine[k] for k in labels], [theirs[k] for k in labels], rtol=RTOL, atol=1e-6)


@pytest.mark.parametrize(("class_id", "positive", "post", "base"), [
    (0, True, "NONE", None), (0, False, "LOGISTIC", None), (1, True, "NONE", None), (0, False, "NONE", [0.3]),
    (0, True, "PROBIT", None), (0, False, "LOGISTIC", [0.0, 0.2]),
])
def test_binary_tree_classifier_single_score(class_id, positive, post, base):
    """One score per row (LightGBM / gradient boosting binary): labels and the two derived columns."""
    rng = np.random.default_rng(3)
    extra = {"post_transform": post} | ({"base_values": base} if base else {})
    node, outputs = _classifier(rng, 6, 4, 4, 2, class_ids=[class_id], positive=positive,
                                labels={"classlabels_int64s": [0, 1]}, **extra)
    if positive:  # probabilities: averaged leaves stay in [0, 1]
        weights = next(a for a in node.attribute if a.name == "class_weights")
        weights.floats[:] = [w / 6 for w in weights.floats]
    X = rng.normal(size=(300, 4)).astype(np.float32)
    expected, got = _both(_model(node, [_tensor("X", T.FLOAT, [None, 4])], outputs), {"X": X})
    _close(got[0], expected[0])
    if post == "PROBIT":  # ORT writes the first column only and leaves the second uninitialised
        _close(got[1][:, 0], expected[1][:, 0], atol=2e-4)
    else:
        _close(got[1], expected[1])


def test_binary_tree_classifier_two_columns_like_random_forest():
    rng = np.random.default_rng(4)
    node, outputs = _classifier(rng, 5, 5, 3, 2, labels={"classlabels_strings": ["no", "yes"]})
    X = rng.normal(size=(150, 3)).astype(np.float32)
    _check(_model(node, [_tensor("X", T.FLOAT, [None, 3])], outputs, ml_opset=1), {"X": X})


def _regressor(rng, trees, depth, features, targets, **extra):
    attrs, leaves = _forest(rng, trees, depth, features, **{k: extra.pop(k) for k in ("modes", "missing")
                                                              if k in extra})
    weights = {"target_treeids": [], "target_nodeids": [], "target_ids": [], "target_weights": []}
    for tree, node in leaves:
        for t in range(targets):
            weights["target_treeids"].append(tree)
            weights["target_nodeids"].append(node)
            weights["target_ids"].append(t)
            weights["target_weights"].append(float(np.float32(rng.normal())))
    return h.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain=ML, n_targets=targets, **attrs, **weights,
                       **extra)


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
def test_tree_regressor_aggregates(aggregate):
    rng = np.random.default_rng(5)
    node = _regressor(rng, 7, 5, 4, 2, aggregate_function=aggregate, base_values=[0.5, -1.0], missing=True)
    X = rng.normal(size=(200, 4)).astype(np.float32)
    X[::7, 1] = np.nan
    _check(_model(node, [_tensor("X", T.FLOAT, [None, 4])], [_tensor("Y", T.FLOAT, None)]), {"X": X})


def test_tree_regressor_double_attributes_and_input():
    rng = np.random.default_rng(6)
    node = _regressor(rng, 4, 4, 3, 1, aggregate_function="AVERAGE")
    attrs = {a.name: h.get_attribute_value(a) for a in node.attribute}
    values = np.array(attrs.pop("nodes_values"), dtype=np.float64) + 1e-9
    weights = np.array(attrs.pop("target_weights"), dtype=np.float64) / 3
    node = h.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain=ML, **attrs,
                       nodes_values_as_tensor=onnx.numpy_helper.from_array(values, "v"),
                       target_weights_as_tensor=onnx.numpy_helper.from_array(weights, "w"),
                       base_values_as_tensor=onnx.numpy_helper.from_array(np.array([0.25]), "b"))
    X = rng.normal(size=(100, 3))
    model = _model(node, [_tensor("X", T.DOUBLE, [None, 3])], [_tensor("Y", T.FLOAT, None)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"X": X})[0]
    with ws.Worker(ws.load_model(model.SerializeToString()), "cpu") as worker:
        got = worker.run({"X": X})["Y"]
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=1e-6)


def test_tree_ensemble_is_vectorised():
    """A LightGBM-sized model (100 trees of 31 leaves, 10 classes) on 1000 rows: well under a second."""
    rng = np.random.default_rng(7)
    node, outputs = _classifier(rng, 100, 8, 20, 10, post_transform="SOFTMAX", positive=False)
    X = rng.normal(size=(1000, 20)).astype(np.float32)
    model = _model(node, [_tensor("X", T.FLOAT, [None, 20])], outputs)
    _check(model, {"X": X})
    with ws.Worker(ws.load_model(model.SerializeToString()), "cpu") as worker:
        worker.run({"X": X})
        start = time.perf_counter()
        worker.run({"X": X})
        assert time.perf_counter() - start < 0.5


# -- linear and SVM models ---------------------------------------------------------------------------


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_linear_classifier_multiclass(post):
    rng = np.random.default_rng(8)
    node = h.make_node("LinearClassifier", ["X"], ["label", "scores"], domain=ML, post_transform=post,
                       coefficients=rng.normal(size=3 * 5).tolist(), intercepts=rng.normal(size=3).tolist(),
                       classlabels_ints=[4, 5, 6], multi_class=1)
    X = rng.normal(size=(50, 5)).astype(np.float32)
    _check(_model(node, [_tensor("X", T.FLOAT, [None, 5])],
                  [_tensor("label", T.INT64, None), _tensor("scores", T.FLOAT, None)]), {"X": X})


@pytest.mark.parametrize(("post", "labels"), [("LOGISTIC", {"classlabels_strings": ["a", "b"]}),
                                              ("NONE", {"classlabels_ints": [3, 7]})])
def test_linear_classifier_binary_single_score(post, labels):
    rng = np.random.default_rng(9)
    node = h.make_node("LinearClassifier", ["X"], ["label", "scores"], domain=ML, post_transform=post,
                       coefficients=rng.normal(size=4).tolist(), intercepts=[0.1], **labels)
    X = rng.normal(size=(60, 4)).astype(np.float32)
    string = "classlabels_strings" in labels
    _check(_model(node, [_tensor("X", T.FLOAT, [None, 4])],
                  [_tensor("label", T.STRING if string else T.INT64, None), _tensor("scores", T.FLOAT, None)]),
           {"X": X})


def test_scaler_then_linear_regressor_pipeline():
    rng = np.random.default_rng(10)
    scale = h.make_node("Scaler", ["X"], ["scaled"], domain=ML, offset=rng.normal(size=4).tolist(),
                        scale=rng.random(4).tolist())
    reg = h.make_node("LinearRegressor", ["scaled"], ["Y"], domain=ML, coefficients=rng.normal(size=8).tolist(),
                      intercepts=[0.5, -0.5], targets=2)
    X = rng.normal(size=(40, 4))
    model = _model(scale, [_tensor("X", T.DOUBLE, [None, 4])], [_tensor("Y", T.FLOAT, None)], extra=[reg])
    _check(model, {"X": X})


def _svc(rng, classes: int, per_class: int, features: int, kernel: str, proba: bool, labels: dict):
    total = classes * per_class
    pairs = classes * (classes - 1) // 2
    attrs = {"kernel_type": kernel, "kernel_params": [0.3, 0.5, 3.0], "vectors_per_class": [per_class] * classes,
             "support_vectors": rng.normal(size=total * features).tolist(),
             "coefficients": rng.normal(size=(classes - 1) * total).tolist(), "rho": rng.normal(size=pairs).tolist()}
    if proba:
        attrs |= {"prob_a": (-rng.random(pairs) - 0.5).tolist(), "prob_b": (rng.normal(size=pairs) * 0.1).tolist()}
    return h.make_node("SVMClassifier", ["X"], ["label", "probabilities"], domain=ML, **attrs, **labels)


@pytest.mark.parametrize(("kernel", "classes", "proba"), [("RBF", 3, True), ("RBF", 4, False), ("POLY", 3, False),
                                                          ("SIGMOID", 3, True), ("LINEAR", 2, True),
                                                          ("RBF", 2, False)])
def test_svm_classifier(kernel, classes, proba):
    rng = np.random.default_rng(11)
    node = _svc(rng, classes, 4, 3, kernel, proba, {"classlabels_ints": list(range(classes))})
    X = rng.normal(size=(80, 3)).astype(np.float32)
    _check(_model(node, [_tensor("X", T.FLOAT, [None, 3])],
                  [_tensor("label", T.INT64, None), _tensor("probabilities", T.FLOAT, None)]), {"X": X},
           rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("kernel", "one_class"), [("RBF", 0), ("LINEAR", 0), ("POLY", 0), ("RBF", 1)])
def test_svm_regressor(kernel, one_class):
    rng = np.random.default_rng(12)
    node = h.make_node("SVMRegressor", ["X"], ["Y"], domain=ML, kernel_type=kernel, kernel_params=[0.2, 0.1, 2.0],
                       n_supports=6, support_vectors=rng.normal(size=18).tolist(),
                       coefficients=rng.normal(size=6).tolist(), rho=[0.3], one_class=one_class)
    X = rng.normal(size=(50, 3)).astype(np.float32)
    _check(_model(node, [_tensor("X", T.FLOAT, [None, 3])], [_tensor("Y", T.FLOAT, None)]), {"X": X},
           rtol=1e-4, atol=1e-5)


# -- feature transforms ------------------------------------------------------------------------------


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
def test_normalizer(norm):
    rng = np.random.default_rng(13)
    node = h.make_node("Normalizer", ["X"], ["Y"], domain=ML, norm=norm)
    X = rng.normal(size=(30, 5)).astype(np.float32)
    X[0] = 0
    _check(_model(node, [_tensor("X", T.FLOAT, [None, 5])], [_tensor("Y", T.FLOAT, None)]), {"X": X})


@pytest.mark.parametrize("kind", ["float_nan", "float_value", "int"])
def test_imputer(kind):
    rng = np.random.default_rng(14)
    if kind == "int":
        node = h.make_node("Imputer", ["X"], ["Y"], domain=ML, imputed_value_int64s=[7, 8, 9],
                           replaced_value_int64=-1)
        X = rng.integers(-1, 3, size=(20, 3)).astype(np.int64)
        dtype = T.INT64
    else:
        replaced = float("nan") if kind == "float_nan" else 0.5
        node = h.make_node("Imputer", ["X"], ["Y"], domain=ML, imputed_value_floats=[1.5],
                           replaced_value_float=replaced)
        X = rng.normal(size=(20, 3)).astype(np.float32)
        X[rng.random(X.shape) < 0.3] = replaced
        dtype = T.FLOAT
    _check(_model(node, [_tensor("X", dtype, [None, 3])], [_tensor("Y", dtype, None)]), {"X": X})


@pytest.mark.parametrize("kind", ["int", "string"])
def test_one_hot_encoder(kind):
    if kind == "int":
        node = h.make_node("OneHotEncoder", ["X"], ["Y"], domain=ML, cats_int64s=[3, 1, 8, 5], zeros=1)
        X, dtype = np.array([[1, 8, 2], [5, 3, 3]], dtype=np.int64), T.INT64
    else:
        node = h.make_node("OneHotEncoder", ["X"], ["Y"], domain=ML, cats_strings=["red", "green", "blue"], zeros=1)
        X, dtype = np.array([["green", "pink"], ["blue", "red"]], dtype=object), T.STRING
    _check(_model(node, [_tensor("X", dtype, [None, None])], [_tensor("Y", T.FLOAT, None)]), {"X": X})


@pytest.mark.parametrize("direction", ["to_int", "to_string"])
def test_category_mapper(direction):
    cats = {"cats_strings": ["a", "bb", "c"], "cats_int64s": [10, 20, 30]}
    if direction == "to_int":
        node = h.make_node("CategoryMapper", ["X"], ["Y"], domain=ML, default_int64=-7, **cats)
        X, types = np.array(["bb", "zz", "a", "c"], dtype=object), (T.STRING, T.INT64)
    else:
        node = h.make_node("CategoryMapper", ["X"], ["Y"], domain=ML, default_string="none", **cats)
        X, types = np.array([[30, 11], [10, 20]], dtype=np.int64), (T.INT64, T.STRING)
    _check(_model(node, [_tensor("X", types[0], None)], [_tensor("Y", types[1], None)]), {"X": X})


def test_feature_vectorizer_cuts_and_pads():
    node = h.make_node("FeatureVectorizer", ["A", "B", "C"], ["Y"], domain=ML, inputdimensions=[2, 3, 1])
    feeds = {"A": np.arange(6, dtype=np.float32).reshape(2, 3), "B": np.array([[1, 2], [3, 4]], dtype=np.float32),
             "C": np.array([[0.5], [1.5]], dtype=np.float32)}
    model = _model(node, [_tensor("A", T.FLOAT, [2, 3]), _tensor("B", T.FLOAT, [2, 2]), _tensor("C", T.FLOAT, [2, 1])],
                   [_tensor("Y", T.FLOAT, None)])
    _check(model, feeds)


def test_dict_vectorizer_kernel_matches_onnxruntime():
    """Worker inputs are tensors and sequences, not maps, so the kernel is called directly here."""
    node = h.make_node("DictVectorizer", ["X"], ["Y"], domain=ML, string_vocabulary=["a", "c", "b", "z"])
    mp = h.make_map_type_proto(T.STRING, h.make_tensor_type_proto(T.FLOAT, None))
    model = _model(node, [h.make_value_info("X", mp)], [_tensor("Y", T.FLOAT, None)])
    x = {"a": np.float32(4.0), "c": np.float32(8.0)}
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})
    got = ml.dict_vectorizer(None, x, string_vocabulary=["a", "c", "b", "z"])
    _close(got.reshape(expected[0].shape), expected[0])


def test_size_rules_refuse_an_attribute_bomb():
    from wgsentis.errors import ResourceLimitError

    node = h.make_node("FeatureVectorizer", ["X"], ["Y"], domain=ML, inputdimensions=[1 << 40])
    model = _model(node, [_tensor("X", T.FLOAT, [None, 1])], [_tensor("Y", T.FLOAT, None)])
    with ws.Worker(ws.load_model(model.SerializeToString()), "cpu", memory_limit=1 << 20) as worker, \
            pytest.raises(ResourceLimitError):
        worker.run({"X": np.ones((2, 1), np.float32)})
