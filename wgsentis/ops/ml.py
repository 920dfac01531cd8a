"""Numpy kernels of the classic ``ai.onnx.ml`` operators that skl2onnx and onnxmltools emit: tree ensembles
(classifier and regressor), linear and SVM models, the feature transforms (Scaler, Normalizer, Imputer,
OneHotEncoder, FeatureVectorizer, CategoryMapper, DictVectorizer) and ZipMap, with the size rules of the ones
whose output can outgrow their input.

Semantics follow the ONNX ai.onnx.ml specs and, where the spec is vague (binary classifiers' single score,
SOFTMAX_ZERO, PROBIT), what ONNX Runtime computes, since models exported by those converters are validated
against it. Maps have no tensor form here: ZipMap returns a sequence (list) of Python dicts and DictVectorizer
takes a dict (or a list of dicts, one per row).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from wgsentis.budget import size_rule
from wgsentis.ops.registry import register

ML_DOMAIN = "ai.onnx.ml"

_POST_TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")
_AGGREGATES = ("SUM", "AVERAGE", "MIN", "MAX")
_MODES = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4, "BRANCH_NEQ": 5,
          "LEAF": 6}
_LEAF = 6


# ----------------------------------------------------------------------------------------------
# shared helpers
# ----------------------------------------------------------------------------------------------


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _choice(value: Any, allowed: tuple[str, ...], what: str) -> str:
    name = _text(value).upper()
    if name not in allowed:
        raise ValueError(f"unsupported {what} {name!r} (expected one of {', '.join(allowed)})")
    return name


def _rows(X: np.ndarray) -> np.ndarray:
    """X as a float64 (N, F) matrix: 1-D inputs are one row, as the ML ops' specs say."""
    X = np.asarray(X)
    if X.dtype.kind not in "fiub":
        raise TypeError(f"expected a numeric tensor, got {X.dtype}")
    X = X.reshape(1, -1) if X.ndim <= 1 else X.reshape(X.shape[0], -1)
    return X.astype(np.float64, copy=False)


def _floats(plain: Any, tensor: Any = None) -> np.ndarray:
    """A float attribute as float64: its *_as_tensor (double) form when given, else the float list."""
    if tensor is not None:
        return np.asarray(tensor, dtype=np.float64).reshape(-1)
    if plain is None:
        return np.zeros(0)
    # The float list holds float32 values: rounding them there keeps ORT's float32 thresholds exactly.
    return np.asarray(plain, dtype=np.float32).astype(np.float64)


def _ints(values: Any) -> np.ndarray:
    return np.zeros(0, dtype=np.int64) if values is None else np.asarray(values, dtype=np.int64).reshape(-1)


def _labels(ints: Any, strings: Any) -> tuple[np.ndarray, bool]:
    """The class labels (int64 or object array) and whether they are strings."""
    if strings is not None and len(strings):
        return _object_array([_text(s) for s in strings]), True
    return _ints(ints), False


def _object_array(values: list) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _logistic(x: np.ndarray) -> np.ndarray:
    # exp of -|x| never overflows; the sign picks the side, as ORT's ComputeLogistic does.
    e = 1.0 / (1.0 + np.exp(-np.abs(x)))
    return np.where(x < 0, 1.0 - e, e)


def _probit(x: np.ndarray) -> np.ndarray:
    """sqrt(2) * erfinv(2x - 1) with the closed-form erfinv approximation (a = 0.147) that ORT evaluates in
    float32: its -v + sqrt(v^2 - v2) cancels, so only the same float32 steps agree with it to 1e-5."""
    f32 = np.float32
    y = np.asarray(x, dtype=f32) * f32(2) - f32(1)
    sign = np.where(y < 0, f32(-1), f32(1))
    w = (f32(1) - y) * (f32(1) + y)
    with np.errstate(divide="ignore", invalid="ignore"):
        log = np.log(w)
        v = f32(2) / (f32(3.14159) * f32(0.147)) + f32(0.5) * log
        v2 = f32(1) / f32(0.147) * log
        inv = sign * np.sqrt(-v + np.sqrt(v * v - v2))
    return (f32(1.41421356) * inv).astype(np.float64)


def _softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _softmax_zero(s: np.ndarray) -> np.ndarray:
    """Softmax over each row's non-zero scores; zero scores stay zero (ORT's SOFTMAX_ZERO)."""
    e = np.where(np.abs(s) > 1e-7, np.exp(s - s.max(axis=1, keepdims=True)), 0.0)
    return e / e.sum(axis=1, keepdims=True)


def _post_transform(scores: np.ndarray, name: str) -> np.ndarray:
    """Apply ``post_transform`` to (N, C) scores (C >= 2, or a regressor's targets)."""
    if name == "LOGISTIC":
        return _logistic(scores)
    if name == "SOFTMAX":
        return _softmax(scores)
    if name == "SOFTMAX_ZERO":
        return _softmax_zero(scores)
    if name == "PROBIT":
        return _probit(scores)
    return scores


def _binary_scores(score: np.ndarray, name: str, complement: bool) -> np.ndarray:
    """The two columns ORT writes for a classifier that computed one score per row: [1 - s, s] when the
    score is a probability (``complement``), else [-s, s], each through ``post_transform``; PROBIT keeps
    one column."""
    if name == "PROBIT":
        return _probit(score)[:, None]
    if complement:
        return np.stack([1.0 - score, score], axis=1)
    if name == "LOGISTIC":
        return np.stack([_logistic(-score), _logistic(score)], axis=1)
    pair = np.stack([-score, score], axis=1)
    if name in ("SOFTMAX", "SOFTMAX_ZERO"):
        return _post_transform(pair, name)
    return pair


def _pick(labels: np.ndarray, index: np.ndarray) -> np.ndarray:
    return labels[index] if labels.dtype != object else _object_array(labels[index].tolist())


# ----------------------------------------------------------------------------------------------
# tree ensembles
# ----------------------------------------------------------------------------------------------


