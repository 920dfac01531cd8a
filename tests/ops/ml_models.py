"""ONNX models of fitted scikit-learn estimators, built with onnx.helper the way skl2onnx lays them out (skl2onnx
itself is not installable here): trees from ``estimator.tree_`` arrays (DecisionTree, RandomForest,
GradientBoosting), LogisticRegression as LinearClassifier + ZipMap, SVC as SVMClassifier, StandardScaler as
Scaler, SimpleImputer as Imputer, LinearRegression as LinearRegressor; and a converter of classic tree
ensemble attributes to TreeEnsemble (ai.onnx.ml 5)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

ML = "ai.onnx.ml"


def model_of(nodes: list, features: int, outputs: list, ml_opset: int = 3) -> onnx.ModelProto:
    """A model over X (N, features) float32 running ``nodes``."""
    graph = h.make_graph(nodes, "sklearn", [h.make_tensor_value_info("X", T.FLOAT, [None, features])], outputs)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17), h.make_opsetid(ML, ml_opset)])
    model.ir_version = 8
    return model


def tensor_out(name: str, dtype: int = T.FLOAT) -> onnx.ValueInfoProto:
    return h.make_tensor_value_info(name, dtype, None)


def zipmap_out(name: str) -> onnx.ValueInfoProto:
    seq = h.make_sequence_type_proto(h.make_map_type_proto(T.INT64, h.make_tensor_type_proto(T.FLOAT, None)))
    return h.make_value_info(name, seq)


def _tree_nodes(tree: Any, tree_id: int, attrs: dict[str, list]) -> list[int]:
    """Append one sklearn tree's nodes to ``attrs`` (nodes_*); returns its leaves' node ids."""
    leaves = []
    for node in range(tree.node_count):
        left, right = int(tree.children_left[node]), int(tree.children_right[node])
        attrs["nodes_treeids"].append(tree_id)
        attrs["nodes_nodeids"].append(node)
        if left == -1:
            attrs["nodes_modes"].append("LEAF")
            attrs["nodes_featureids"].append(0)
            attrs["nodes_values"].append(0.0)
            attrs["nodes_truenodeids"].append(0)
            attrs["nodes_falsenodeids"].append(0)
            leaves.append(node)
        else:
            attrs["nodes_modes"].append("BRANCH_LEQ")
            attrs["nodes_featureids"].append(int(tree.feature[node]))
            attrs["nodes_values"].append(float(np.float32(tree.threshold[node])))
            attrs["nodes_truenodeids"].append(left)
            attrs["nodes_falsenodeids"].append(right)
    return leaves


def _empty_nodes() -> dict[str, list]:
    return {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_modes", "nodes_featureids", "nodes_values",
                            "nodes_truenodeids", "nodes_falsenodeids")}


def forest_classifier(estimator: Any, zipmap: bool = False) -> tuple[list, list]:
    """DecisionTreeClassifier or RandomForestClassifier: leaf weights are class fractions / tree count."""
    trees = getattr(estimator, "estimators_", [estimator])
    attrs = _empty_nodes()
    weights: dict[str, list] = {"class_treeids": [], "class_nodeids": [], "class_ids": [], "class_weights": []}
    for t, est in enumerate(trees):
        tree = est.tree_
        for leaf in _tree_nodes(tree, t, attrs):
            value = tree.value[leaf][0]
            value = value / value.sum()
            for c, v in enumerate(value):
                weights["class_treeids"].append(t)
                weights["class_nodeids"].append(leaf)
                weights["class_ids"].append(c)
                weights["class_weights"].append(float(v) / len(trees))
    probs = "probs" if zipmap else "probabilities"
    nodes = [h.make_node("TreeEnsembleClassifier", ["X"], ["label", probs], domain=ML, **attrs, **weights,
                         classlabels_int64s=[int(c) for c in estimator.classes_])]
    if zipmap:
        nodes.append(h.make_node("ZipMap", [probs], ["probabilities"], domain=ML,
                                 classlabels_int64s=[int(c) for c in estimator.classes_]))
    return nodes, [tensor_out("label", T.INT64), zipmap_out("probabilities") if zipmap else tensor_out(probs)]


def forest_regressor(estimator: Any) -> tuple[list, list]:
    """DecisionTreeRegressor or RandomForestRegressor (AVERAGE of the trees)."""
    trees = getattr(estimator, "estimators_", [estimator])
    attrs = _empty_nodes()
    weights: dict[str, list] = {"target_treeids": [], "target_nodeids": [], "target_ids": [], "target_weights": []}
    for t, est in enumerate(trees):
        tree = est.tree_
        for leaf in _tree_nodes(tree, t, attrs):
            weights["target_treeids"].append(t)
            weights["target_nodeids"].append(leaf)
            weights["target_ids"].append(0)
            weights["target_weights"].append(float(tree.value[leaf][0][0]))
    node = h.make_node("TreeEnsembleRegressor", ["X"], ["variable"], domain=ML, **attrs, **weights, n_targets=1,
                       aggregate_function="AVERAGE")
    return [node], [tensor_out("variable")]


def _init_scores(estimator: Any, classes: int) -> list[float]:
    """GradientBoosting's initial raw score per column (the log-odds / log-priors its init estimator gives)."""
    raw = estimator._raw_predict_init(np.zeros((1, estimator.n_features_in_), dtype=np.float32))
    return [float(v) for v in raw.reshape(-1)[:classes]]


