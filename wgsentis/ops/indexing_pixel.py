"""gpu-pixel programs of the indexing family (indexing.py): Gather (``gather_along``, which ArrayFeatureExtractor
reuses), GatherElements, GatherND, Scatter, ScatterElements and ScatterND (a scatter in gather form: each output
element looks for the updates that name it, folding them in the CPU kernel's order for a reduction), and OneHot.

Indices computed on the device are bounds-checked where they are read (wgsl/common/faults.wgsl): an index outside
[-len, len) is never used, and the run raises IndexOutOfRangeError naming the layer, as the CPU does. Host-known
indices are checked on the host and the layer declines (the CPU kernel raises) when one is bad.
"""

from __future__ import annotations

import math

import numpy as np

from wgsentis.backends.gpu.tensors import GTensor, loop_passes
from wgsentis.backends.pixel_layout import MAX_RANK, texel_kind
from wgsentis.ops import tensor as _tensor
from wgsentis.ops.indexing_gpu import scatter_reduction
from wgsentis.ops.tensor_gpu import INT_TYPES, storage_bits
from wgsentis.ops.tensor_pixel import pixel, pixel_tensor


def _index_input(rec, indices, name: str) -> GTensor | None:
    if getattr(indices, "dtype", None) not in INT_TYPES:
        return None
    return pixel_tensor(rec, indices, name)


def _host_indices_ok(indices, length: int, negative_ok: bool = True) -> bool:
    host = indices.host if isinstance(indices, GTensor) else indices
    if host is None:
        return True
    host = np.asarray(host)
    return not host.size or (host.min() >= (-length if negative_ok else 0) and host.max() < length)


_NONE = MAX_RANK  # a coordinate word naming no entry (pixel/body/coords_from.wgsl leaves it 0)


def _moved(pairs: dict[int, int]) -> list[int]:
    """coords_from.wgsl's six words: frame entry j of the target takes the output's entry ``pairs[j]``."""
    return [pairs.get(j, _NONE) for j in range(MAX_RANK)]


def _frame_shape(shape) -> list[int]:
    """``shape`` in the 6-dim frame (leading dims 1)."""
    return [1] * (MAX_RANK - len(shape)) + [int(d) for d in shape]


def _check_only(rec, idx: GTensor, dims: list[int], tuples: bool, negative_ok: bool = True,
                what: str = "indices") -> None:
    """Bounds-check the indices ``idx`` without gathering (a draw whose target is thrown away): a gather whose
    output is empty still raises, as the CPU kernel does, on an index outside its axis. ``tuples``: the last
    axis of ``idx`` holds the components of index tuples (GatherND), component j checked against dims[j]."""
    slot = rec.check_indices(dims, what, negative_ok=negative_ok)
    rec.map([idx], idx.shape, np.int32, idx.layout.axis, "pixel/body/check_indices.wgsl",
            [slot, *(dims if tuples else dims[:1])], faults=True,
            helpers="pixel/body/check_helpers.wgsl", constants={"NEGATIVE_OK": negative_ok, "TUPLES": tuples})


@pixel("Gather", 1)
def gather(rec, layer, data, indices, *, axis=0, **attrs):
    return gather_along(rec, layer, data, indices, axis)


def gather_along(rec, layer, data, indices, axis: int, negative_ok: bool = True, what: str = "indices"):
    """Gather's program: ``data``'s slices along ``axis`` at ``indices``, bounds-checked where they are read
    (``negative_ok`` false: negative indices are out of range too, for ArrayFeatureExtractor; ``what`` names the
    input in the error)."""
    x = pixel_tensor(rec, data, f"{layer.name}:data")
    idx = _index_input(rec, indices, f"{layer.name}:{what}")
    if x is None or idx is None:
        return NotImplemented
    rank = len(x.shape)
    axis = _tensor.normalized_axis(axis, rank)
    dim = x.shape[axis]
    if not _host_indices_ok(indices, dim, negative_ok):
        return NotImplemented
    q = len(idx.shape)
    out_shape = [*x.shape[:axis], *idx.shape, *x.shape[axis + 1:]]
    if len(out_shape) > MAX_RANK:
        return NotImplemented
    if idx.size and not math.prod(out_shape):
        # no fragment of the gather would read (and check) the indices
        _check_only(rec, idx, [dim], False, negative_ok, what)
        return rec.alloc(out_shape, x.dtype)
    lo, ld, li = MAX_RANK - len(out_shape), MAX_RANK - rank, MAX_RANK - q
    slot = rec.check_indices([dim], what, negative_ok=negative_ok) if math.prod(out_shape) else 0
    # words: the fault slot, the axis length, the axis in data's frame, data's and the indices' coordinates
    data_from = {ld + j: lo + j for j in range(axis)} | {ld + j: lo + q + j - 1 for j in range(axis + 1, rank)}
    index_from = {li + j: lo + axis + j for j in range(q)}
    words = [slot, dim, ld + axis, *_moved(data_from), *_moved(index_from)]
    out_axis = (x.layout.axis if x.layout.axis < axis else x.layout.axis + q - 1) if x.layout.axis != axis else -1
    return rec.map([x, idx], out_shape, x.dtype, out_axis if out_shape else 0, "pixel/body/gather.wgsl", words,
                   helpers="pixel/body/gather_helpers.wgsl", faults=True, constants={"NEGATIVE_OK": negative_ok})


