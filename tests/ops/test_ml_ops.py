"""The ai.onnx.ml kernels of wgsentis.ops.ml, ml_transforms and ml_trees (tree ensembles, linear and SVM models,
feature transforms, ZipMap) checked against ONNX Runtime on models built with onnx.helper, run through load_model
and a cpu Worker."""

from __future__ import annotations

import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import wgsentis as ws
from wgsentis.ops import ml, ml_transforms, ml_trees

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


@pytest.mark.parametrize(("keys", "values", "vocabulary"), [
    (T.STRING, T.FLOAT, {"string_vocabulary": ["a", "c", "b", "z"]}),
    (T.INT64, T.FLOAT, {"int64_vocabulary": [7, 1, 3]}),
])
def test_dict_vectorizer_takes_a_map_input(keys, values, vocabulary):
    """A map graph input is fed as a dict; its numeric values take the map's value type."""
    node = h.make_node("DictVectorizer", ["X"], ["Y"], domain=ML, **vocabulary)
    mp = h.make_map_type_proto(keys, h.make_tensor_type_proto(values, None))
    model = _model(node, [h.make_value_info("X", mp)], [_tensor("Y", values, None)])
    x = {"a": 4.0, "c": 8.0, "q": 1.0} if keys == T.STRING else {7: 4.0, 3: -2.5, 9: 1.0, 5: 6.0}
    (expected,), (got,) = _both(model, {"X": x})
    assert got.dtype == expected.dtype
    _close(got.reshape(expected.shape), expected)


def test_map_inputs_are_checked():
    from wgsentis.errors import InputError

    mp = h.make_map_type_proto(T.INT64, h.make_tensor_type_proto(T.FLOAT, None))
    node = h.make_node("CastMap", ["X"], ["Y"], domain=ML)
    model = _model(node, [h.make_value_info("X", mp)], [_tensor("Y", T.FLOAT, None)])
    with ws.Worker(ws.load_model(model.SerializeToString()), "cpu") as worker, \
            pytest.raises(InputError, match="expects a map"):
        worker.run({"X": np.ones(3, np.float32)})


@pytest.mark.parametrize("cast_to", ["TO_FLOAT", "TO_STRING", "TO_INT64"])
@pytest.mark.parametrize(("form", "max_map"), [("DENSE", 1), ("SPARSE", 6), ("SPARSE", 3)])
def test_cast_map(cast_to, form, max_map):
    """int64 -> float maps (ORT's Python binding cannot feed int64 -> string ones)."""
    out = {"TO_FLOAT": T.FLOAT, "TO_STRING": T.STRING, "TO_INT64": T.INT64}[cast_to]
    mp = h.make_map_type_proto(T.INT64, h.make_tensor_type_proto(T.FLOAT, None))
    node = h.make_node("CastMap", ["X"], ["Y"], domain=ML, cast_to=cast_to, map_form=form, max_map=max_map)
    model = _model(node, [h.make_value_info("X", mp)], [_tensor("Y", out, None)])
    _check(model, {"X": {5: 2.5, 1: 7.0, 3: -1.75, 0: 1e-3}})


def test_cast_map_string_values():
    """Strings parse as ORT's stof / stoll do (the integer part of "2.5")."""
    x = {3: "2.5", 1: "-7", 2: "1e3"}
    np.testing.assert_array_equal(ml_transforms.cast_map(None, x), np.array([[-7.0, 1000.0, 2.5]], np.float32))
    assert ml_transforms.cast_map(None, x, cast_to="TO_INT64", map_form="SPARSE",
                                  max_map=4).tolist() == [[0, -7, 1000, 2]]
    assert ml_transforms.cast_map(None, x, cast_to="TO_STRING").tolist() == [["-7", "1e3", "2.5"]]
    with pytest.raises(ValueError, match="negative"):
        ml_transforms.cast_map(None, {-1: 1.0}, map_form="SPARSE", max_map=2)


# -- Binarizer, ArrayFeatureExtractor, LabelEncoder ------------------------------------------------------