class _Forest:
    """The nodes of a tree ensemble as flat arrays indexed by node position, children resolved to
    positions, and the leaf weights in compressed rows (one run of weights per node)."""

    def __init__(self, treeids: Any, nodeids: Any, modes: Any, featureids: Any, values: np.ndarray,
                 truenodeids: Any, falsenodeids: Any, missing: Any, w_treeids: Any, w_nodeids: Any,
                 w_ids: Any, weights: np.ndarray) -> None:
        tree, node = _ints(treeids), _ints(nodeids)
        count = tree.size
        if count == 0:
            raise ValueError("the ensemble has no nodes")
        fields = {"nodes_modes": modes, "nodes_featureids": featureids, "nodes_values": values,
                  "nodes_truenodeids": truenodeids, "nodes_falsenodeids": falsenodeids}
        for name, field in fields.items():
            if field is None or len(field) != count:
                raise ValueError(f"{name} must have one entry per node ({count})")
        try:
            self.mode = np.array([_MODES[_text(m)] for m in modes], dtype=np.int8)
        except KeyError as exc:
            raise ValueError(f"unknown node mode {exc}") from None
        self.feature = _ints(featureids)
        self.threshold = np.asarray(values, dtype=np.float64)
        self.leaf = self.mode == _LEAF
        # (tree, node) pairs as one sortable key; Python ints first, so the span product never overflows.
        low = int(min(node.min(), _ints(truenodeids).min(), _ints(falsenodeids).min(), 0))
        span = int(max(node.max(), _ints(truenodeids).max(), _ints(falsenodeids).max())) - low + 1
        if (int(tree.max()) - int(tree.min()) + 1) * span >= 2**62:
            raise ValueError("tree or node ids are too far apart")
        tree0 = tree - tree.min()
        key = tree0 * span + (node - low)
        order = np.argsort(key, kind="stable")
        self._sorted, self._order, self._span, self._low, self._tmin = key[order], order, span, low, tree.min()
        if np.any(self._sorted[1:] == self._sorted[:-1]):
            raise ValueError("a (tree id, node id) pair appears twice")
        own = np.arange(count)
        inner = ~self.leaf
        self.true_next = own.copy()
        self.false_next = own.copy()
        self.true_next[inner] = self._find(tree[inner], _ints(truenodeids)[inner], "nodes_truenodeids")
        self.false_next[inner] = self._find(tree[inner], _ints(falsenodeids)[inner], "nodes_falsenodeids")
        track = _ints(missing)
        self.missing = np.zeros(count, dtype=bool) if track.size == 0 else track.astype(bool)
        if self.missing.size != count:
            raise ValueError("nodes_missing_value_tracks_true must have one entry per node")
        self.has_missing = bool(self.missing[inner].any())
        self.needed_features = int(self.feature[inner].max()) + 1 if inner.any() else 0
        if inner.any() and self.feature[inner].min() < 0:
            raise ValueError("a negative feature id")
        used = np.unique(self.mode[inner])
        self.modes_used = used.tolist()
        # Trees in ascending id order, each rooted at its first node in attribute order (as ORT does).
        _, first = np.unique(tree, return_index=True)
        self.roots = first
        # Leaf weights: every (tree, node) named by a weight must be a node of the ensemble.
        w_node = self._find(_ints(w_treeids), _ints(w_nodeids), "the weights' node ids")
        w_ids = _ints(w_ids)
        if not (w_node.size == w_ids.size == weights.size):
            raise ValueError("the weights' tree ids, node ids, target ids and values must have equal lengths")
        worder = np.argsort(w_node, kind="stable")
        self.w_target, self.w_value = w_ids[worder], weights[worder]
        self.w_count = np.bincount(w_node, minlength=count)
        self.w_start = np.concatenate([[0], np.cumsum(self.w_count)[:-1]])
        self.weights_positive = bool(weights.size == 0 or weights.min() >= 0)
        self.target_ids = np.unique(w_ids)

    def _find(self, tree: np.ndarray, node: np.ndarray, what: str) -> np.ndarray:
        key = (tree - self._tmin) * self._span + (node - self._low)
        pos = np.searchsorted(self._sorted, key)
        pos_ok = np.minimum(pos, self._sorted.size - 1)
        bad = (pos >= self._sorted.size) | (self._sorted[pos_ok] != key)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"{what}: tree {int(tree[i])} has no node {int(node[i])}")
        return self._order[pos_ok]

    def leaves(self, X: np.ndarray) -> np.ndarray:
        """The leaf each row reaches in each tree, (N, trees): all rows and trees step down together,
        one level per iteration, over the (row, tree) pairs not at a leaf yet."""
        rows, features = X.shape
        if features < self.needed_features:
            raise ValueError(f"the trees read feature {self.needed_features - 1}, X has {features} features")
        trees = self.roots.size
        current = np.tile(self.roots, rows)
        row_of = np.repeat(np.arange(rows), trees)
        active = np.flatnonzero(~self.leaf[current])
        flat = X.reshape(-1)
        single = self.modes_used[0] if len(self.modes_used) == 1 else None
        for _ in range(self.mode.size + 1):  # a path visits each node once; longer means a cycle
            if active.size == 0:
                return current.reshape(rows, trees)
            node = current[active]
            value = flat[row_of[active] * features + self.feature[node]]
            threshold = self.threshold[node]
            if single is not None:
                go = _compare(single, value, threshold)
            else:
                mode = self.mode[node]
                go = np.zeros(node.size, dtype=bool)
                for code in self.modes_used:
                    hit = mode == code
                    go[hit] = _compare(code, value[hit], threshold[hit])
            if self.has_missing:
                # As ORT: the comparison's own result, or true where the value is NaN and the node says so.
                go |= self.missing[node] & np.isnan(value)
            step = np.where(go, self.true_next[node], self.false_next[node])
            current[active] = step
            active = active[~self.leaf[step]]
        raise ValueError("the trees contain a cycle")

    def aggregate(self, leaves: np.ndarray, targets: int, how: str) -> tuple[np.ndarray, np.ndarray]:
        """Per row and target: the aggregated leaf weights (float64) and whether any weight reached it."""
        rows = leaves.shape[0]
        flat = leaves.reshape(-1)
        counts = self.w_count[flat]
        total = int(counts.sum())
        # Expand each reached leaf into its run of weights (a vectorised ragged gather).
        starts = np.repeat(self.w_start[flat] - (np.cumsum(counts) - counts), counts) + np.arange(total)
        row_of = np.repeat(np.repeat(np.arange(rows), leaves.shape[1]), counts)
        target = self.w_target[starts]
        if target.size and (target.min() < 0 or target.max() >= targets):
            raise ValueError(f"a weight's target/class id lies outside 0..{targets - 1}")
        slot = row_of * targets + target
        hits = np.bincount(slot, minlength=rows * targets).reshape(rows, targets) > 0
        values = self.w_value[starts]
        if how in ("SUM", "AVERAGE"):
            scores = np.bincount(slot, weights=values, minlength=rows * targets)
        elif how == "MIN":
            scores = np.full(rows * targets, np.inf)
            np.minimum.at(scores, slot, values)
        else:
            scores = np.full(rows * targets, -np.inf)
            np.maximum.at(scores, slot, values)
        scores = scores.reshape(rows, targets)
        return np.where(hits, scores, 0.0), hits


