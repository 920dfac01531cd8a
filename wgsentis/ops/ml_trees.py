"""Numpy kernels of the ``ai.onnx.ml`` tree ensembles: TreeEnsembleClassifier and TreeEnsembleRegressor 1 and 3
and TreeEnsemble 5, all evaluated through one ``Forest`` (with the layer's other attributes, a ``TreeModel``)
that the GPU programs in ops/ml_trees_gpu.py and ops/ml_trees_pixel.py share. The helpers and post transforms
common to every ML op, and these ops' size rules, are ops/ml.py's.

Semantics follow the ONNX ai.onnx.ml specs and, where the spec is vague (binary classifiers' single score,
SOFTMAX_ZERO, PROBIT), what ONNX Runtime computes, since models exported by skl2onnx and onnxmltools are
validated against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from wgsentis.ops import ml
from wgsentis.ops.ml import ML_DOMAIN
from wgsentis.ops.registry import register

_AGGREGATES = ("SUM", "AVERAGE", "MIN", "MAX")
_MODES = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4, "BRANCH_NEQ": 5,
          "LEAF": 6}
_LEAF = 6
_MEMBER = 7  # BRANCH_MEMBER (TreeEnsemble's mode 6): true when the value is one of the node's set
_V5_MODES = (0, 1, 2, 3, 4, 5, _MEMBER)  # TreeEnsemble's nodes_modes codes 0..6 as the codes above
_V5_AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")  # TreeEnsemble's aggregate_function codes
V5_POST_TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")


class Forest:
    """The nodes of a tree ensemble as flat arrays indexed by node position: each node's mode, feature and
    threshold, the positions its two branches lead to (a leaf leads to itself), the trees' roots, each leaf's
    run of (target, weight) pairs, and each set-membership node's run of sorted member values. Built from the
    classic ops' (tree id, node id) attributes by ``classic_forest`` or from TreeEnsemble's indices by
    ``v5_forest``; the numpy kernels and the GPU programs (ops/ml_trees_gpu.py, ops/ml_trees_pixel.py) all
    evaluate this one form."""

    def __init__(self, mode: np.ndarray, feature: np.ndarray, threshold: np.ndarray, true_next: np.ndarray,
                 false_next: np.ndarray, missing: np.ndarray, roots: np.ndarray, w_node: np.ndarray,
                 w_target: np.ndarray, w_value: np.ndarray, member_sets: list[np.ndarray] | None = None) -> None:
        count = mode.size
        if count == 0:
            raise ValueError("the ensemble has no nodes")
        self.mode = mode.astype(np.int8)
        self.feature = feature.astype(np.int64)
        self.threshold = threshold.astype(np.float64)
        self.leaf = self.mode == _LEAF
        inner = ~self.leaf
        own = np.arange(count)
        self.true_next = np.where(inner, true_next, own).astype(np.int64)
        self.false_next = np.where(inner, false_next, own).astype(np.int64)
        for side, nxt in (("true", self.true_next), ("false", self.false_next)):
            if nxt.min() < 0 or nxt.max() >= count:
                raise ValueError(f"a node's {side} branch leads outside the {count} nodes")
        self.missing = missing.astype(bool) & inner
        self.has_missing = bool(self.missing.any())
        if inner.any() and self.feature[inner].min() < 0:
            raise ValueError("a negative feature id")
        self.needed_features = int(self.feature[inner].max()) + 1 if inner.any() else 0
        self.modes_used = np.unique(self.mode[inner]).tolist()
        self.roots = roots.astype(np.int64)
        if self.roots.size == 0 or self.roots.min() < 0 or self.roots.max() >= count:
            raise ValueError(f"a tree root lies outside the {count} nodes")
        self._members(member_sets or [])
        if w_node.size and (w_node.min() < 0 or w_node.max() >= count):
            raise ValueError(f"a weight names a node outside the {count} nodes")
        if not (w_node.size == w_target.size == w_value.size):
            raise ValueError("the weights' node ids, target ids and values must have equal lengths")
        order = np.argsort(w_node, kind="stable")
        self.w_target, self.w_value = w_target[order].astype(np.int64), w_value[order].astype(np.float64)
        self.w_count = np.bincount(w_node, minlength=count)
        self.w_start = np.concatenate([[0], np.cumsum(self.w_count)[:-1]]).astype(np.int64)
        self.weights_positive = bool(w_value.size == 0 or w_value.min() >= 0)
        self.target_ids = np.unique(w_target)
        self.depth = self._depth()

    def _members(self, sets: list[np.ndarray]) -> None:
        """Each BRANCH_MEMBER node's set, in node order, as a sorted run of ``member_values``."""
        self.member = self.mode == _MEMBER
        nodes = np.flatnonzero(self.member)
        if len(sets) < nodes.size:
            raise ValueError(f"{nodes.size} BRANCH_MEMBER nodes but {len(sets)} sets in membership_values")
        runs = [np.unique(np.asarray(s, dtype=np.float64)) for s in sets[:nodes.size]]
        self.member_count = np.zeros(self.mode.size, dtype=np.int64)
        self.member_count[nodes] = [r.size for r in runs]
        self.member_start = np.zeros(self.mode.size, dtype=np.int64)
        self.member_start[nodes] = np.cumsum([0] + [r.size for r in runs])[:-1]
        self.member_values = np.concatenate(runs) if runs else np.zeros(0)
        # lower_bound over n sorted values takes bit_length(n) halvings
        self.member_steps = int(self.member_count.max(initial=0)).bit_length()

    def _depth(self) -> int:
        """The most branch nodes on a path from a root to a leaf, found level by level; a path longer than the
        node count revisits a node: the "trees" contain a cycle."""
        frontier = np.unique(self.roots)
        for depth in range(self.mode.size + 1):
            frontier = frontier[~self.leaf[frontier]]
            if frontier.size == 0:
                return depth
            frontier = np.unique(np.concatenate([self.true_next[frontier], self.false_next[frontier]]))
        raise ValueError("the trees contain a cycle")

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
        for _ in range(self.depth):
            if active.size == 0:
                break
            node = current[active]
            value = flat[row_of[active] * features + self.feature[node]]
            if single is not None:
                go = self._branch(single, node, value)
            else:
                mode = self.mode[node]
                go = np.zeros(node.size, dtype=bool)
                for code in self.modes_used:
                    hit = mode == code
                    go[hit] = self._branch(code, node[hit], value[hit])
            if self.has_missing:
                # As ORT: the comparison's own result, or true where the value is NaN and the node says so.
                go |= self.missing[node] & np.isnan(value)
            step = np.where(go, self.true_next[node], self.false_next[node])
            current[active] = step
            active = active[~self.leaf[step]]
        return current.reshape(rows, trees)

    def _branch(self, mode: int, node: np.ndarray, value: np.ndarray) -> np.ndarray:
        """Whether each value takes its node's true branch under ``mode`` (NaN compares false but for NEQ)."""
        if mode == _MEMBER:
            return self._is_member(node, value)
        threshold = self.threshold[node]
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

    def _is_member(self, node: np.ndarray, value: np.ndarray) -> np.ndarray:
        """Whether each value is in its node's set: a lower-bound binary search of all values at once."""
        lo = self.member_start[node]
        end = lo + self.member_count[node]
        hi = end.copy()
        table = self.member_values if self.member_values.size else np.zeros(1)
        last = table.size - 1
        for _ in range(self.member_steps):
            open_ = lo < hi
            mid = (lo + hi) // 2
            less = table[np.minimum(mid, last)] < value
            lo = np.where(open_ & less, mid + 1, lo)
            hi = np.where(open_ & ~less, mid, hi)
        return (lo < end) & (table[np.minimum(lo, last)] == value)

    def aggregate(self, leaves: np.ndarray, targets: int, how: str,
                  dtype: type = np.float32) -> tuple[np.ndarray, np.ndarray]:
        """Per row and target: the aggregated leaf weights (in ``dtype``) and whether any weight reached it.
        As ONNX Runtime (its ThresholdType: float32, float64 for a double X): the weights are rounded to
        ``dtype`` and summed in it one by one, tree by tree and, within a leaf, in attribute order, so weights
        that cancel (1e8, 1, -1e8, 3) give what float32 gives (3), as the GPU programs do."""
        rows = leaves.shape[0]
        flat = leaves.reshape(-1)
        counts = self.w_count[flat]
        total = int(counts.sum())
        # Expand each reached leaf into its run of weights (a vectorised ragged gather), in (row, tree) order.
        starts = np.repeat(self.w_start[flat] - (np.cumsum(counts) - counts), counts) + np.arange(total)
        row_of = np.repeat(np.repeat(np.arange(rows), leaves.shape[1]), counts)
        target = self.w_target[starts]
        if target.size and (target.min() < 0 or target.max() >= targets):
            raise ValueError(f"a weight's target/class id lies outside 0..{targets - 1}")
        slot = row_of * targets + target
        hits = np.bincount(slot, minlength=rows * targets).reshape(rows, targets) > 0
        values = self.w_value[starts].astype(dtype)
        # ufunc.at applies its updates in index order: the sequential sum (or min, max) of each slot.
        if how in ("SUM", "AVERAGE"):
            scores = np.zeros(rows * targets, dtype=dtype)
            np.add.at(scores, slot, values)
        elif how == "MIN":
            scores = np.full(rows * targets, np.inf, dtype=dtype)
            np.minimum.at(scores, slot, values)
        else:
            scores = np.full(rows * targets, -np.inf, dtype=dtype)
            np.maximum.at(scores, slot, values)
        scores = scores.reshape(rows, targets)
        return np.where(hits, scores, dtype(0)), hits