def gradient_boosting_classifier(estimator: Any) -> tuple[list, list]:
    """GradientBoostingClassifier: leaf values times the learning rate; binary: one score column with
    LOGISTIC (ORT writes [1 - p, p]); multiclass: one tree per class and stage, SOFTMAX."""
    classes = len(estimator.classes_)
    columns = 1 if classes == 2 else classes
    attrs = _empty_nodes()
    weights: dict[str, list] = {"class_treeids": [], "class_nodeids": [], "class_ids": [], "class_weights": []}
    tree_id = 0
    for stage in estimator.estimators_:
        for c in range(columns):
            tree = stage[c].tree_
            for leaf in _tree_nodes(tree, tree_id, attrs):
                weights["class_treeids"].append(tree_id)
                weights["class_nodeids"].append(leaf)
                weights["class_ids"].append(c)
                weights["class_weights"].append(float(tree.value[leaf][0][0]) * estimator.learning_rate)
            tree_id += 1
    post = "LOGISTIC" if classes == 2 else "SOFTMAX"
    node = h.make_node("TreeEnsembleClassifier", ["X"], ["label", "probabilities"], domain=ML, **attrs, **weights,
                       classlabels_int64s=[int(c) for c in estimator.classes_], post_transform=post,
                       base_values=_init_scores(estimator, columns))
    return [node], [tensor_out("label", T.INT64), tensor_out("probabilities")]


def gradient_boosting_regressor(estimator: Any) -> tuple[list, list]:
    attrs = _empty_nodes()
    weights: dict[str, list] = {"target_treeids": [], "target_nodeids": [], "target_ids": [], "target_weights": []}
    for t, stage in enumerate(estimator.estimators_):
        tree = stage[0].tree_
        for leaf in _tree_nodes(tree, t, attrs):
            weights["target_treeids"].append(t)
            weights["target_nodeids"].append(leaf)
            weights["target_ids"].append(0)
            weights["target_weights"].append(float(tree.value[leaf][0][0]) * estimator.learning_rate)
    node = h.make_node("TreeEnsembleRegressor", ["X"], ["variable"], domain=ML, **attrs, **weights, n_targets=1,
                       base_values=_init_scores(estimator, 1))
    return [node], [tensor_out("variable")]


def logistic_regression(estimator: Any) -> tuple[list, list]:
    """LogisticRegression as skl2onnx writes it: LinearClassifier (LOGISTIC for two classes, one score row;
    SOFTMAX for more) and a ZipMap of the probabilities."""
    classes = [int(c) for c in estimator.classes_]
    multi = len(classes) > 2
    node = h.make_node("LinearClassifier", ["X"], ["label", "probability_tensor"], domain=ML,
                       coefficients=estimator.coef_.astype(np.float32).reshape(-1).tolist(),
                       intercepts=estimator.intercept_.astype(np.float32).tolist(), classlabels_ints=classes,
                       multi_class=int(multi), post_transform="SOFTMAX" if multi else "LOGISTIC")
    zipmap = h.make_node("ZipMap", ["probability_tensor"], ["probabilities"], domain=ML, classlabels_int64s=classes)
    return [node, zipmap], [tensor_out("label", T.INT64), zipmap_out("probabilities")]


def svc(estimator: Any) -> tuple[list, list]:
    """SVC (one-vs-one, libsvm's support vectors and dual coefficients) as SVMClassifier."""
    kernel = estimator.kernel.upper()
    # libsvm's binary decision is the negative of sklearn's: skl2onnx flips both signs for two classes.
    sign = -1.0 if len(estimator.classes_) == 2 else 1.0
    attrs = {"kernel_type": kernel,
             "kernel_params": [float(estimator._gamma), float(estimator.coef0), float(estimator.degree)],
             "vectors_per_class": [int(n) for n in estimator.n_support_],
             "support_vectors": estimator.support_vectors_.astype(np.float32).reshape(-1).tolist(),
             "coefficients": (sign * estimator.dual_coef_).astype(np.float32).reshape(-1).tolist(),
             "rho": (sign * estimator.intercept_).astype(np.float32).tolist(),
             "classlabels_ints": [int(c) for c in estimator.classes_]}
    if estimator.probability:
        attrs |= {"prob_a": estimator.probA_.tolist(), "prob_b": estimator.probB_.tolist()}
    node = h.make_node("SVMClassifier", ["X"], ["label", "probabilities"], domain=ML, **attrs)
    return [node], [tensor_out("label", T.INT64), tensor_out("probabilities")]