def _compare(mode: int, value: np.ndarray, threshold: np.ndarray) -> np.ndarray:
    if mode == 0:
        return value <= threshold
    if mode == 1:
        return value < threshold
    if mode == 2:
        return value >= threshold
    if mode == 3:
        return value > threshold
    if mode == 4:
        return value == threshold
    return value != threshold


def _forest(ctx: Any, key: str, build: Any) -> _Forest:
    """The layer's forest, built once: every attribute is a constant of the layer."""
    cache = getattr(ctx, "cache", None)
    if cache is None:
        return build()
    forest = cache.get(key)
    if forest is None:
        forest = cache[key] = build()
    return forest


def _base(values: np.ndarray, count: int) -> np.ndarray:
    if values.size == 0:
        return np.zeros(count)
    if values.size not in (1, count):
        raise ValueError(f"base_values has {values.size} entries, expected {count}")
    return np.broadcast_to(values, (count,))


def _tree_regressor(ctx, X, aggregate_function, base_values, base_values_as_tensor, n_targets, nodes_falsenodeids,
                    nodes_featureids, nodes_missing_value_tracks_true, nodes_modes, nodes_nodeids, nodes_treeids,
                    nodes_truenodeids, nodes_values, nodes_values_as_tensor, post_transform, target_ids,
                    target_nodeids, target_treeids, target_weights, target_weights_as_tensor) -> np.ndarray:
    how = _choice(aggregate_function, _AGGREGATES, "aggregate_function")
    post = _choice(post_transform, _POST_TRANSFORMS, "post_transform")
    forest = _forest(ctx, "regressor", lambda: _Forest(
        nodes_treeids, nodes_nodeids, nodes_modes, nodes_featureids, _floats(nodes_values, nodes_values_as_tensor),
        nodes_truenodeids, nodes_falsenodeids, nodes_missing_value_tracks_true, target_treeids, target_nodeids,
        target_ids, _floats(target_weights, target_weights_as_tensor)))
    targets = int(n_targets) if n_targets is not None else int(forest.target_ids.max(initial=0)) + 1
    rows = _rows(X)
    scores, _ = forest.aggregate(forest.leaves(rows), targets, how)
    if how == "AVERAGE":
        scores /= forest.roots.size
    scores += _base(_floats(base_values, base_values_as_tensor), targets)
    return _post_transform(scores, post).astype(np.float32)


@register("TreeEnsembleRegressor", 1, domain=ML_DOMAIN)
def tree_ensemble_regressor_1(ctx, X, *, aggregate_function="SUM", base_values=None, n_targets=None,
                              nodes_falsenodeids=None, nodes_featureids=None, nodes_hitrates=None,
                              nodes_missing_value_tracks_true=None, nodes_modes=None, nodes_nodeids=None,
                              nodes_treeids=None, nodes_truenodeids=None, nodes_values=None, post_transform="NONE",
                              target_ids=None, target_nodeids=None, target_treeids=None, target_weights=None):
    """Regression by a tree ensemble (float attributes only)."""
    return _tree_regressor(ctx, X, aggregate_function, base_values, None, n_targets, nodes_falsenodeids,
                           nodes_featureids, nodes_missing_value_tracks_true, nodes_modes, nodes_nodeids,
                           nodes_treeids, nodes_truenodeids, nodes_values, None, post_transform, target_ids,
                           target_nodeids, target_treeids, target_weights, None)


@register("TreeEnsembleRegressor", 3, domain=ML_DOMAIN)
def tree_ensemble_regressor(ctx, X, *, aggregate_function="SUM", base_values=None, base_values_as_tensor=None,
                            n_targets=None, nodes_falsenodeids=None, nodes_featureids=None, nodes_hitrates=None,
                            nodes_hitrates_as_tensor=None, nodes_missing_value_tracks_true=None, nodes_modes=None,
                            nodes_nodeids=None, nodes_treeids=None, nodes_truenodeids=None, nodes_values=None,
                            nodes_values_as_tensor=None, post_transform="NONE", target_ids=None, target_nodeids=None,
                            target_treeids=None, target_weights=None, target_weights_as_tensor=None):
    """Regression by a tree ensemble; the *_as_tensor attributes carry double thresholds and weights."""
    return _tree_regressor(ctx, X, aggregate_function, base_values, base_values_as_tensor, n_targets,
                           nodes_falsenodeids, nodes_featureids, nodes_missing_value_tracks_true, nodes_modes,
                           nodes_nodeids, nodes_treeids, nodes_truenodeids, nodes_values, nodes_values_as_tensor,
                           post_transform, target_ids, target_nodeids, target_treeids, target_weights,
                           target_weights_as_tensor)