def classic_forest(treeids: Any, nodeids: Any, modes: Any, featureids: Any, values: np.ndarray, truenodeids: Any,
                   falsenodeids: Any, missing: Any, w_treeids: Any, w_nodeids: Any, w_ids: Any,
                   weights: np.ndarray) -> Forest:
    """The Forest of TreeEnsembleRegressor/Classifier's attributes: nodes named by (tree id, node id), each tree
    rooted at its first node in attribute order (as ORT does), weights naming their leaf the same way."""
    tree, node = ml.ints(treeids), ml.ints(nodeids)
    count = tree.size
    if count == 0:
        raise ValueError("the ensemble has no nodes")
    fields = {"nodes_nodeids": nodeids, "nodes_modes": modes, "nodes_featureids": featureids,
              "nodes_values": values, "nodes_truenodeids": truenodeids, "nodes_falsenodeids": falsenodeids}
    for name, field in fields.items():
        if field is None or len(field) != count:
            raise ValueError(f"{name} must have one entry per node ({count})")
    try:
        mode = np.array([_MODES[ml.text(m)] for m in modes], dtype=np.int8)
    except KeyError as exc:
        raise ValueError(f"unknown node mode {exc}") from None
    true_ids, false_ids = ml.ints(truenodeids), ml.ints(falsenodeids)
    # (tree, node) pairs as one sortable key; Python ints first, so the span product never overflows.
    low = int(min(node.min(), true_ids.min(), false_ids.min(), 0))
    span = int(max(node.max(), true_ids.max(), false_ids.max())) - low + 1
    tmin = int(tree.min())
    if (int(tree.max()) - tmin + 1) * span >= 2**62:
        raise ValueError("tree or node ids are too far apart")
    key = (tree - tmin) * span + (node - low)
    order = np.argsort(key, kind="stable")
    ordered = key[order]
    if np.any(ordered[1:] == ordered[:-1]):
        raise ValueError("a (tree id, node id) pair appears twice")

    def find(t: np.ndarray, n: np.ndarray, what: str) -> np.ndarray:
        wanted = (t - tmin) * span + (n - low)
        pos = np.minimum(np.searchsorted(ordered, wanted), ordered.size - 1)
        bad = ordered[pos] != wanted
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"{what}: tree {int(t[i])} has no node {int(n[i])}")
        return order[pos]

    inner = mode != _LEAF
    true_next = np.arange(count)
    false_next = np.arange(count)
    true_next[inner] = find(tree[inner], true_ids[inner], "nodes_truenodeids")
    false_next[inner] = find(tree[inner], false_ids[inner], "nodes_falsenodeids")
    track = ml.ints(missing)
    if track.size not in (0, count):
        raise ValueError("nodes_missing_value_tracks_true must have one entry per node")
    _, roots = np.unique(tree, return_index=True)  # trees in ascending id order
    w_node = find(ml.ints(w_treeids), ml.ints(w_nodeids), "the weights' node ids")
    return Forest(mode, ml.ints(featureids), values, true_next, false_next,
                  track if track.size else np.zeros(count, dtype=bool), roots, w_node, ml.ints(w_ids), weights)


