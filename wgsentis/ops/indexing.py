"""Indexing operators (numpy kernels): the gathers (Gather, GatherElements, GatherND), the scatters (Scatter,
ScatterElements, ScatterND, TensorScatter), OneHot, and the selections whose output size follows the data
(NonZero, Compress, Unique).

The gathers' and scatters' indices are bounds-checked with ``tensor.check_indices`` before they are used (negative
ones count from the end): one outside its axis is an IndexOutOfRangeError naming the layer, never a clamp (OneHot's
out-of-range indices select nothing, as its spec says). Their GPU programs are indexing_gpu.py's and
indexing_pixel.py's.
"""

from __future__ import annotations

import math

import numpy as np

from wgsentis.ops.registry import register, register_flops
from wgsentis.ops.tensor import check_indices, normalized_axis

# -- helpers ----------------------------------------------------------------------------------------


def _index_grid(ctx, indices: np.ndarray, axis: int, axis_len: int) -> tuple:
    """Open index grids over ``indices.shape`` with ``indices`` (wrapped, bounds-checked) on ``axis``."""
    idx = np.asarray(indices).astype(np.int64, copy=False)
    check_indices(ctx, idx, axis_len)
    idx = np.where(idx < 0, idx + axis_len, idx)
    grid = list(np.indices(idx.shape, sparse=True))
    grid[axis] = idx
    return tuple(grid)


_SCATTER_UFUNC = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter_into(out: np.ndarray, index: tuple, updates: np.ndarray, reduction: str) -> np.ndarray:
    """Write ``updates`` at ``index`` (fancy index) into ``out``, combining with ``reduction``."""
    updates = np.asarray(updates, dtype=out.dtype)
    if reduction == "none":
        out[index] = updates
    elif reduction in _SCATTER_UFUNC:
        _SCATTER_UFUNC[reduction].at(out, index, updates)
    else:
        raise ValueError(f"unknown reduction '{reduction}'")
    return out


# -- gathers and scatters -------------------------------------------------------------------------


@register("Gather", 1)
def gather(ctx, data, indices, *, axis=0):
    axis = normalized_axis(axis, data.ndim)
    idx = np.asarray(indices).astype(np.int64, copy=False)
    check_indices(ctx, idx, data.shape[axis])
    return np.take(data, idx, axis=axis)


@register("GatherElements", 11)
def gather_elements(ctx, data, indices, *, axis=0):
    axis = normalized_axis(axis, data.ndim)
    if np.ndim(indices) != data.ndim:
        raise ValueError("GatherElements: indices must have the rank of data")
    return data[_index_grid(ctx, indices, axis, data.shape[axis])]


def _nd_index(ctx, data_shape: tuple[int, ...], indices: np.ndarray, batch_dims: int) -> tuple:
    """The fancy index selecting GatherND/ScatterND's slices: (batch, idx0, ..., idx_{k-1})."""
    idx = np.asarray(indices).astype(np.int64, copy=False)
    k = idx.shape[-1]
    if batch_dims + k > len(data_shape):
        raise ValueError(f"indices last dimension {k} too large for data rank {len(data_shape)}")
    parts = []
    b_shape = idx.shape[:batch_dims]
    middle = idx.ndim - 1 - batch_dims
    for b, n in enumerate(b_shape):  # batch coordinates broadcast over the index tuples
        parts.append(np.arange(n).reshape((1,) * b + (n,) + (1,) * (batch_dims - b - 1 + middle)))
    for j in range(k):
        dim = data_shape[batch_dims + j]
        comp = idx[..., j]
        check_indices(ctx, comp, dim)  # component by component, as the GPU's fault slots are ordered
        parts.append(np.where(comp < 0, comp + dim, comp))
    return tuple(parts)


@register("GatherND", 11)
def gather_nd_v11(ctx, data, indices):
    return data[_nd_index(ctx, data.shape, indices, 0)]


@register("GatherND", 12)
def gather_nd(ctx, data, indices, *, batch_dims=0):
    if data.shape[:batch_dims] != np.shape(indices)[:batch_dims]:
        raise ValueError("GatherND: batch dimensions of data and indices differ")
    return data[_nd_index(ctx, data.shape, indices, batch_dims)]


@register("ScatterElements", 11)
def scatter_elements_v11(ctx, data, indices, updates, *, axis=0):
    return scatter_elements(ctx, data, indices, updates, axis=axis)


@register("ScatterElements", 16)
def scatter_elements(ctx, data, indices, updates, *, axis=0, reduction="none"):
    axis = normalized_axis(axis, data.ndim)
    if np.shape(indices) != np.shape(updates):
        raise ValueError("ScatterElements: indices and updates must have the same shape")
    out = data.copy()
    return _scatter_into(out, _index_grid(ctx, indices, axis, data.shape[axis]), updates, reduction)


@register("Scatter", 9)
def scatter(ctx, data, indices, updates, *, axis=0):
    return scatter_elements(ctx, data, indices, updates, axis=axis)


@register("ScatterND", 11)
def scatter_nd_v11(ctx, data, indices, updates):
    return scatter_nd(ctx, data, indices, updates)