def test_binarizer():
    node = h.make_node("Binarizer", ["X"], ["Y"], domain=ML, threshold=0.25)
    X = np.array([[-1.0, 0.25, 0.2500001, np.inf], [0.0, 3.0, -np.inf, 0.1]], np.float32)
    model = _model(node, [_tensor("X", T.FLOAT, [None, 4])], [_tensor("Y", T.FLOAT, None)])
    _check(model, {"X": X})
    with ws.Worker(ws.load_model(model.SerializeToString()), "cpu") as worker, \
            pytest.raises(ws.errors.LayerError, match="NaN"):
        worker.run({"X": np.full((1, 4), np.nan, np.float32)})  # ORT refuses a NaN too


@pytest.mark.parametrize("dtype", [T.FLOAT, T.INT64, T.STRING])
def test_array_feature_extractor(dtype):
    node = h.make_node("ArrayFeatureExtractor", ["X", "Y"], ["Z"], domain=ML)
    X = np.arange(24).reshape(2, 3, 4)
    X = {T.FLOAT: X.astype(np.float32), T.INT64: X, T.STRING: X.astype(str).astype(object)}[dtype]
    model = _model(node, [_tensor("X", dtype, None), _tensor("Y", T.INT64, None)], [_tensor("Z", dtype, None)])
    _check(model, {"X": X, "Y": np.array([3, 0, 3], np.int64)})
    _check(model, {"X": X[0, 0], "Y": np.array([1], np.int64)})  # 1-D: a (1, k) result


@pytest.mark.parametrize(("opset", "attrs", "X", "types"), [
    (1, {"classes_strings": ["a", "b", "c"], "default_int64": 42}, np.array(["c", "zz", "a"], object),
     (T.STRING, T.INT64)),
    (1, {"classes_strings": ["a", "b", "c"], "default_string": "?"}, np.array([2, 7, 0, -1]), (T.INT64, T.STRING)),
    (2, {"keys_strings": ["x", "y", "x"], "values_floats": [1.5, -2.0, 9.0]},
     np.array([["y", "x"], ["q", "x"]], object), (T.STRING, T.FLOAT)),
    (2, {"keys_floats": [0.5, float("nan"), -0.0], "values_int64s": [1, 2, 3], "default_int64": 9},
     np.array([0.5, np.nan, 0.0, 0.25], np.float32), (T.FLOAT, T.INT64)),
    (4, {"keys_floats": [0.5, float("nan"), -0.0], "values_int64s": [1, 2, 3], "default_int64": 9},
     np.array([0.5, np.nan, 0.0, 0.25], np.float32), (T.FLOAT, T.INT64)),
    (2, {"keys_int64s": [3, 1, 4], "values_strings": ["three", "one", "four"]}, np.array([1, 5, 4]),
     (T.INT64, T.STRING)),
    (4, {"keys_tensor": np.array([10, 20], np.int64), "values_tensor": np.array([0.5, 0.25], np.float64),
         "default_tensor": np.array([-3.0], np.float64)}, np.array([20, 30, 10]), (T.INT64, T.DOUBLE)),
    (4, {"keys_strings": ["a", "b"], "values_tensor": np.array([7, 8], np.int64)}, np.array(["b", "c"], object),
     (T.STRING, T.INT64)),
    (4, {"keys_int64s": [1, 2], "values_int64s": [5, 6], "default_int64": -9}, np.array([2, 3]), (T.INT64, T.INT64)),
])
def test_label_encoder(opset, attrs, X, types):
    attrs = {k: onnx.numpy_helper.from_array(v, k) if isinstance(v, np.ndarray) else v for k, v in attrs.items()}
    node = h.make_node("LabelEncoder", ["X"], ["Y"], domain=ML, **attrs)
    _check(_model(node, [_tensor("X", types[0], None)], [_tensor("Y", types[1], None)], ml_opset=opset), {"X": X})


# -- TreeEnsemble (ai.onnx.ml 5) ---------------------------------------------------------------------