def _tensor_values(value: Any) -> np.ndarray:
    return np.zeros(0) if value is None else np.asarray(value).reshape(-1)


def v5_forest(attrs: dict[str, Any]) -> Forest:
    """The Forest of TreeEnsemble (ai.onnx.ml 5): branch nodes 0..N-1 in nodes_* order, then one node per
    leaf (N + its leaf_* index), each holding its single (target, weight)."""
    features = ml.ints(attrs.get("nodes_featureids"))
    count = features.size
    leaf_weights = _tensor_values(attrs.get("leaf_weights")).astype(np.float64)
    leaves = leaf_weights.size
    fields = ("nodes_modes", "nodes_splits", "nodes_truenodeids", "nodes_falsenodeids", "nodes_trueleafs",
              "nodes_falseleafs")
    for name in fields:
        if _tensor_values(attrs.get(name)).size != count:
            raise ValueError(f"{name} must have one entry per node ({count})")
    codes = _tensor_values(attrs.get("nodes_modes")).astype(np.int64)
    if codes.size and (codes.min() < 0 or codes.max() >= len(_V5_MODES)):
        raise ValueError(f"unknown node mode {int(codes[(codes < 0) | (codes >= len(_V5_MODES))][0])}")
    mode = np.concatenate([np.asarray(_V5_MODES, dtype=np.int8)[codes], np.full(leaves, _LEAF, dtype=np.int8)])
    targets = ml.ints(attrs.get("leaf_targetids"))
    if targets.size != leaves:
        raise ValueError(f"leaf_targetids must have one entry per leaf ({leaves})")

    def branch(ids_name: str, leafs_name: str) -> np.ndarray:
        ids = ml.ints(attrs.get(ids_name))
        to_leaf = ml.ints(attrs.get(leafs_name)).astype(bool)
        bound = np.where(to_leaf, leaves, count)
        if ids.size and (ids.min() < 0 or np.any(ids >= bound)):
            raise ValueError(f"{ids_name}: an id lies outside the nodes or leaves it indexes")
        return np.where(to_leaf, count + ids, ids)

    true_next = np.concatenate([branch("nodes_truenodeids", "nodes_trueleafs"), np.zeros(leaves, np.int64)])
    false_next = np.concatenate([branch("nodes_falsenodeids", "nodes_falseleafs"), np.zeros(leaves, np.int64)])
    track = ml.ints(attrs.get("nodes_missing_value_tracks_true"))
    if track.size not in (0, count):
        raise ValueError("nodes_missing_value_tracks_true must have one entry per node")
    missing = np.concatenate([track if track.size else np.zeros(count, np.int64), np.zeros(leaves, np.int64)])
    # membership_values: the sets of the BRANCH_MEMBER nodes in node order, each ended by a NaN (or the end).
    members = _tensor_values(attrs.get("membership_values")).astype(np.float64)
    cuts = np.flatnonzero(np.isnan(members))
    sets = np.split(members, cuts)
    sets = [s[~np.isnan(s)] for s in sets]
    if sets and sets[-1].size == 0:
        sets.pop()  # the NaN that ends the last set
    splits = np.concatenate([_tensor_values(attrs.get("nodes_splits")).astype(np.float64), np.zeros(leaves)])
    return Forest(mode, np.concatenate([features, np.zeros(leaves, np.int64)]), splits, true_next, false_next,
                  missing, ml.ints(attrs.get("tree_roots")), np.arange(count, count + leaves), targets, leaf_weights,
                  sets)