def _tree_classifier(ctx, X, base_values, base_values_as_tensor, class_ids, class_nodeids, class_treeids,
                     class_weights, class_weights_as_tensor, classlabels_int64s, classlabels_strings,
                     nodes_falsenodeids, nodes_featureids, nodes_missing_value_tracks_true, nodes_modes,
                     nodes_nodeids, nodes_treeids, nodes_truenodeids, nodes_values, nodes_values_as_tensor,
                     post_transform) -> tuple[np.ndarray, np.ndarray]:
    post = _choice(post_transform, _POST_TRANSFORMS, "post_transform")
    labels, _ = _labels(classlabels_int64s, classlabels_strings)
    if labels.size == 0:
        raise ValueError("TreeEnsembleClassifier needs classlabels_int64s or classlabels_strings")
    forest = _forest(ctx, "classifier", lambda: _Forest(
        nodes_treeids, nodes_nodeids, nodes_modes, nodes_featureids, _floats(nodes_values, nodes_values_as_tensor),
        nodes_truenodeids, nodes_falsenodeids, nodes_missing_value_tracks_true, class_treeids, class_nodeids,
        class_ids, _floats(class_weights, class_weights_as_tensor)))
    classes = max(labels.size, 2)
    rows = _rows(X)
    scores, hits = forest.aggregate(forest.leaves(rows), classes, "SUM")
    base = _floats(base_values, base_values_as_tensor)
    if labels.size > 2:
        if base.size:
            scores += _base(base, classes)
            hits[:] = True
        # The winner among the classes that received a score (ORT skips the others), first on ties.
        winner = np.argmax(np.where(hits, scores, -np.inf), axis=1)
        return _pick(labels, winner), _post_transform(scores, post).astype(np.float32)
    return _binary_tree_classifier(forest, labels, scores, hits, base, post)


def _binary_tree_classifier(forest: _Forest, labels: np.ndarray, scores: np.ndarray, hits: np.ndarray,
                            base: np.ndarray, post: str) -> tuple[np.ndarray, np.ndarray]:
    """Two classes, as ONNX Runtime decides them (the spec is silent): a row whose class 1 got no weight
    has a single score, compared with 0.5 when every weight is positive (a probability) else with 0,
    and its two columns are derived from it; other rows keep two scores and compare class 1's."""
    p0, p1 = scores[:, 0].copy(), scores[:, 1].copy()
    has0, has1 = hits[:, 0].copy(), hits[:, 1].copy()
    if base.size == 2:
        # ORT: with a class-1 score, class 1 becomes base[1] + class 0's score and class 0 its negation.
        p1 = np.where(has1, base[1] + p0, p1)  # ORT 1.32 adds no base to a class that got no weight
        p0 = np.where(has1, -p1, p0 + base[0])
    elif base.size == 1:
        p0 = p0 + base[0]
    single = ~has1 if base.size != 2 else np.zeros_like(has1)
    positive_weight = np.where(has1, p1, np.where(has0, p0, 0.0))
    one_id = forest.target_ids.size == 1
    threshold = 0.5 if one_id and forest.weights_positive else 0.0
    win = positive_weight > threshold
    label = _pick(labels, win.astype(np.int64))
    z = _post_transform(np.stack([p0, p1], axis=1), post)
    if single.any():
        z[single] = _single_scores(p0[single], post, one_id, forest.weights_positive)
    return label, z.astype(np.float32)


def _single_scores(score: np.ndarray, post: str, one_id: bool, positive: bool) -> np.ndarray:
    """The two columns ORT writes from one score: [1 - s, s] for probabilities, else [-s, s] (logistic of
    each under LOGISTIC); PROBIT fills the first column only (ORT leaves the second unset: 0 here)."""
    if post == "PROBIT":
        return np.stack([_probit(score), np.zeros_like(score)], axis=1)
    if one_id and positive:
        return np.stack([1.0 - score, score], axis=1)
    if post == "LOGISTIC":
        return np.stack([_logistic(-score), _logistic(score)], axis=1)
    return np.stack([-score, score], axis=1)


@register("TreeEnsembleClassifier", 1, domain=ML_DOMAIN)
def tree_ensemble_classifier_1(ctx, X, *, base_values=None, class_ids=None, class_nodeids=None, class_treeids=None,
                               class_weights=None, classlabels_int64s=None, classlabels_strings=None,
                               nodes_falsenodeids=None, nodes_featureids=None, nodes_hitrates=None,
                               nodes_missing_value_tracks_true=None, nodes_modes=None, nodes_nodeids=None,
                               nodes_treeids=None, nodes_truenodeids=None, nodes_values=None, post_transform="NONE"):
    """The top class and the class scores of each row by a tree ensemble (float attributes only)."""
    return _tree_classifier(ctx, X, base_values, None, class_ids, class_nodeids, class_treeids, class_weights, None,
                            classlabels_int64s, classlabels_strings, nodes_falsenodeids, nodes_featureids,
                            nodes_missing_value_tracks_true, nodes_modes, nodes_nodeids, nodes_treeids,
                            nodes_truenodeids, nodes_values, None, post_transform)


