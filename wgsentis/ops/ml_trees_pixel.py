"""gpu-pixel programs of the ai.onnx.ml tree ensembles, from the table that ops/ml_trees_gpu.py packs for the
gpu-compute programs (the same exactness rules, the same declined cases: they run the numpy kernel of
ops/ml_trees.py).

The ensemble's table (ml_trees_gpu.tree_table) is a constant int32 texture of four words a texel (a node's four
words are one texel); wgsl/pixel/tree_scores.wgsl walks every tree for four targets of a row per fragment and
gathers the leaves' weights into two render targets (sums, hits), in blocks of trees that fit the loop limit,
each block starting from the previous one's; wgsl/pixel/tree_finish.wgsl draws the scores, and the int64 labels
in a second draw.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from wgsentis.backends.gpu.tensors import loop_passes
from wgsentis.ops import ml_gpu, ml_trees_gpu
from wgsentis.ops.ml import ML_DOMAIN
from wgsentis.ops.ml_pixel import matrix_texture
from wgsentis.ops.ml_trees_gpu import (H_BASE, H_BASE_COUNT, H_CODES, H_DEPTH, H_FEATURES, H_LABELS, H_MAX_WEIGHTS,
                                       H_ROOTS, H_STEPS, H_TARGETS, H_TREES, H_WEIGHTS, HEADER, KIND_BINARY,
                                       KIND_SCORES)
from wgsentis.ops.registry import GPU_PIXEL, register


def _pixel(op: str):
    return register(op, 1 if op != "TreeEnsemble" else 5, domain=ML_DOMAIN, backend=GPU_PIXEL)


def tree_blocks(rec, trees: int, depth: int, steps: int, max_weights: int) -> list[tuple[int, int]] | None:
    """Blocks of trees a tree_scores.wgsl fragment walks and gathers within the device's loop limit, or None."""
    inner = loop_passes(depth, steps) + loop_passes(max_weights)
    per = trees
    while per > 0 and not rec.loops_fit(loop_passes(per, inner)):
        per //= 2
    if per == 0:
        return None
    return [(t, min(trees, t + per)) for t in range(0, trees, per)]


def _tree_build(rec, layer, X) -> Any:
    """Record a tree ensemble layer: the gathering draws, then the scores (and the labels)."""
    table = ml_trees_gpu.model_table(rec, layer)
    dims = ml_gpu.rows_of(X) if getattr(X, "dtype", None) == np.float32 else None
    if table is None or dims is None or dims[0] == 0:
        return NotImplemented
    h = table[:HEADER].astype(np.int64)
    codes = int(h[H_CODES])
    if not codes & ml_trees_gpu.F_EXACT or dims[1] < h[H_FEATURES]:
        return NotImplemented  # the numpy kernel runs (and names a missing feature)
    rows, features = dims
    kind, aggregate, post = codes & 15, codes >> 4 & 15, codes >> 8 & 15
    trees, depth, steps = int(h[H_TREES]), int(h[H_DEPTH]), int(h[H_STEPS])
    targets = int(h[H_TARGETS])
    columns = 2 if kind == KIND_BINARY else targets
    blocks = tree_blocks(rec, trees, depth, steps, int(h[H_MAX_WEIGHTS]))
    if blocks is None or not rec.loops_fit(4 * loop_passes(targets) + loop_passes(4)):
        return NotImplemented
    x = matrix_texture(rec, X, rows, features, f"{layer.name}:X")
    if x is None:
        return NotImplemented
    tab = rec.upload(table, f"{layer.name}.trees")
    sums, hits = x, tab  # the first block reads no previous sums: stand-ins of the right texel kinds
    for first, end in blocks:
        new_sums = rec.alloc((rows, targets), np.float32, -1)
        new_hits = rec.alloc((rows, targets), np.int32, -1)
        rec.draw("pixel/tree_scores.wgsl", [x, tab, sums, hits], [new_sums, new_hits],
                 [new_sums.layout.texels, targets, features, first, end, depth, steps, int(h[H_ROOTS]),
                  int(h[H_WEIGHTS]), new_sums.layout.shift, x.layout.shift, tab.layout.shift],
                 constants={"AGG": aggregate, "FIRST": int(first == 0)})
        sums, hits = new_sums, new_hits
    threshold = 0.5 if codes & ml_trees_gpu.F_ONE_ID and codes & ml_trees_gpu.F_POSITIVE else 0.0
    flags = ((1 if codes & ml_trees_gpu.F_ONE_ID else 0) | (2 if codes & ml_trees_gpu.F_POSITIVE else 0)
             | (4 if codes & ml_trees_gpu.F_AVERAGE else 0))
    common = [rows, targets, trees, int(h[H_BASE_COUNT]), int(h[H_BASE]), int(h[H_LABELS]), threshold, flags]
    outputs = [rec.alloc((rows, columns), np.float32, -1)]
    if kind != KIND_SCORES:
        outputs.insert(0, rec.alloc((rows,), np.int64, -1))
    for out in outputs:
        scores = out.dtype == np.float32
        rec.draw("pixel/tree_finish.wgsl", [sums, hits, tab], [out],
                 [*common, out.layout.texels, columns, out.layout.shift, sums.layout.shift, tab.layout.shift],
                 constants={"KIND": kind, "POST": post, "OUTPUT": 0 if scores else 1},
                 subs={"OUT": "f32" if scores else "i32"})
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


@_pixel("TreeEnsembleRegressor")
def tree_ensemble_regressor(rec, layer, X, **attrs):
    return _tree_build(rec, layer, X)


@_pixel("TreeEnsembleClassifier")
def tree_ensemble_classifier(rec, layer, X, **attrs):
    return _tree_build(rec, layer, X)


@_pixel("TreeEnsemble")
def tree_ensemble(rec, layer, X, **attrs):
    return _tree_build(rec, layer, X)
