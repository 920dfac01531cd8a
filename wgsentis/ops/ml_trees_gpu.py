"""gpu-compute programs of the ai.onnx.ml tree ensembles (numpy kernels: ops/ml_trees.py): TreeEnsembleRegressor,
TreeEnsembleClassifier (its scores, and its labels where they are int64) and TreeEnsemble 5.

The layer's ``ml_trees.TreeModel`` (the same Forest the numpy kernel walks) is packed once per program into one
table of 32-bit words (``tree_table``) and uploaded as a constant. A run is three dispatches:
wgsl/compute/tree_leaves.wgsl finds the leaf of every (row, tree), tree_scores.wgsl gathers each row's leaf
weights per target (in blocks of trees that fit lavapipe's loop limit), tree_finish.wgsl applies AVERAGE, the
base values, the classifier's decision and the post transform. Comparisons are made in float32 on both sides,
exactly as the numpy kernel makes them for a float32 X against float32 thresholds; anything the GPU cannot
reproduce exactly (a float64 or integer X, thresholds or set members that are not float32 values, string
labels, labels past int32) returns ``NotImplemented`` and the layer runs its numpy kernel. The gpu-pixel
builders are in ops/ml_trees_pixel.py, from the same table (``model_table``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from wgsentis.backends.gpu.tensors import loop_passes
from wgsentis.ops import ml_trees
from wgsentis.ops.ml import ML_DOMAIN
from wgsentis.ops.ml_gpu import POSTS
from wgsentis.ops.registry import GPU_COMPUTE, register
from wgsentis.ops.tensor_gpu import device_tensor

HEADER = 16  # table words before the nodes (see tree_table)
_MODE_SHIFT, _MISSING_BIT, _NEXT_MASK = 28, 31, (1 << 28) - 1
_AGGS = {"SUM": 0, "AVERAGE": 0, "MIN": 1, "MAX": 2}  # tree_scores.wgsl's AGG (AVERAGE: a sum, then divided)
KIND_SCORES, KIND_CLASSES, KIND_BINARY = 0, 1, 2  # tree_finish.wgsl's KIND
# Header words of a table: its sections' offsets and what the builder needs without rebuilding the model.
(H_NODES, H_TREES, H_DEPTH, H_STEPS, H_MAX_WEIGHTS, H_WEIGHTS, H_MEMBERS, H_ROOTS, H_BASE, H_LABELS,
 H_BASE_COUNT, H_LABEL_COUNT, H_FEATURES, H_TARGETS, H_CODES) = range(15)
# Bits of the H_CODES word: KIND (bits 0-3), AGG (4-7), POST (8-11), then these flags.
F_ONE_ID, F_POSITIVE, F_AVERAGE, F_EXACT = 1 << 12, 1 << 13, 1 << 14, 1 << 15


def _f32_exact(values: np.ndarray) -> bool:
    """Whether float64 ``values`` are all float32 values (NaN included), so float32 comparisons keep them."""
    as32 = values.astype(np.float32).astype(np.float64)
    return bool(np.all((as32 == values) | (np.isnan(as32) & np.isnan(values))))


def tree_table(model: ml_trees.TreeModel) -> np.ndarray:
    """The ensemble as int32 words for the shaders: a 16-word header (section offsets, sizes, the finish
    kernel's codes and whether the GPU reproduces the numpy kernel exactly), 4 words per node (see
    wgsl/compute/tree_leaves.wgsl), the leaves' weights (target, f32 bits), the member sets (count, then
    sorted f32 values), the roots, the base values (f32) and the int64 labels (as int32)."""
    forest = model.forest
    count = forest.mode.size
    member = forest.member
    # Member sets as runs of (count, values...): a node points at its run's count word.
    run_words = np.where(member, forest.member_count + 1, 0)
    run_at = np.concatenate([[0], np.cumsum(run_words)[:-1]]).astype(np.int64)
    members = np.zeros(int(run_words.sum()), dtype=np.uint32)
    members[run_at[member]] = forest.member_count[member]
    value_at = np.repeat(run_at[member] + 1 - forest.member_start[member], forest.member_count[member]) + \
        np.arange(forest.member_values.size)
    members[value_at] = forest.member_values.astype(np.float32).view(np.uint32)
    labels = model.labels if model.labels is not None else np.zeros(0, dtype=np.int64)
    int_labels = labels.dtype != object and (labels.size == 0 or (labels.min() >= -(2**31) and labels.max() < 2**31))
    exact = (count <= _NEXT_MASK and int_labels and _f32_exact(forest.threshold)
             and _f32_exact(forest.member_values) and int(forest.w_target.max(initial=-1)) < model.targets)
    if model.labels is None:
        kind, columns = KIND_SCORES, model.targets
    else:
        kind, columns = (KIND_BINARY, 2) if model.binary else (KIND_CLASSES, model.targets)
        exact = exact and labels.size >= 2
    one_id = forest.target_ids.size == 1
    codes = (kind | _AGGS[model.aggregate] << 4 | POSTS[model.post] << 8 | F_ONE_ID * one_id
             | F_POSITIVE * forest.weights_positive | F_AVERAGE * (model.aggregate == "AVERAGE") | F_EXACT * exact)
    weights_at = HEADER + 4 * count
    offsets = np.cumsum([weights_at, 2 * forest.w_value.size, members.size, forest.roots.size, model.base.size])
    header = np.zeros(HEADER, dtype=np.int64)
    header[:H_CODES + 1] = [count, forest.roots.size, forest.depth, forest.member_steps,
                            int(forest.w_count.max(initial=0)), *offsets, model.base.size, labels.size,
                            forest.needed_features, columns, codes]
    leaf = forest.leaf
    nodes = np.zeros((count, 4), dtype=np.uint32)
    nodes[:, 0] = np.where(leaf, forest.w_start, forest.feature)
    thresholds = forest.threshold.astype(np.float32).view(np.uint32)
    nodes[:, 1] = np.where(leaf, forest.w_count, np.where(member, offsets[1] + run_at, thresholds))
    nodes[:, 2] = ((forest.true_next & _NEXT_MASK) | (forest.mode.astype(np.int64) << _MODE_SHIFT)
                   | (forest.missing.astype(np.int64) << _MISSING_BIT)).astype(np.uint32)
    nodes[:, 3] = forest.false_next
    weights = np.stack([forest.w_target.astype(np.uint32),
                        forest.w_value.astype(np.float32).view(np.uint32)], axis=1)
    label_words = (labels.astype(np.int64) & 0xFFFFFFFF).astype(np.uint32) if int_labels else \
        np.zeros(labels.size, dtype=np.uint32)
    words = np.concatenate([header.astype(np.uint32), nodes.reshape(-1), weights.reshape(-1), members,
                            forest.roots.astype(np.uint32), model.base.astype(np.float32).view(np.uint32),
                            label_words])
    return words.view(np.int32)


def model_table(rec, layer) -> np.ndarray | None:
    """The layer's table, packed once per program (None where its attributes are invalid: the numpy kernel
    then reports them)."""

    def make() -> np.ndarray:
        try:
            return tree_table(ml_trees.tree_model(layer.op_type, layer.attrs))
        except (ValueError, TypeError, KeyError):
            return np.zeros(0, dtype=np.int32)

    table = rec.derived(("tree_table", layer.op_type), (layer.attrs,), make)
    return table if table.size else None


def _tree_blocks(rec, trees: int, max_weights: int, targets: int) -> list[tuple[int, int]] | None:
    """Blocks of trees whose weight gathering fits the device's loop limit in one invocation, or None."""
    start_passes = loop_passes(targets)
    per = trees
    while per > 0 and not rec.loops_fit(start_passes + loop_passes(per, max_weights)):
        per //= 2
    if per == 0:
        return None
    return [(t, min(trees, t + per)) for t in range(0, trees, per)]