@register("TreeEnsembleClassifier", 3, domain=ML_DOMAIN)
def tree_ensemble_classifier(ctx, X, *, base_values=None, base_values_as_tensor=None, class_ids=None,
                             class_nodeids=None, class_treeids=None, class_weights=None, class_weights_as_tensor=None,
                             classlabels_int64s=None, classlabels_strings=None, nodes_falsenodeids=None,
                             nodes_featureids=None, nodes_hitrates=None, nodes_hitrates_as_tensor=None,
                             nodes_missing_value_tracks_true=None, nodes_modes=None, nodes_nodeids=None,
                             nodes_treeids=None, nodes_truenodeids=None, nodes_values=None,
                             nodes_values_as_tensor=None, post_transform="NONE"):
    """The top class and the class scores of each row; *_as_tensor attributes carry doubles."""
    return _tree_classifier(ctx, X, base_values, base_values_as_tensor, class_ids, class_nodeids, class_treeids,
                            class_weights, class_weights_as_tensor, classlabels_int64s, classlabels_strings,
                            nodes_falsenodeids, nodes_featureids, nodes_missing_value_tracks_true, nodes_modes,
                            nodes_nodeids, nodes_treeids, nodes_truenodeids, nodes_values, nodes_values_as_tensor,
                            post_transform)


# ----------------------------------------------------------------------------------------------
# linear models
# ----------------------------------------------------------------------------------------------


def _matrix(values: Any, rows: int, what: str) -> np.ndarray:
    flat = _floats(values)
    if rows <= 0 or flat.size % rows:
        raise ValueError(f"{what} has {flat.size} entries, not a multiple of {rows}")
    return flat.reshape(rows, -1)


def _linear_scores(X: np.ndarray, coefficients: Any, intercepts: Any, count: int) -> np.ndarray:
    coef = _matrix(coefficients, count, "coefficients")
    rows = _rows(X)
    if rows.shape[1] != coef.shape[1]:
        raise ValueError(f"X has {rows.shape[1]} features, the coefficients {coef.shape[1]}")
    scores = rows @ coef.T
    bias = _floats(intercepts)
    if bias.size:
        scores += _base(bias, count)
    return scores


@register("LinearClassifier", 1, domain=ML_DOMAIN)
def linear_classifier(ctx, X, *, classlabels_ints=None, classlabels_strings=None, coefficients=None,
                      intercepts=None, multi_class=0, post_transform="NONE"):
    """Scores X @ coefficients.T + intercepts, one per class; a single score is a binary margin."""
    post = _choice(post_transform, _POST_TRANSFORMS, "post_transform")
    labels, strings = _labels(classlabels_ints, classlabels_strings)
    bias = _floats(intercepts)
    count = bias.size if bias.size else max(labels.size, 1)
    scores = _linear_scores(X, coefficients, intercepts, count)
    if count == 1:
        # One score: its sign picks the second label (or "1"/1 when there are not two labels).
        if labels.size != 2:
            labels = _object_array(["0", "1"]) if strings else np.array([0, 1], dtype=np.int64)
        score = scores[:, 0]
        label = _pick(labels, (score > 0).astype(np.int64))
        if (classlabels_strings and len(classlabels_strings) == 2) or (
                not strings and classlabels_ints and len(classlabels_ints) == 2):
            return label, _binary_scores(score, post, post != "LOGISTIC").astype(np.float32)
        return label, _post_transform(scores, post).astype(np.float32)
    if labels.size != count:
        raise ValueError(f"{count} score columns but {labels.size} class labels")
    return _pick(labels, np.argmax(scores, axis=1)), _post_transform(scores, post).astype(np.float32)


@register("LinearRegressor", 1, domain=ML_DOMAIN)
def linear_regressor(ctx, X, *, coefficients=None, intercepts=None, post_transform="NONE", targets=1):
    """Y = X @ coefficients.T + intercepts for ``targets`` targets, then ``post_transform``."""
    post = _choice(post_transform, _POST_TRANSFORMS, "post_transform")
    scores = _linear_scores(X, coefficients, intercepts, int(targets))
    return _post_transform(scores, post).astype(np.float32)


# ----------------------------------------------------------------------------------------------
# support vector machines
# ----------------------------------------------------------------------------------------------


def _kernel(X: np.ndarray, vectors: np.ndarray, kind: str, params: Any) -> np.ndarray:
    """The kernel between every row of X and every vector: (N, vectors)."""
    gamma, coef0, degree = ([float(p) for p in params] + [0.0, 0.0, 0.0])[:3] if params else (0.0, 0.0, 0.0)
    if kind == "RBF":
        # |x - v|^2 expanded, clipped at 0 where rounding would make it negative.
        sq = (X * X).sum(axis=1)[:, None] + (vectors * vectors).sum(axis=1)[None, :] - 2.0 * (X @ vectors.T)
        return np.exp(-gamma * np.maximum(sq, 0.0))
    dot = X @ vectors.T
    if kind == "POLY":
        return (gamma * dot + coef0) ** int(degree)
    if kind == "SIGMOID":
        return np.tanh(gamma * dot + coef0)
    return dot


def _svm_inputs(X: np.ndarray, support_vectors: Any, count: int) -> tuple[np.ndarray, np.ndarray]:
    rows = _rows(X)
    vectors = _matrix(support_vectors, count, "support_vectors")
    if vectors.shape[1] != rows.shape[1]:
        raise ValueError(f"X has {rows.shape[1]} features, the support vectors {vectors.shape[1]}")
    return rows, vectors


@register("SVMRegressor", 1, domain=ML_DOMAIN)
def svm_regressor(ctx, X, *, coefficients=None, kernel_params=None, kernel_type="LINEAR", n_supports=0,
                  one_class=0, post_transform="NONE", rho=None, support_vectors=None):
    """sum_j coef_j K(x, sv_j) + rho (or a linear model when n_supports is 0); one-class gives +1/-1."""
    post = _choice(post_transform, _POST_TRANSFORMS, "post_transform")
    kind = _choice(kernel_type, ("LINEAR", "POLY", "RBF", "SIGMOID"), "kernel_type")
    coef = _floats(coefficients)
    bias = _floats(rho)
    offset = bias[0] if bias.size else 0.0
    if int(n_supports) > 0:
        rows, vectors = _svm_inputs(X, support_vectors, int(n_supports))
        score = _kernel(rows, vectors, kind, kernel_params) @ coef[:vectors.shape[0]] + offset
    else:
        rows = _rows(X)
        score = rows @ coef.reshape(-1, rows.shape[1])[0] + offset
    if int(one_class):
        score = np.where(score > 0, 1.0, -1.0)
    return _post_transform(score[:, None], post).astype(np.float32)