@pytest.mark.parametrize(("aggregate", "dtype"), [
    ("SUM", np.float32), ("AVERAGE", np.float32), ("MIN", np.float64), ("MAX", np.float32), ("SUM", np.float64),
])
def test_tree_ensemble_v5_matches_the_classic_regressor(aggregate, dtype):
    from ml_models import to_tree_ensemble

    rng = np.random.default_rng(21)
    classic = _regressor(rng, 12, 6, 5, 1, aggregate_function=aggregate, missing=True,
                         modes=("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"))
    onnx_type = T.FLOAT if dtype == np.float32 else T.DOUBLE
    X = rng.normal(size=(300, 5)).astype(dtype)
    X[rng.random(X.shape) < 0.05] = np.nan
    model = _model(to_tree_ensemble(classic, dtype), [_tensor("X", onnx_type, [None, 5])],
                   [_tensor("Y", onnx_type, None)], ml_opset=5)
    (expected,) = _check(model, {"X": X})
    assert expected.dtype == dtype
    classic_out = ort.InferenceSession(
        _model(classic, [_tensor("X", onnx_type, [None, 5])], [_tensor("Y", T.FLOAT, None)]).SerializeToString(),
        providers=["CPUExecutionProvider"]).run(None, {"X": X})[0]
    _close(expected, classic_out)


@pytest.mark.parametrize("post", [1, 2, 3])
def test_tree_ensemble_v5_post_transform(post):
    """The spec's post_transform, applied to the raw scores (ORT 1.32's TreeEnsemble ignores it, so the raw
    scores are what is checked against ORT, in the test above)."""
    from ml_models import to_tree_ensemble

    rng = np.random.default_rng(23)
    node = to_tree_ensemble(_regressor(rng, 6, 4, 3, 1))
    X = rng.normal(size=(20, 3)).astype(np.float32)
    # Three targets: leaf i scores target i % 3.
    attrs = {a.name: h.get_attribute_value(a) for a in node.attribute}
    attrs["leaf_targetids"] = [i % 3 for i in range(len(attrs["leaf_targetids"]))]
    attrs["n_targets"] = 3
    outputs = {}
    for code in (0, post):
        node = h.make_node("TreeEnsemble", ["X"], ["Y"], domain=ML, **(attrs | {"post_transform": code}))
        model = _model(node, [_tensor("X", T.FLOAT, [None, 3])], [_tensor("Y", T.FLOAT, None)], ml_opset=5)
        with ws.Worker(ws.load_model(model.SerializeToString()), "cpu") as worker:
            outputs[code] = worker.run({"X": X})["Y"]
    name = ml_trees.V5_POST_TRANSFORMS[post]
    _close(outputs[post], ml.apply_post_transform(outputs[0].astype(np.float64), name))


def test_tree_ensemble_v5_set_membership():
    """BRANCH_MEMBER nodes (LightGBM's categorical splits) mixed with comparisons, NaNs tracked as missing."""
    rng = np.random.default_rng(22)
    members, modes, splits = [], [], []
    count = 60
    for _ in range(count):
        if rng.random() < 0.5:
            modes.append(6)
            splits.append(0.0)
            members += [*rng.choice(10, size=int(rng.integers(1, 6)), replace=False).astype(float), float("nan")]
        else:
            modes.append(int(rng.integers(0, 6)))
            splits.append(float(rng.integers(0, 10)) + 0.5 * rng.integers(0, 2))
    # Node k branches to 2k+1 and 2k+2 while those are nodes, else to leaves; four trees share the layout.
    trues = [2 * k + 1 if 2 * k + 1 < count else k for k in range(count)]
    falses = [2 * k + 2 if 2 * k + 2 < count else k + count for k in range(count)]
    true_leafs = [int(2 * k + 1 >= count) for k in range(count)]
    false_leafs = [int(2 * k + 2 >= count) for k in range(count)]
    leaves = 2 * count
    node = h.make_node(
        "TreeEnsemble", ["X"], ["Y"], domain=ML, n_targets=2, tree_roots=[0, 1, 2, 5],
        nodes_featureids=rng.integers(0, 4, count).tolist(),
        nodes_modes=onnx.numpy_helper.from_array(np.array(modes, np.uint8)),
        nodes_splits=onnx.numpy_helper.from_array(np.array(splits, np.float32)),
        membership_values=onnx.numpy_helper.from_array(np.array(members, np.float32)),
        nodes_truenodeids=trues, nodes_falsenodeids=falses, nodes_trueleafs=true_leafs, nodes_falseleafs=false_leafs,
        nodes_missing_value_tracks_true=rng.integers(0, 2, count).tolist(),
        leaf_targetids=rng.integers(0, 2, leaves).tolist(),
        leaf_weights=onnx.numpy_helper.from_array(rng.normal(size=leaves).astype(np.float32)))
    X = rng.integers(0, 10, size=(500, 4)).astype(np.float32)
    X[rng.random(X.shape) < 0.1] = np.nan
    _check(_model(node, [_tensor("X", T.FLOAT, [None, 4])], [_tensor("Y", T.FLOAT, None)], ml_opset=5), {"X": X})