@dataclass
class TreeModel:
    """A tree ensemble layer resolved from its attributes: what the numpy kernel and the GPU programs run."""

    forest: Forest
    targets: int  # score columns (a classifier's: its class count, at least 2)
    aggregate: str  # SUM, AVERAGE, MIN or MAX
    post: str  # post_transform
    base: np.ndarray  # float64 base values: none, one, or one per target (a binary classifier: one or two)
    labels: np.ndarray | None  # a classifier's class labels (int64, or an object array of str); None: scores only

    @property
    def binary(self) -> bool:
        """A classifier with at most two labels: decided as ORT does (``_binary_tree_classifier``)."""
        return self.labels is not None and self.labels.size <= 2


def tree_model(op_type: str, attrs: dict[str, Any]) -> TreeModel:
    """The TreeModel of a TreeEnsembleRegressor, TreeEnsembleClassifier or TreeEnsemble layer's attributes."""
    get = attrs.get
    if op_type == "TreeEnsemble":
        forest = v5_forest(attrs)
        targets = get("n_targets")
        targets = int(targets) if targets is not None else int(forest.target_ids.max(initial=0)) + 1
        return TreeModel(forest, targets, _code(get("aggregate_function", 1), _V5_AGGREGATES, "aggregate_function"),
                         _code(get("post_transform", 0), V5_POST_TRANSFORMS, "post_transform"), np.zeros(0), None)
    prefix = "class" if op_type == "TreeEnsembleClassifier" else "target"
    forest = classic_forest(
        get("nodes_treeids"), get("nodes_nodeids"), get("nodes_modes"), get("nodes_featureids"),
        ml.floats(get("nodes_values"), get("nodes_values_as_tensor")), get("nodes_truenodeids"),
        get("nodes_falsenodeids"), get("nodes_missing_value_tracks_true"), get(f"{prefix}_treeids"),
        get(f"{prefix}_nodeids"), get(f"{prefix}_ids"), ml.floats(get(f"{prefix}_weights"),
                                                                get(f"{prefix}_weights_as_tensor")))
    post = ml.choice(get("post_transform", "NONE"), ml.POST_TRANSFORMS, "post_transform")
    base = ml.floats(get("base_values"), get("base_values_as_tensor"))
    if prefix == "target":
        targets = get("n_targets")
        targets = int(targets) if targets is not None else int(forest.target_ids.max(initial=0)) + 1
        how = ml.choice(get("aggregate_function", "SUM"), _AGGREGATES, "aggregate_function")
        return TreeModel(forest, targets, how, post, ml.base(base, targets), None)
    labels, _ = ml.class_labels(get("classlabels_int64s"), get("classlabels_strings"))
    if labels.size == 0:
        raise ValueError("TreeEnsembleClassifier needs classlabels_int64s or classlabels_strings")
    targets = max(labels.size, 2)
    return TreeModel(forest, targets, "SUM", post, base if labels.size <= 2 else ml.base(base, targets), labels)