def _pairwise_probabilities(decisions: np.ndarray, prob_a: np.ndarray, prob_b: np.ndarray,
                            classes: int) -> np.ndarray:
    """Class probabilities from the one-vs-one decision values by Platt scaling and libsvm's coupling
    (Wu, Lin and Weng's second method), iterated for all rows at once; a row stops when it converges."""
    rows = decisions.shape[0]
    pair = 1.0 / (1.0 + np.exp(decisions * prob_a + prob_b))  # 1 - logistic(a d + b)
    pair = np.clip(pair, 1e-7, 1 - 1e-7)
    r = np.zeros((rows, classes, classes))
    k = 0
    for i in range(classes):
        for j in range(i + 1, classes):
            r[:, i, j] = pair[:, k]
            r[:, j, i] = 1.0 - pair[:, k]
            k += 1
    q = -r.transpose(0, 2, 1) * r  # q[t, j] = -r[j, t] r[t, j]
    diag = (r * r).sum(axis=1)  # sum over j != t of r[j, t]^2 (r's diagonal is 0)
    idx = np.arange(classes)
    q[:, idx, idx] = diag
    p = np.full((rows, classes), 1.0 / classes)
    eps = 0.005 / classes
    active = np.arange(rows)
    for _ in range(max(100, classes)):
        if active.size == 0:
            break
        qa, pa = q[active], p[active]
        qp = np.einsum("rtj,rj->rt", qa, pa)
        pqp = (pa * qp).sum(axis=1)
        done = np.abs(qp - pqp[:, None]).max(axis=1) < eps
        keep = ~done
        active, qa, pa, qp, pqp = active[keep], qa[keep], pa[keep], qp[keep], pqp[keep]
        for t in range(classes):
            diff = (pqp - qp[:, t]) / qa[:, t, t]
            pa[:, t] += diff
            pqp = (pqp + diff * (diff * qa[:, t, t] + 2 * qp[:, t])) / (1 + diff) ** 2
            pa /= (1 + diff)[:, None]
            qp = (qp + diff[:, None] * qa[:, t, :]) / (1 + diff)[:, None]
        p[active] = pa
    return p


@register("SVMClassifier", 1, domain=ML_DOMAIN)
def svm_classifier(ctx, X, *, classlabels_ints=None, classlabels_strings=None, coefficients=None,
                   kernel_params=None, kernel_type="LINEAR", post_transform="NONE", prob_a=None, prob_b=None, rho=None,
                   support_vectors=None, vectors_per_class=None):
    """One-vs-one SVC (support vectors per class, votes, optional Platt probabilities) or, without support
    vectors, a linear SVM with one score per class."""
    post = _choice(post_transform, _POST_TRANSFORMS, "post_transform")
    kind = _choice(kernel_type, ("LINEAR", "POLY", "RBF", "SIGMOID"), "kernel_type")
    labels, strings = _labels(classlabels_ints, classlabels_strings)
    classes = max(labels.size, 1)
    per_class = _ints(vectors_per_class)
    coef = _floats(coefficients)
    bias = _floats(rho)
    positive = bool(coef.size == 0 or coef.min() >= 0)
    if per_class.sum() > 0:
        total = int(per_class.sum())
        rows, vectors = _svm_inputs(X, support_vectors, total)
        kernels = _kernel(rows, vectors, kind, kernel_params)
        dual = coef.reshape(-1, total)
        start = np.concatenate([[0], np.cumsum(per_class)[:-1]])
        decisions, votes = [], np.zeros((rows.shape[0], classes), dtype=np.int64)
        k = 0
        for i in range(classes):
            si = slice(int(start[i]), int(start[i] + per_class[i]))
            for j in range(i + 1, classes):
                sj = slice(int(start[j]), int(start[j] + per_class[j]))
                d = kernels[:, si] @ dual[j - 1, si] + kernels[:, sj] @ dual[i, sj] + bias[k]
                decisions.append(d)
                win = d > 0
                votes[:, i] += win
                votes[:, j] += ~win
                k += 1
        scores = np.stack(decisions, axis=1) if decisions else np.zeros((rows.shape[0], 0))
        has_proba = prob_a is not None and len(prob_a) > 0
        if has_proba:
            scores = _pairwise_probabilities(scores, _floats(prob_a)[: scores.shape[1]],
                                             _floats(prob_b)[: scores.shape[1]], classes)
        winner = np.argmax(votes, axis=1)
        best = votes[np.arange(votes.shape[0]), winner].astype(np.float64)
    else:
        rows = _rows(X)
        scores = rows @ coef.reshape(classes, -1).T + (bias[0] if bias.size else 0.0)
        has_proba = False
        winner = np.argmax(scores, axis=1)
        best = scores[np.arange(scores.shape[0]), winner]
    if bias.size == 1:  # one decision function: a binary problem, as ORT labels it
        if labels.size == 2:
            if not has_proba and positive:
                winner = np.where(best >= 0.5, 1, winner)
            label = _pick(labels, winner)
            if scores.shape[1] == 1:
                return label, _binary_scores(scores[:, 0], post, False).astype(np.float32)
            return label, _post_transform(scores, post).astype(np.float32)
        fallback = _object_array(["0", "1"]) if strings else np.array([0, 1], dtype=np.int64)
        return _pick(fallback, (best > 0).astype(np.int64)), _post_transform(scores, post).astype(np.float32)
    return _pick(labels, winner), _post_transform(scores, post).astype(np.float32)


# ----------------------------------------------------------------------------------------------
# feature transforms
# ----------------------------------------------------------------------------------------------