def test_tree_ensemble_refuses_a_cycle():
    node = h.make_node("TreeEnsembleRegressor", ["X"], ["Y"], domain=ML, n_targets=1, nodes_treeids=[0, 0],
                       nodes_nodeids=[0, 1], nodes_modes=["BRANCH_LEQ", "BRANCH_LEQ"], nodes_featureids=[0, 0],
                       nodes_values=[0.0, 0.0], nodes_truenodeids=[1, 0], nodes_falsenodeids=[1, 0],
                       target_treeids=[0], target_nodeids=[1], target_ids=[0], target_weights=[1.0])
    model = _model(node, [_tensor("X", T.FLOAT, [None, 1])], [_tensor("Y", T.FLOAT, None)])
    with ws.Worker(ws.load_model(model.SerializeToString()), "cpu") as worker, \
            pytest.raises(ws.errors.LayerError, match="cycle"):
        worker.run({"X": np.zeros((1, 1), np.float32)})


def test_size_rules_refuse_an_attribute_bomb():
    from wgsentis.errors import ResourceLimitError

    node = h.make_node("FeatureVectorizer", ["X"], ["Y"], domain=ML, inputdimensions=[1 << 40])
    model = _model(node, [_tensor("X", T.FLOAT, [None, 1])], [_tensor("Y", T.FLOAT, None)])
    with ws.Worker(ws.load_model(model.SerializeToString()), "cpu", memory_limit=1 << 20) as worker, \
            pytest.raises(ResourceLimitError):
        worker.run({"X": np.ones((2, 1), np.float32)})


# -- models converted from fitted scikit-learn estimators (as skl2onnx lays them out) ----------------


def _sklearn_data(classes: int = 3, rows: int = 400, features: int = 8):
    datasets = pytest.importorskip("sklearn.datasets")
    X, y = datasets.make_classification(n_samples=rows, n_features=features, n_informative=5, n_classes=classes,
                                        random_state=0)
    return X.astype(np.float32), y


def _run(model: onnx.ModelProto, X: np.ndarray) -> tuple[list, dict]:
    """(ORT's outputs, wgsentis' outputs by name); every output also checked against ORT."""
    expected, got = _both(model, {"X": X})
    for name, e in zip([o.name for o in model.graph.output], expected, strict=True):
        if isinstance(e, list):  # ZipMap
            assert [list(m) for m in got[-1]] == [list(m) for m in e]
            np.testing.assert_allclose([list(m.values()) for m in got[-1]], [list(m.values()) for m in e],
                                       rtol=RTOL, atol=1e-6)
        else:
            _close(got[[o.name for o in model.graph.output].index(name)], e, rtol=1e-4, atol=1e-5)
    return expected, dict(zip([o.name for o in model.graph.output], got, strict=True))


@pytest.mark.parametrize("kind", ["tree", "forest", "forest_zipmap"])
def test_sklearn_tree_classifiers(kind):
    ensemble = pytest.importorskip("sklearn.ensemble")
    tree = pytest.importorskip("sklearn.tree")
    from ml_models import forest_classifier, model_of

    X, y = _sklearn_data()
    est = (tree.DecisionTreeClassifier(max_depth=6, random_state=0) if kind == "tree"
           else ensemble.RandomForestClassifier(n_estimators=20, max_depth=7, random_state=0)).fit(X, y)
    nodes, outputs = forest_classifier(est, zipmap=kind == "forest_zipmap")
    _, got = _run(model_of(nodes, X.shape[1], outputs), X)
    np.testing.assert_array_equal(got["label"], est.predict(X))
    proba = got["probabilities"]
    proba = np.array([list(m.values()) for m in proba]) if isinstance(proba, list) else proba
    np.testing.assert_allclose(proba, est.predict_proba(X), atol=1e-5)