def _build(rec, layer, X) -> Any:
    """Record the three dispatches of a tree ensemble layer; returns its scores (and int64 labels)."""
    table = model_table(rec, layer)
    x = device_tensor(rec, X)
    if table is None or x is None or x.dtype != np.float32 or x.ndim == 0:
        return NotImplemented
    h = table[:HEADER].astype(np.int64)
    codes = int(h[H_CODES])
    if not codes & F_EXACT:
        return NotImplemented
    kind, aggregate, post = codes & 15, codes >> 4 & 15, codes >> 8 & 15
    rows = x.shape[0] if x.ndim > 1 else 1
    features = x.size // rows if rows else 0
    trees, depth, max_weights, steps = (int(h[k]) for k in (H_TREES, H_DEPTH, H_MAX_WEIGHTS, H_STEPS))
    targets, columns = int(h[H_TARGETS]), (2 if kind == KIND_BINARY else int(h[H_TARGETS]))
    if features < h[H_FEATURES] or rows == 0:
        return NotImplemented  # the numpy kernel names the missing feature (or returns the empty result)
    blocks = _tree_blocks(rec, trees, max_weights, targets)
    finish_passes = 4 * loop_passes(targets)
    if blocks is None or not rec.loops_fit(finish_passes) or not rec.loops_fit(loop_passes(depth, steps)):
        return NotImplemented
    tab = rec.upload(table, f"{layer.name}.trees")
    leaves = rec.alloc((rows, trees), np.int32)  # (N, trees) node positions
    rec.dispatch("compute/tree_leaves.wgsl", [x, tab], [leaves],
                 [rows * trees, trees, features, depth, steps, int(h[H_ROOTS])], rows * trees,
                 loops=loop_passes(depth, steps))
    sums = rec.alloc((rows, targets), np.float32)  # (N, targets)
    hits = rec.alloc((rows, targets), np.int32)
    for first, end in blocks:
        rec.dispatch("compute/tree_scores.wgsl", [leaves, tab], [sums, hits],
                     [rows, trees, targets, first, end, int(h[H_WEIGHTS])], rows,
                     constants={"AGG": aggregate, "FIRST": int(first == 0)},
                     loops=loop_passes(targets) + loop_passes(end - first, max_weights))
    scores = rec.alloc((rows, columns), np.float32)
    # Scores only: the label binding gets a one-word stand-in.
    label = rec.alloc((rows,), np.int64) if kind != KIND_SCORES else rec.alloc((1,), np.int32)
    threshold = 0.5 if codes & F_ONE_ID and codes & F_POSITIVE else 0.0
    flags = (1 if codes & F_ONE_ID else 0) | (2 if codes & F_POSITIVE else 0) | (4 if codes & F_AVERAGE else 0)
    rec.dispatch("compute/tree_finish.wgsl", [sums, hits, tab], [scores, label],
                 [rows, targets, trees, int(h[H_BASE_COUNT]), int(h[H_BASE]), int(h[H_LABELS]), threshold, flags],
                 rows, constants={"KIND": kind, "POST": post}, loops=finish_passes)
    return scores if kind == KIND_SCORES else (label, scores)


@register("TreeEnsembleRegressor", 1, domain=ML_DOMAIN, backend=GPU_COMPUTE)
def tree_ensemble_regressor(rec, layer, X, **attrs):
    return _build(rec, layer, X)


@register("TreeEnsembleClassifier", 1, domain=ML_DOMAIN, backend=GPU_COMPUTE)
def tree_ensemble_classifier(rec, layer, X, **attrs):
    return _build(rec, layer, X)


@register("TreeEnsemble", 5, domain=ML_DOMAIN, backend=GPU_COMPUTE)
def tree_ensemble(rec, layer, X, **attrs):
    return _build(rec, layer, X)