@register("Scaler", 1, domain=ML_DOMAIN)
def scaler(ctx, X, *, offset=None, scale=None):
    """(X - offset) * scale along the last axis (each of length 1 or the feature count), as float32."""
    x = np.asarray(X).astype(np.float32)
    off = np.asarray(offset if offset is not None else [0.0], dtype=np.float32)
    mul = np.asarray(scale if scale is not None else [1.0], dtype=np.float32)
    return ((x - off) * mul).astype(np.float32)


@register("Normalizer", 1, domain=ML_DOMAIN)
def normalizer(ctx, X, *, norm="MAX"):
    """Each row divided by its max, its L1 norm or its L2 norm; a row whose divisor is 0 is kept as is."""
    how = _choice(norm, ("MAX", "L1", "L2"), "norm")
    x = np.asarray(X).astype(np.float32)
    rows = x.reshape(1, -1) if x.ndim <= 1 else x
    if how == "MAX":
        div = rows.max(axis=-1, keepdims=True)
    elif how == "L1":
        div = np.abs(rows).sum(axis=-1, keepdims=True)
    else:
        div = np.sqrt((rows * rows).sum(axis=-1, keepdims=True))
    out = np.where(div == 0, rows, rows / np.where(div == 0, 1, div))
    return out.reshape(x.shape).astype(np.float32)


@register("Imputer", 1, domain=ML_DOMAIN)
def imputer(ctx, X, *, imputed_value_floats=None, imputed_value_int64s=None, replaced_value_float=0.0,
            replaced_value_int64=0):
    """Replace the elements equal to the replaced value (NaN matches NaN) with the imputed value of their
    feature (the last axis), or with the single imputed value."""
    x = np.asarray(X)
    if x.dtype.kind == "f":
        values, target = np.asarray(imputed_value_floats or [], dtype=x.dtype), float(replaced_value_float)
    else:
        values, target = np.asarray(imputed_value_int64s or [], dtype=x.dtype), int(replaced_value_int64)
    if values.size == 0:
        raise ValueError("Imputer needs the imputed values of X's type")
    features = x.shape[-1] if x.ndim else 1
    if values.size not in (1, features):
        raise ValueError(f"{values.size} imputed values for {features} features")
    hit = np.isnan(x) if isinstance(target, float) and math.isnan(target) else x == target
    return np.where(hit, values, x).astype(x.dtype)


def _string_keys(X: np.ndarray) -> np.ndarray:
    return np.array([_text(v) for v in X.reshape(-1).tolist()], dtype=object)


def _lookup(keys: np.ndarray, table: np.ndarray) -> np.ndarray:
    """The index of each key in ``table`` (first occurrence), -1 where absent; vectorised by sorting."""
    if table.size == 0:
        return np.full(keys.shape, -1, dtype=np.int64)
    order = np.argsort(table, kind="stable")
    ordered = table[order]
    pos = np.searchsorted(ordered, keys)
    pos_ok = np.minimum(pos, ordered.size - 1)
    found = (pos < ordered.size) & (ordered[pos_ok] == keys)
    return np.where(found, order[pos_ok], -1).astype(np.int64)


@register("OneHotEncoder", 1, domain=ML_DOMAIN)
def one_hot_encoder(ctx, X, *, cats_int64s=None, cats_strings=None, zeros=1):
    """A new last axis of len(categories) with a 1 at each element's category (numbers cast to int64)."""
    x = np.asarray(X)
    if cats_strings is not None and len(cats_strings):
        if x.dtype.kind not in "OUS":
            raise TypeError("cats_strings needs a string input")
        index = _lookup(_string_keys(x), np.array([_text(c) for c in cats_strings], dtype=object))
        count = len(cats_strings)
    elif cats_int64s is not None and len(cats_int64s):
        if x.dtype.kind not in "fiub":
            raise TypeError("cats_int64s needs a numeric input")
        index = _lookup(x.reshape(-1).astype(np.int64), _ints(cats_int64s))
        count = len(cats_int64s)
    else:
        raise ValueError("OneHotEncoder needs cats_int64s or cats_strings")
    if not int(zeros) and np.any(index < 0):
        bad = x.reshape(-1)[int(np.flatnonzero(index < 0)[0])]
        raise ValueError(f"value {bad!r} is not one of the categories (zeros=0)")
    out = np.zeros((index.size, count), dtype=np.float32)
    found = np.flatnonzero(index >= 0)
    out[found, index[found]] = 1.0
    return out.reshape(*x.shape, count)


@register("ZipMap", 1, domain=ML_DOMAIN)
def zip_map(ctx, X, *, classlabels_int64s=None, classlabels_strings=None):
    """One dict per row of X, label -> score: a sequence of maps, returned as a list of dicts (wgsentis
    has no map tensor; a list is how it carries sequences)."""
    labels, strings = _labels(classlabels_int64s, classlabels_strings)
    x = np.asarray(X)
    rows = x.reshape(1, -1) if x.ndim <= 1 else x.reshape(x.shape[0], -1)
    if rows.shape[1] != labels.size:
        raise ValueError(f"X has {rows.shape[1]} columns, ZipMap {labels.size} labels")
    keys = [str(k) for k in labels.tolist()] if strings else [int(k) for k in labels.tolist()]
    return [dict(zip(keys, row, strict=True)) for row in rows.astype(np.float32).tolist()]


@register("FeatureVectorizer", 1, domain=ML_DOMAIN)
def feature_vectorizer(ctx, *inputs, inputdimensions=None):
    """The inputs as (N, C) float32 blocks, each cut or zero-padded to its input dimension, side by side."""
    dims = _ints(inputdimensions)
    if dims.size != len(inputs):
        raise ValueError(f"{len(inputs)} inputs but {dims.size} inputdimensions")
    blocks = []
    for value, width in zip(inputs, dims.tolist(), strict=True):
        x = np.asarray(value)
        x = x.reshape(1, -1) if x.ndim <= 1 else x.reshape(x.shape[0], -1)
        block = np.zeros((x.shape[0], width), dtype=np.float32)
        take = min(width, x.shape[1])
        block[:, :take] = x[:, :take]
        blocks.append(block)
    if len({b.shape[0] for b in blocks}) > 1:
        raise ValueError("the inputs have different row counts")
    return np.concatenate(blocks, axis=1)