def _code(value: Any, names: tuple[str, ...], what: str) -> str:
    """The name of an enum attribute given as its integer code (TreeEnsemble's)."""
    code = int(value)
    if not 0 <= code < len(names):
        raise ValueError(f"unsupported {what} {code} (expected 0..{len(names) - 1})")
    return names[code]


def accumulator(X: Any) -> type:
    """The type tree scores are summed in: ONNX Runtime's ThresholdType, float64 for a double X, else float32."""
    return np.float64 if np.asarray(X).dtype == np.float64 else np.float32


def run_tree_model(model: TreeModel, X: np.ndarray) -> Any:
    """The layer's outputs: the (N, targets) float64 scores of a regressor or TreeEnsemble, or a classifier's
    (labels, float32 scores)."""
    forest = model.forest
    dtype = accumulator(X)
    scores, hits = forest.aggregate(forest.leaves(ml.as_rows(X)), model.targets, model.aggregate, dtype)
    base = model.base.astype(dtype)  # added in the accumulator's type too, as ORT adds it
    if model.labels is None:
        if model.aggregate == "AVERAGE":
            scores /= dtype(forest.roots.size)
        if base.size:
            # As ORT: a target no weight reached scores 0, without its base value.
            scores = np.where(hits, scores + base, dtype(0))
        return ml.apply_post_transform(scores.astype(np.float64), model.post)
    if model.binary:
        return _binary_tree_classifier(forest, model.labels, scores, hits, base, model.post)
    if base.size:
        scores += base
        hits[:] = True
    scores = scores.astype(np.float64)
    # The winner among the classes that received a score (ORT skips the others), first on ties.
    winner = np.argmax(np.where(hits, scores, -np.inf), axis=1)
    return ml.pick(model.labels, winner), ml.apply_post_transform(scores, model.post).astype(np.float32)