_FOLD = "pixel/body/scatter_fold.wgsl"  # scatter_step: a plain store, or a fold (override REDUCTION)


def _scatter_fold(layer, data, reduction: str) -> int | None:
    """pixel/body/scatter_fold.wgsl's REDUCTION for a scatter's fold of update ``v`` into ``acc``: 0 a plain store
    without reduction, else 1 + common/scatter_fold.wgsl's code (numpy's NaN rules for max and min, subnormals
    kept through the flushing fragment shader's arithmetic with common/subnormal.wgsl); None for an unknown
    reduction. Declined for data the GPU cannot fold exactly (``indexing_gpu.scatter_reduction``)."""
    if reduction == "none":
        return 0
    how = scatter_reduction(layer, data, reduction)
    return None if how is None else how + 1


def _elements(rec, layer, data, indices, updates, axis, reduction: str = "none"):
    """GatherElements (updates None) or ScatterElements, in gather form: an output element of a scatter looks
    along the axis for the last index that names it (and folds every such update for a reduction)."""
    x = pixel_tensor(rec, data, f"{layer.name}:data")
    idx = _index_input(rec, indices, f"{layer.name}:indices")
    if x is None or idx is None or len(idx.shape) != len(x.shape) or not 0 < len(x.shape) <= MAX_RANK:
        return NotImplemented
    rank = len(x.shape)
    axis = _tensor.normalized_axis(axis, rank)
    dim = x.shape[axis]
    if not _host_indices_ok(indices, dim):
        return NotImplemented
    frame = MAX_RANK - rank + axis
    kind = x.layout.kind
    if updates is None:
        slot = rec.check_indices([dim]) if idx.size else 0
        return rec.map([x, idx], idx.shape, x.dtype, idx.layout.axis, "pixel/body/gather_elements.wgsl",
                       [slot, dim, frame], faults=True)
    u = pixel_tensor(rec, updates, f"{layer.name}:updates")
    if u is None or u.shape != idx.shape or u.dtype != x.dtype:
        return NotImplemented
    if any(idx.shape[j] > x.shape[j] for j in range(rank) if j != axis) or (idx.size and not x.size):
        return NotImplemented  # an index no output element would scan (and check)
    fold = _scatter_fold(layer, data, reduction)
    if fold is None:
        return NotImplemented  # the CPU kernel names the unknown reduction
    walk = idx.shape[axis]
    per = walk
    while per > 1 and not rec.loops_fit(loop_passes(per) * 16):
        per = (per + 1) // 2
    slot = rec.check_indices([dim]) if idx.size else 0
    # pe: 0 the fault slot, 1 the axis length, 2 and 3 the walk's first and end position along the axis (a walk
    # past the loop limit is split into draws, each going on from the previous one's output), 4 the axis in the
    # frame, 5.. the indices' shape in the frame
    y = x
    for first in range(0, max(walk, 1), max(per, 1)):
        y = rec.map([y, idx, u], x.shape, x.dtype, x.layout.axis, "pixel/body/scatter_elements.wgsl",
                    [slot, dim, first, min(walk, first + per), frame, *_frame_shape(idx.shape)], helpers=_FOLD,
                    faults=True, subs={"T": kind}, constants={"REDUCTION": fold})
    return y


@pixel("GatherElements", 11)
def gather_elements(rec, layer, data, indices, *, axis=0, **attrs):
    return _elements(rec, layer, data, indices, None, axis)


@pixel("Scatter", 9)
def scatter(rec, layer, data, indices, updates, *, axis=0, **attrs):
    return _elements(rec, layer, data, indices, updates, axis)


@pixel("ScatterElements", 11)
def scatter_elements(rec, layer, data, indices, updates, *, axis=0, reduction="none", **attrs):
    return _elements(rec, layer, data, indices, updates, axis, reduction)