@register("CategoryMapper", 1, domain=ML_DOMAIN)
def category_mapper(ctx, X, *, cats_int64s=None, cats_strings=None, default_int64=-1, default_string="_Unused"):
    """Strings to their paired int64 (default_int64 when absent), or int64 to their paired string."""
    ints = _ints(cats_int64s)
    strings = np.array([_text(s) for s in (cats_strings or [])], dtype=object)
    if ints.size != strings.size:
        raise ValueError("cats_int64s and cats_strings must have the same length")
    x = np.asarray(X)
    if x.dtype.kind in "OUS":
        index = _lookup(_string_keys(x), strings)
        return np.where(index >= 0, ints[np.maximum(index, 0)] if ints.size else 0,
                        int(default_int64)).astype(np.int64).reshape(x.shape)
    index = _lookup(x.reshape(-1).astype(np.int64), ints)
    out = np.empty(index.size, dtype=object)
    out[:] = _text(default_string)
    found = np.flatnonzero(index >= 0)
    out[found] = strings[index[found]]
    return out.reshape(x.shape)


@register("DictVectorizer", 1, domain=ML_DOMAIN)
def dict_vectorizer(ctx, X, *, int64_vocabulary=None, string_vocabulary=None):
    """A map (dict) to a (1, len(vocabulary)) row holding each key's value at its vocabulary index, zeros
    elsewhere; a list of maps gives one row each. Keys outside the vocabulary are ignored, as ORT does."""
    if string_vocabulary is not None and len(string_vocabulary):
        vocabulary: dict[Any, int] = {_text(k): i for i, k in reversed(list(enumerate(string_vocabulary)))}
        key_of, width = _text, len(string_vocabulary)
    elif int64_vocabulary is not None and len(int64_vocabulary):
        vocabulary = {int(k): i for i, k in reversed(list(enumerate(int64_vocabulary)))}
        key_of, width = int, len(int64_vocabulary)
    else:
        raise ValueError("DictVectorizer needs int64_vocabulary or string_vocabulary")
    maps = X if isinstance(X, list | tuple) else [X]
    if not all(isinstance(m, dict) for m in maps):
        raise TypeError(f"DictVectorizer expects a map (dict), got {type(X).__name__}")
    values = [v for m in maps for v in m.values()]
    dtype = np.asarray(values).dtype if values else np.float32
    if dtype.kind in "OUS":
        dtype = np.dtype(object)
    out = np.zeros((len(maps), width), dtype=dtype)
    for r, m in enumerate(maps):
        for key, value in m.items():
            col = vocabulary.get(key_of(key))
            if col is not None:
                out[r, col] = value
    return out


# ----------------------------------------------------------------------------------------------
# size rules: the ops whose output can outgrow their input (a category count, a class or target count,
# an input dimension: attributes a few bytes long can name millions)
# ----------------------------------------------------------------------------------------------


def _batch(value: Any) -> int:
    shape = tuple(value.shape)
    return shape[0] if len(shape) > 1 else 1


def _count(attrs: dict, *names: str) -> int:
    for name in names:
        value = attrs.get(name)
        if value is not None and len(value):
            return len(value)
    return 1


@size_rule("OneHotEncoder", domain=ML_DOMAIN)
def _one_hot_encoder_size(layer: Any, args: list[Any]) -> list[tuple[tuple[int, ...], int, str]]:
    shape = (*tuple(args[0].shape), _count(layer.attrs, "cats_int64s", "cats_strings"))
    return [(shape, math.prod(shape) * 4, "")]


@size_rule("TreeEnsembleRegressor", domain=ML_DOMAIN)
def _tree_regressor_size(layer: Any, args: list[Any]) -> list[tuple[tuple[int, ...], int, str]]:
    targets = int(layer.attrs.get("n_targets") or 1)
    shape = (_batch(args[0]), targets)
    return [(shape, math.prod(shape) * 4, ""), (shape, math.prod(shape) * 8, "the float64 scores")]


@size_rule("TreeEnsembleClassifier", "LinearClassifier", "SVMClassifier", domain=ML_DOMAIN)
def _classifier_size(layer: Any, args: list[Any]) -> list[tuple[tuple[int, ...], int, str]]:
    classes = _count(layer.attrs, "classlabels_int64s", "classlabels_ints", "classlabels_strings")
    rows = _batch(args[0])
    if layer.op_type == "SVMClassifier":
        classes = max(classes, classes * (classes - 1) // 2)  # one-vs-one decision values
    shape = (rows, classes)
    return [((rows,), rows * 8, ""), (shape, math.prod(shape) * 4, ""),
            (shape, math.prod(shape) * 8, "the float64 scores")]


@size_rule("LinearRegressor", domain=ML_DOMAIN)
def _linear_regressor_size(layer: Any, args: list[Any]) -> list[tuple[tuple[int, ...], int, str]]:
    shape = (_batch(args[0]), int(layer.attrs.get("targets", 1)))
    return [(shape, math.prod(shape) * 4, "")]


@size_rule("FeatureVectorizer", domain=ML_DOMAIN)
def _feature_vectorizer_size(layer: Any, args: list[Any]) -> list[tuple[tuple[int, ...], int, str]]:
    shape = (_batch(args[0]), sum(int(d) for d in layer.attrs.get("inputdimensions") or []))
    return [(shape, math.prod(shape) * 4, "")]


@size_rule("DictVectorizer", domain=ML_DOMAIN)
def _dict_vectorizer_size(layer: Any, args: list[Any]) -> list[tuple[tuple[int, ...], int, str]]:
    maps = len(args[0]) if isinstance(args[0], list) else 1
    shape = (maps, _count(layer.attrs, "int64_vocabulary", "string_vocabulary"))
    return [(shape, math.prod(shape) * 8, "")]