def imputer_scaler_linear(pipeline: Any) -> tuple[list, list]:
    """Pipeline(SimpleImputer, StandardScaler, LinearRegression): Imputer, Scaler, LinearRegressor."""
    imputer, scaler, linear = (step for _, step in pipeline.steps)
    return [
        h.make_node("Imputer", ["X"], ["imputed"], domain=ML, imputed_value_floats=imputer.statistics_.tolist(),
                    replaced_value_float=float("nan")),
        h.make_node("Scaler", ["imputed"], ["scaled"], domain=ML, offset=scaler.mean_.tolist(),
                    scale=(1.0 / scaler.scale_).tolist()),
        h.make_node("LinearRegressor", ["scaled"], ["variable"], domain=ML,
                    coefficients=np.reshape(linear.coef_, -1).tolist(),
                    intercepts=np.reshape(linear.intercept_, -1).tolist()),
    ], [tensor_out("variable")]


def to_tree_ensemble(node: onnx.NodeProto, splits_dtype: Any = np.float32) -> onnx.NodeProto:
    """A TreeEnsembleRegressor node (one weight per leaf) as a TreeEnsemble (ai.onnx.ml 5) node: branch nodes
    keep their order, leaves become leaf_* entries."""
    a = {x.name: h.get_attribute_value(x) for x in node.attribute}
    modes = [m.decode() if isinstance(m, bytes) else m for m in a["nodes_modes"]]
    key = list(zip(a["nodes_treeids"], a["nodes_nodeids"], strict=True))
    branches = [i for i, m in enumerate(modes) if m != "LEAF"]
    branch_at = {key[i]: k for k, i in enumerate(branches)}
    weight_of = {(t, n): (tid, w) for t, n, tid, w in zip(a["target_treeids"], a["target_nodeids"],
                                                          a["target_ids"], a["target_weights"], strict=True)}
    leaf_at: dict[tuple[int, int], int] = {}
    leaf_targets, leaf_weights = [], []
    for i, m in enumerate(modes):
        if m == "LEAF":
            leaf_at[key[i]] = len(leaf_targets)
            target, weight = weight_of[key[i]]
            leaf_targets.append(target)
            leaf_weights.append(weight)
    codes = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4, "BRANCH_NEQ": 5}
    trues, falses, true_leafs, false_leafs = [], [], [], []
    for i in branches:
        tree = a["nodes_treeids"][i]
        for child, ids, leafs in ((a["nodes_truenodeids"][i], trues, true_leafs),
                                  (a["nodes_falsenodeids"][i], falses, false_leafs)):
            is_leaf = (tree, child) in leaf_at
            ids.append(leaf_at[(tree, child)] if is_leaf else branch_at[(tree, child)])
            leafs.append(int(is_leaf))
    roots = [branch_at[key[i]] for i in branches if a["nodes_nodeids"][i] == 0]
    aggregate = a.get("aggregate_function", b"SUM")
    aggregate = {"AVERAGE": 0, "SUM": 1, "MIN": 2, "MAX": 3}[
        aggregate.decode() if isinstance(aggregate, bytes) else aggregate]
    missing = a.get("nodes_missing_value_tracks_true") or [0] * len(modes)
    return h.make_node(
        "TreeEnsemble", ["X"], ["Y"], domain=ML, n_targets=int(a.get("n_targets", 1)), aggregate_function=aggregate,
        tree_roots=roots, nodes_featureids=[a["nodes_featureids"][i] for i in branches],
        nodes_splits=numpy_helper.from_array(np.array([a["nodes_values"][i] for i in branches], splits_dtype)),
        nodes_modes=numpy_helper.from_array(np.array([codes[modes[i]] for i in branches], np.uint8)),
        nodes_truenodeids=trues, nodes_falsenodeids=falses, nodes_trueleafs=true_leafs,
        nodes_falseleafs=false_leafs, leaf_targetids=leaf_targets,
        nodes_missing_value_tracks_true=[missing[i] for i in branches],
        leaf_weights=numpy_helper.from_array(np.array(leaf_weights, splits_dtype)))