def _nd(rec, layer, data, indices, updates, batch_dims, reduction: str = "none"):
    """GatherND (updates None) or ScatterND in gather form: an output element of a scatter walks the update
    rows for the last whose index tuple names it (folding every such row for a reduction)."""
    x = pixel_tensor(rec, data, f"{layer.name}:data")
    idx = _index_input(rec, indices, f"{layer.name}:indices")
    if x is None or idx is None or not idx.shape:
        return NotImplemented
    k = idx.shape[-1]
    b = int(batch_dims)
    rank, q = len(x.shape), len(idx.shape)
    if b + k > rank or tuple(x.shape[:b]) != tuple(idx.shape[:b]) or rank > MAX_RANK:
        return NotImplemented
    for j in range(k):
        host = indices.host if isinstance(indices, GTensor) else indices
        if host is not None and not _host_indices_ok(np.asarray(host)[..., j], x.shape[b + j]):
            return NotImplemented
    dims = list(x.shape[b:b + k])
    kind = x.layout.kind
    ld, li = MAX_RANK - rank, MAX_RANK - q
    if updates is None:
        out_shape = [*idx.shape[:-1], *x.shape[b + k:]]
        if len(out_shape) > MAX_RANK:
            return NotImplemented
        if idx.size and not math.prod(out_shape):
            if k:
                _check_only(rec, idx, dims, True)  # empty slices: no fragment of the gather would check them
            return rec.alloc(out_shape, x.dtype)
        lo = MAX_RANK - len(out_shape)
        slot = rec.check_indices(dims) if math.prod(out_shape) else 0
        # words: the fault slot, the indices' and data's coordinates, the tuple's length, where its components
        # go in data's frame, and their bounds
        index_from = {li + j: lo + j for j in range(q - 1)}
        data_from = {ld + j: lo + j for j in range(b)} | {ld + b + k + j: lo + q - 1 + j for j in range(rank - b - k)}
        words = [slot, *_moved(index_from), *_moved(data_from), k, ld + b, *dims]
        return rec.map([x, idx], out_shape, x.dtype, -1 if out_shape else 0, "pixel/body/gather_nd.wgsl", words,
                       helpers="pixel/body/coords_from.wgsl", faults=True, subs={"T": kind})
    u = pixel_tensor(rec, updates, f"{layer.name}:updates")
    if u is None or b or u.dtype != x.dtype or tuple(u.shape) != (*idx.shape[:-1], *x.shape[k:]):
        return NotImplemented
    fold = _scatter_fold(layer, data, reduction)
    rows = math.prod(idx.shape[:-1])
    if fold is None or len(u.shape) > MAX_RANK or (idx.size and not x.size):
        return NotImplemented
    if not rec.loops_fit(loop_passes(rows, k) * 16):
        return NotImplemented
    slot = rec.check_indices(dims) if idx.size else 0
    # Update row `row` of the (rows, k) index matrix: its coordinates in the indices' and updates' frames. Words:
    # the fault slot, the row count, the tuple's length, the row dims' count, where they begin in the indices' and
    # the updates' frames, where the tuple's components begin in data's, the updates' trailing dims' count, the
    # row dims, then the components' bounds (from word 14)
    lu = MAX_RANK - len(u.shape)
    row_dims = [int(d) for d in idx.shape[:-1]]
    words = [slot, rows, k, q - 1, li, lu, ld, rank - k, *row_dims, *[1] * (MAX_RANK - len(row_dims)), *dims]
    return rec.map([x, idx, u], x.shape, x.dtype, x.layout.axis, "pixel/body/scatter_nd.wgsl", words,
                   helpers=_FOLD, faults=True, subs={"T": kind}, constants={"REDUCTION": fold})


@pixel("GatherND", 11)
def gather_nd(rec, layer, data, indices, *, batch_dims=0, **attrs):
    return _nd(rec, layer, data, indices, None, batch_dims)


@pixel("ScatterND", 11)
def scatter_nd(rec, layer, data, indices, updates, *, reduction="none", **attrs):
    return _nd(rec, layer, data, indices, updates, 0, reduction)


@pixel("OneHot", 9, host_inputs=(1, 2))
def one_hot(rec, layer, indices, depth, values, *, axis=-1, **attrs):
    idx = pixel_tensor(rec, indices, f"{layer.name}:indices")
    values = np.asarray(values).reshape(-1)
    if idx is None or values.size != 2 or texel_kind(values.dtype) is None or idx.dtype == np.bool_:
        return NotImplemented
    if idx.layout.kind != "i32" and idx.dtype != np.float32:
        return NotImplemented
    depth = int(np.asarray(depth).reshape(-1)[0])
    if depth < 0:
        return NotImplemented
    rank = len(idx.shape) + 1
    if rank > MAX_RANK:
        return NotImplemented
    axis = _tensor.normalized_axis(axis, rank)
    out_shape = [*idx.shape[:axis], depth, *idx.shape[axis:]]
    kind = texel_kind(values.dtype)
    lo, li = MAX_RANK - rank, MAX_RANK - len(idx.shape)
    index_from = {li + j: lo + j for j in range(axis)} | {li + j: lo + j + 1 for j in range(axis, len(idx.shape))}
    words = [storage_bits(values[0], values.dtype), storage_bits(values[1], values.dtype), depth, lo + axis,
             *_moved(index_from)]
    return rec.map([idx], out_shape, values.dtype, -1, "pixel/body/one_hot.wgsl", words,
                   helpers="pixel/body/coords_from.wgsl", subs={"T": kind})