@pytest.mark.parametrize("classes", [2, 3])
def test_sklearn_gradient_boosting_classifier(classes):
    ensemble = pytest.importorskip("sklearn.ensemble")
    from ml_models import gradient_boosting_classifier, model_of

    X, y = _sklearn_data(classes)
    est = ensemble.GradientBoostingClassifier(n_estimators=30, max_depth=3, random_state=0).fit(X, y)
    nodes, outputs = gradient_boosting_classifier(est)
    _, got = _run(model_of(nodes, X.shape[1], outputs), X)
    np.testing.assert_array_equal(got["label"], est.predict(X))
    np.testing.assert_allclose(got["probabilities"], est.predict_proba(X), atol=1e-4)


@pytest.mark.parametrize("kind", ["forest", "boosting"])
def test_sklearn_tree_regressors(kind):
    ensemble = pytest.importorskip("sklearn.ensemble")
    from ml_models import forest_regressor, gradient_boosting_regressor, model_of

    X, y = _sklearn_data()
    target = X[:, 0] * 2 + np.sin(X[:, 1]) + y
    if kind == "forest":
        est = ensemble.RandomForestRegressor(n_estimators=15, max_depth=6, random_state=0).fit(X, target)
        nodes, outputs = forest_regressor(est)
    else:
        est = ensemble.GradientBoostingRegressor(n_estimators=40, max_depth=3, random_state=0).fit(X, target)
        nodes, outputs = gradient_boosting_regressor(est)
    _, got = _run(model_of(nodes, X.shape[1], outputs), X)
    np.testing.assert_allclose(got["variable"][:, 0], est.predict(X), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("classes", [2, 3])
def test_sklearn_logistic_regression_with_zipmap(classes):
    linear_model = pytest.importorskip("sklearn.linear_model")
    from ml_models import logistic_regression, model_of

    X, y = _sklearn_data(classes)
    est = linear_model.LogisticRegression(max_iter=500).fit(X, y)
    nodes, outputs = logistic_regression(est)
    _, got = _run(model_of(nodes, X.shape[1], outputs, ml_opset=1), X)
    np.testing.assert_array_equal(got["label"], est.predict(X))
    np.testing.assert_allclose([list(m.values()) for m in got["probabilities"]], est.predict_proba(X), atol=1e-5)


@pytest.mark.parametrize(("kernel", "classes"), [("rbf", 3), ("linear", 2), ("poly", 3)])
def test_sklearn_svc(kernel, classes):
    svm = pytest.importorskip("sklearn.svm")
    from ml_models import model_of, svc

    X, y = _sklearn_data(classes, rows=200)
    est = svm.SVC(kernel=kernel, degree=2, gamma="scale", probability=False).fit(X, y)
    nodes, outputs = svc(est)
    _, got = _run(model_of(nodes, X.shape[1], outputs, ml_opset=1), X)
    np.testing.assert_array_equal(got["label"], est.predict(X))


def test_sklearn_imputer_scaler_linear_regression_pipeline():
    pytest.importorskip("sklearn")
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LinearRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from ml_models import imputer_scaler_linear, model_of

    X, y = _sklearn_data()
    X[np.random.default_rng(0).random(X.shape) < 0.1] = np.nan
    target = np.nan_to_num(X[:, 0]) * 3 - y
    pipe = make_pipeline(SimpleImputer(), StandardScaler(), LinearRegression()).fit(X, target)
    nodes, outputs = imputer_scaler_linear(pipe)
    _, got = _run(model_of(nodes, X.shape[1], outputs), X)
    np.testing.assert_allclose(got["variable"][:, 0], pipe.predict(X), rtol=1e-4, atol=1e-4)