@register("ScatterND", 16)
def scatter_nd(ctx, data, indices, updates, *, reduction="none"):
    out = data.copy()
    return _scatter_into(out, _nd_index(ctx, data.shape, indices, 0), updates, reduction)


@register("TensorScatter", 24)
def tensor_scatter(ctx, past_cache, update, write_indices=None, *, axis=-2, mode="linear"):
    """KV-cache update: writes ``update`` into ``past_cache`` along ``axis`` at per-batch offsets."""
    axis = normalized_axis(axis, past_cache.ndim)
    if axis == 0:
        raise ValueError("TensorScatter: axis cannot be the batch axis 0")
    batch, max_len, seq_len = past_cache.shape[0], past_cache.shape[axis], update.shape[axis]
    if mode not in ("linear", "circular"):
        raise ValueError(f"TensorScatter: unknown mode '{mode}'")
    if seq_len > max_len:
        raise ValueError(f"TensorScatter: update's sequence length {seq_len} exceeds max_sequence_length {max_len}")
    starts = np.zeros(batch, np.int64) if write_indices is None else np.asarray(write_indices, np.int64).reshape(-1)
    if starts.shape != (batch,):
        raise ValueError(f"TensorScatter: write_indices must have shape ({batch},), got {np.shape(write_indices)}")
    if mode == "linear":  # each write index w needs w + sequence_length <= max_sequence_length
        check_indices(ctx, starts, max_len - seq_len + 1,
                      f"write_indices (update length {seq_len}, cache length {max_len})", negative_ok=False)
    else:  # any w >= 0 is valid: positions are taken modulo max_sequence_length; 0..max_len-1 are named
        check_indices(ctx, starts[starts < 0], max_len, "write_indices (circular mode)", negative_ok=False)
    out = past_cache.copy()
    for b in range(batch):
        positions = int(starts[b]) + np.arange(seq_len)
        if mode == "circular":
            positions %= max_len
        target = out[b]  # view: (D1, ..., max_len, ..., Dn)
        index = [slice(None)] * target.ndim
        index[axis - 1] = positions
        target[tuple(index)] = update[b]
    return out


@register("OneHot", 9)
def one_hot(ctx, indices, depth, values, *, axis=-1):
    depth = int(np.asarray(depth).reshape(-1)[0])
    values = np.asarray(values).reshape(-1)
    if values.size != 2:
        raise ValueError("OneHot: values must be [off_value, on_value]")
    idx = np.asarray(indices)
    idx = idx.astype(np.int64) if idx.dtype.kind in "iub" else np.trunc(idx).astype(np.int64)
    rank = idx.ndim + 1
    axis = normalized_axis(axis, rank)
    idx = np.where(idx < 0, idx + depth, idx)
    hot = np.arange(depth).reshape((depth,) + (1,) * (rank - 1 - axis))
    mask = np.expand_dims(idx, axis) == hot  # out-of-range indices match nothing: all off
    return np.where(mask, values[1], values[0]).astype(values.dtype)


# -- selection ------------------------------------------------------------------------------------


@register("NonZero", 9)
def non_zero(ctx, x):
    x = np.asarray(x)
    if x.ndim == 0:
        return np.zeros((0, int(bool(x))), dtype=np.int64)
    return np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


@register("Compress", 9)
def compress(ctx, x, condition, *, axis=None):
    cond = np.asarray(condition).reshape(-1).astype(bool)
    # A condition longer than the axis (or the flattened input) selects nothing beyond it, as in ORT.
    if axis is None:
        return np.compress(cond[:x.size], x.reshape(-1))
    axis = normalized_axis(axis, x.ndim)
    return np.compress(cond[:x.shape[axis]], x, axis=axis)


@register("Unique", 11)
def unique(ctx, x, *, axis=None, sorted=1):
    """Unique values (or slices along ``axis``): Y, first indices, inverse indices, counts."""
    if axis is not None:
        axis = normalized_axis(axis, x.ndim)
    src = x.reshape(-1) if axis is None else x
    if src.dtype == object:
        # np.unique with axis cannot sort object arrays; strings only ever come flattened here.
        values, first, inverse, counts = np.unique(src.astype(str), return_index=True,
                                                   return_inverse=True, return_counts=True)
        values = src[first]
    else:
        values, first, inverse, counts = np.unique(src, return_index=True, return_inverse=True,
                                                   return_counts=True, axis=axis)
    inverse = inverse.reshape(-1)
    if not sorted:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        values = np.take(values, order, axis=0 if axis is None else axis)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    outs = (values, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64))
    return outs[:ctx.num_outputs] if ctx.num_outputs > 1 else outs[0]


@register_flops("Gather", "GatherElements", "GatherND", "Scatter", "TensorScatter", "OneHot", "NonZero", "Compress")
def selection_flops(layer, in_shapes, out_shapes) -> int:
    """0: these ops only select or place data, they do no arithmetic."""
    return 0


@register_flops("ScatterElements", "ScatterND")
def scatter_flops(layer, in_shapes, out_shapes) -> int:
    """One add (or multiply/compare) per update element of a reducing scatter; 0 for a plain one."""
    if layer.attrs.get("reduction", "none") == "none":
        return 0
    shape = in_shapes[2] if len(in_shapes) > 2 else None
    return math.prod(shape) if shape is not None else 0