def _tree_model(ctx: Any, op_type: str, attrs: dict[str, Any]) -> TreeModel:
    """The layer's TreeModel, built once: every attribute is a constant of the layer."""
    cache = getattr(ctx, "cache", None)
    if cache is None:
        return tree_model(op_type, attrs)
    model = cache.get("tree_model")
    if model is None:
        model = cache["tree_model"] = tree_model(op_type, attrs)
    return model


def _binary_tree_classifier(forest: Forest, labels: np.ndarray, scores: np.ndarray, hits: np.ndarray,
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
    p0, p1 = p0.astype(np.float64), p1.astype(np.float64)  # the base added in the accumulator's type
    single = ~has1 if base.size != 2 else np.zeros_like(has1)
    positive_weight = np.where(has1, p1, np.where(has0, p0, 0.0))
    one_id = forest.target_ids.size == 1
    threshold = 0.5 if one_id and forest.weights_positive else 0.0
    win = positive_weight > threshold
    label = ml.pick(labels, win.astype(np.int64))
    z = ml.apply_post_transform(np.stack([p0, p1], axis=1), post)
    if single.any():
        z[single] = _single_scores(p0[single], post, one_id, forest.weights_positive)
    return label, z.astype(np.float32)


def _single_scores(score: np.ndarray, post: str, one_id: bool, positive: bool) -> np.ndarray:
    """The two columns ORT writes from one score: [1 - s, s] for probabilities, else [-s, s] (logistic of
    each under LOGISTIC); PROBIT fills the first column only (ORT leaves the second unset: 0 here)."""
    if post == "PROBIT":
        return np.stack([ml.probit(score), np.zeros_like(score)], axis=1)
    if one_id and positive:
        return np.stack([1.0 - score, score], axis=1)
    if post == "LOGISTIC":
        return np.stack([ml.logistic(-score), ml.logistic(score)], axis=1)
    return np.stack([-score, score], axis=1)


def _attributes(bound: dict[str, Any]) -> dict[str, Any]:
    """A kernel's attributes from its ``locals()``: every keyword-only argument (ctx and X dropped)."""
    return {k: v for k, v in bound.items() if k not in ("ctx", "X")}


@register("TreeEnsembleRegressor", 1, domain=ML_DOMAIN)
def tree_ensemble_regressor_1(ctx, X, *, aggregate_function="SUM", base_values=None, n_targets=None,
                              nodes_falsenodeids=None, nodes_featureids=None, nodes_hitrates=None,
                              nodes_missing_value_tracks_true=None, nodes_modes=None, nodes_nodeids=None,
                              nodes_treeids=None, nodes_truenodeids=None, nodes_values=None, post_transform="NONE",
                              target_ids=None, target_nodeids=None, target_treeids=None, target_weights=None):
    """Regression by a tree ensemble (float attributes only)."""
    model = _tree_model(ctx, "TreeEnsembleRegressor", _attributes(locals()))
    return run_tree_model(model, X).astype(np.float32)


@register("TreeEnsembleRegressor", 3, domain=ML_DOMAIN)
def tree_ensemble_regressor(ctx, X, *, aggregate_function="SUM", base_values=None, base_values_as_tensor=None,
                            n_targets=None, nodes_falsenodeids=None, nodes_featureids=None, nodes_hitrates=None,
                            nodes_hitrates_as_tensor=None, nodes_missing_value_tracks_true=None, nodes_modes=None,
                            nodes_nodeids=None, nodes_treeids=None, nodes_truenodeids=None, nodes_values=None,
                            nodes_values_as_tensor=None, post_transform="NONE", target_ids=None, target_nodeids=None,
                            target_treeids=None, target_weights=None, target_weights_as_tensor=None):
    """Regression by a tree ensemble; the *_as_tensor attributes carry double thresholds and weights."""
    model = _tree_model(ctx, "TreeEnsembleRegressor", _attributes(locals()))
    return run_tree_model(model, X).astype(np.float32)


@register("TreeEnsembleClassifier", 1, domain=ML_DOMAIN)
def tree_ensemble_classifier_1(ctx, X, *, base_values=None, class_ids=None, class_nodeids=None, class_treeids=None,
                               class_weights=None, classlabels_int64s=None, classlabels_strings=None,
                               nodes_falsenodeids=None, nodes_featureids=None, nodes_hitrates=None,
                               nodes_missing_value_tracks_true=None, nodes_modes=None, nodes_nodeids=None,
                               nodes_treeids=None, nodes_truenodeids=None, nodes_values=None, post_transform="NONE"):
    """The top class and the class scores of each row by a tree ensemble (float attributes only)."""
    return run_tree_model(_tree_model(ctx, "TreeEnsembleClassifier", _attributes(locals())), X)


@register("TreeEnsembleClassifier", 3, domain=ML_DOMAIN)
def tree_ensemble_classifier(ctx, X, *, base_values=None, base_values_as_tensor=None, class_ids=None,
                             class_nodeids=None, class_treeids=None, class_weights=None, class_weights_as_tensor=None,
                             classlabels_int64s=None, classlabels_strings=None, nodes_falsenodeids=None,
                             nodes_featureids=None, nodes_hitrates=None, nodes_hitrates_as_tensor=None,
                             nodes_missing_value_tracks_true=None, nodes_modes=None, nodes_nodeids=None,
                             nodes_treeids=None, nodes_truenodeids=None, nodes_values=None,
                             nodes_values_as_tensor=None, post_transform="NONE"):
    """The top class and the class scores of each row; *_as_tensor attributes carry doubles."""
    return run_tree_model(_tree_model(ctx, "TreeEnsembleClassifier", _attributes(locals())), X)


@register("TreeEnsemble", 5, domain=ML_DOMAIN)
def tree_ensemble(ctx, X, *, aggregate_function=1, leaf_targetids=None, leaf_weights=None, membership_values=None,
                  n_targets=None, nodes_falseleafs=None, nodes_falsenodeids=None, nodes_featureids=None,
                  nodes_hitrates=None, nodes_missing_value_tracks_true=None, nodes_modes=None, nodes_splits=None,
                  nodes_trueleafs=None, nodes_truenodeids=None, post_transform=0, tree_roots=None):
    """The one tree ensemble op of ai.onnx.ml 5: a leaf holds one (target, weight); branch nodes compare (or,
    BRANCH_MEMBER, test set membership) in X's own type; Y has X's type."""
    model = _tree_model(ctx, "TreeEnsemble", _attributes(locals()))
    x = np.asarray(X)
    if x.dtype.kind != "f":
        raise TypeError(f"TreeEnsemble takes a float tensor, got {x.dtype}")
    return run_tree_model(model, x).astype(x.dtype)
