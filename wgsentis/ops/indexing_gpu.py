"""gpu-compute programs of the indexing family (indexing.py): Gather (``gather_along``, which ArrayFeatureExtractor
reuses), GatherElements, GatherND, Scatter, ScatterElements and ScatterND (with and without a reduction, folded
in the CPU kernel's order), and OneHot.

Indices computed on the device are bounds-checked where they are read (wgsl/common/faults.wgsl): an index outside
its axis is never used, and the run raises IndexOutOfRangeError naming the layer, as the CPU does. Host-known
indices are checked on the host, and the layer declines (the CPU kernel raises) when one is bad.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from wgsentis.backends.gpu.shader_gen import snippet
from wgsentis.backends.gpu.tensors import Declined, GTensor, fits_binding, loop_passes, window_grain
from wgsentis.ops import tensor as _tensor
from wgsentis.ops.tensor_gpu import (
    INT_TYPES,
    MAX_RANK,
    STORAGE,
    device_tensor,
    dispatch_copy,
    gpu,
    is_device_tensor,
    pad6,
    row_strides,
    storage_bits,
)


def _host_indices_ok(indices, length: int, negative_ok: bool = True) -> bool:
    """Host-known indices in [-length, length), or [0, length) without ``negative_ok`` (else the CPU kernel
    raises its IndexOutOfRangeError). Device-only indices are checked by the kernels themselves
    (wgsl/common/faults.wgsl)."""
    host = indices.host if is_device_tensor(indices) else indices
    if host is None:
        return True
    host = np.asarray(host)
    return not host.size or (host.min() >= (-length if negative_ok else 0) and host.max() < length)


def _index_tensor(rec, indices, name):
    if getattr(indices, "dtype", None) not in INT_TYPES:
        return None
    return device_tensor(rec, indices, name)


@gpu("Gather", 1)
def gather(rec, layer, data, indices, *, axis=0, **attrs):
    return gather_along(rec, layer, data, indices, axis)


def gather_along(rec, layer, data, indices, axis: int, negative_ok: bool = True, what: str = "indices"):
    """Gather's program: ``data``'s slices along ``axis`` at ``indices``, bounds-checked on the device where they
    are computed there (``negative_ok`` false: negative indices are out of range too, for ArrayFeatureExtractor;
    ``what`` names the input in the error)."""
    x = device_tensor(rec, data, f"{layer.name}:data")
    idx = _index_tensor(rec, indices, f"{layer.name}:{what}")
    shape = tuple(getattr(data, "shape", ()))
    axis = _tensor.normalized_axis(axis, len(shape))
    blocks = _table_blocks(rec, data, x, f"{layer.name}:data") if axis == 0 else None
    # (Empty data, such as the rows an NMS selected when it selected none, has no buffer: none is read.)
    if idx is None or (x is None and not blocks and (getattr(data, "size", None) != 0
                                                     or data.dtype not in STORAGE)):
        return NotImplemented
    length = shape[axis]
    if not _host_indices_ok(indices, length, negative_ok):
        return NotImplemented
    out_shape = [*shape[:axis], *idx.shape, *shape[axis + 1:]]
    y = rec.alloc(out_shape, data.dtype)
    check = "checked_index" if negative_ok else "checked_nonneg"
    if idx.size and not y.size:
        # no invocation of the gather would read (and check) the indices
        check_only(rec, idx, [length], negative_ok, what)
    elif y.size:
        inner = math.prod(shape[axis + 1:])
        slot = rec.check_indices([length], what, negative_ok=negative_ok)
        for first, rows, part in blocks or [(0, length, x)]:
            rec.dispatch("compute/gather.wgsl", [part, idx], [y], [y.size, inner, idx.size, length, slot, first, rows],
                         y.size, workgroup=256, subs={"T": y.gpu_type, "CHECK": check}, faults=True)
    return y


def _table_blocks(rec, data, x, name: str) -> list[tuple[int, int, Any]] | None:
    """A table gathered along its first axis that passes the binding limit, as (first row, rows, tensor) blocks
    that each fit one: a constant's row blocks (ConstantStore splits those), or windows of a device tensor (row
    blocks whose starts a binding may take); None when it fits (or cannot be split so)."""
    if x is None and isinstance(data, np.ndarray) and data.dtype in STORAGE and data.size:
        data = rec.upload(data, name)  # a constant: uploaded once, in row blocks when past the limit
    chunks = getattr(data, "chunks", None)
    if x is None and chunks:
        return [(start, rows, GTensor(alloc, (rows, *data.shape[1:]), data.dtype, data.name))
                for start, rows, alloc in chunks]
    if x is None or fits_binding(x, rec.ctx.max_binding) or not x.shape:
        return None
    inner = math.prod(x.shape[1:])
    grain = window_grain(rec.window_align, inner)
    per = (rec.ctx.max_binding // (4 * max(inner, 1))) // grain * grain
    if per == 0:
        return None
    rows = [(start, min(per, x.shape[0] - start)) for start in range(0, x.shape[0], per)]
    return [(start, count, rec.window(x, start * inner, (count, *x.shape[1:]))) for start, count in rows]


def check_only(rec, idx, dims: list[int], negative_ok: bool = True, what: str = "indices") -> None:
    """Bounds-check the index tuples ``idx`` (last axis: ``len(dims)`` components) without gathering: a gather
    whose output is empty still raises, as the CPU kernel does, on an index outside its axis."""
    params = [idx.size, len(dims), *pad6(dims), rec.check_indices(dims, what, negative_ok=negative_ok)]
    rec.dispatch("compute/check_indices.wgsl", [idx], [], params, idx.size, workgroup=256, faults=True,
                 subs={"CHECK": "checked_index" if negative_ok else "checked_nonneg"})


def _role(role: str) -> str:
    """gather_elements.wgsl's and gather_nd.wgsl's ROLE: how a gather or a scatter reads its indices and stores
    (compute/kind/index_<role>.wgsl)."""
    return snippet(f"compute/kind/index_{role}.wgsl")


def _elements(rec, layer, data, indices, updates, axis):
    """GatherElements (updates None) or ScatterElements without reduction."""
    x = device_tensor(rec, data, f"{layer.name}:data")
    idx = _index_tensor(rec, indices, f"{layer.name}:indices")
    if x is None or idx is None or len(idx.shape) != len(x.shape) or not 0 < len(x.shape) <= MAX_RANK:
        return NotImplemented
    axis = _tensor.normalized_axis(axis, len(x.shape))
    length = x.shape[axis]
    if not _host_indices_ok(indices, length):
        return NotImplemented
    params = [idx.size, len(x.shape), axis, length, *pad6(idx.shape), *pad6(row_strides(x.shape), 0)]
    if updates is None:
        y = rec.alloc(idx.shape, x.dtype)
        params.append(rec.check_indices([length]))
        rec.dispatch("compute/gather_elements.wgsl", [x, idx], [y], params, y.size, workgroup=256,
                     subs={"TA": x.gpu_type, "TB": "i32", "T": y.gpu_type, "ROLE": _role("gather")}, faults=True)
        return y
    u = device_tensor(rec, updates, f"{layer.name}:updates")
    if u is None or u.shape != idx.shape or u.dtype != x.dtype:
        return NotImplemented
    y = _copy_all(rec, x)
    params.append(rec.check_indices([length]))
    rec.dispatch("compute/gather_elements.wgsl", [idx, u], [y], params, idx.size, workgroup=256,
                 subs={"TA": "i32", "TB": u.gpu_type, "T": y.gpu_type, "ROLE": _role("scatter")}, faults=True)
    return y


def _copy_all(rec, x):
    """A contiguous copy of x (the starting point of scatters)."""
    y = rec.alloc(x.shape, x.dtype)
    if y.size:
        dispatch_copy(rec, x, y, [(y.size, 1, 1, 0)])
    return y


@gpu("GatherElements", 11)
def gather_elements(rec, layer, data, indices, *, axis=0, **attrs):
    return _elements(rec, layer, data, indices, None, axis)


@gpu("Scatter", 9)
def scatter(rec, layer, data, indices, updates, *, axis=0, **attrs):
    return _elements(rec, layer, data, indices, updates, axis)


@gpu("ScatterElements", 11)
def scatter_elements(rec, layer, data, indices, updates, *, axis=0, reduction="none", **attrs):
    if reduction != "none":
        return _scatter_reduce(rec, layer, data, indices, updates, axis, reduction)
    return _elements(rec, layer, data, indices, updates, axis)


SCATTER_REDUCTIONS = {"add": 0, "mul": 1, "max": 2, "min": 3}  # common/scatter_fold.wgsl's ``how``


def scatter_reduction(layer, data, reduction: str) -> int | None:
    """common/scatter_fold.wgsl's code of a scatter ``reduction`` both GPU backends compute as the cpu does, None
    for an unknown one (the CPU kernel names it); raises Declined, with the reason, for data they cannot fold
    exactly: types other than float32, int32 and int64, and int64 add and mul (held in 32 bits on the device,
    their results could leave the int32 range)."""
    how = SCATTER_REDUCTIONS.get(str(reduction))
    if how is None:
        return None
    dtype = np.dtype(getattr(data, "dtype", np.float32))
    if dtype not in (np.float32, np.int32, np.int64):
        raise Declined(f"{layer.op_type} reduction '{reduction}' of {dtype.name} data '{layer.inputs[0]}': the "
                       "GPU folds float32, int32 and int64")
    if dtype == np.int64 and how < 2:
        raise Declined(f"int64 {layer.op_type} reduction '{reduction}' of '{layer.inputs[0]}': the GPU holds int64 "
                       "in 32-bit words and the result can pass the int32 range; the host computes it exactly")
    return how


def _scatter_operands(rec, layer, data, indices, updates, reduction: str) -> tuple[int, Any, Any, Any] | None:
    """(the fold's code, data, indices, updates) on the device for a scatter with ``reduction``; None where the
    program cannot take them (the CPU kernel names an unknown reduction, missing operands or mismatched types)."""
    how = scatter_reduction(layer, data, reduction)
    if how is None:
        return None
    x = device_tensor(rec, data, f"{layer.name}:data")
    idx = _index_tensor(rec, indices, f"{layer.name}:indices")
    u = device_tensor(rec, updates, f"{layer.name}:updates")
    if x is None or idx is None or u is None or u.dtype != x.dtype:
        return None
    return how, x, idx, u


def _scatter_reduce(rec, layer, data, indices, updates, axis, reduction: str):
    """ScatterElements with a reduction: compute/scatter_elements_reduce.wgsl over a copy of the data, one
    invocation per column of the updates folding them in update order (the cpu's ufunc.at order, so float sums
    agree bit for bit), a column past the loop limit split into dispatches. int64 add and mul stay on the host:
    the device holds int64 in 32 bits and the result could leave that range."""
    operands = _scatter_operands(rec, layer, data, indices, updates, reduction)
    if operands is None or operands[3].shape != operands[2].shape:
        return NotImplemented
    how, x, idx, u = operands
    rank = len(x.shape)
    if len(idx.shape) != rank or not 0 < rank <= MAX_RANK:
        return NotImplemented
    axis = _tensor.normalized_axis(axis, rank)
    length = x.shape[axis]
    if not _host_indices_ok(indices, length):
        return NotImplemented
    if any(idx.shape[j] > x.shape[j] for j in range(rank) if j != axis) or (idx.size and not x.size):
        return NotImplemented  # an update off the data (or into none): the CPU kernel raises
    if not all(fits_binding(t, rec.ctx.max_binding) for t in (x, idx, u)):
        raise Declined(f"ScatterElements reduction of '{layer.inputs[0]}': a tensor past the binding limit")
    y = _copy_all(rec, x)
    walk = idx.shape[axis]
    columns = idx.size // walk if walk else 0
    if not columns:
        return y
    per = walk
    while per > 1 and not rec.loops_fit(loop_passes(per)):
        per = (per + 1) // 2
    params = [columns, rank, axis, length, *pad6(idx.shape), *pad6(row_strides(idx.shape), 0),
              *pad6(row_strides(x.shape), 0), rec.check_indices([length])]
    for first in range(0, walk, per):
        end = min(walk, first + per)
        rec.dispatch("compute/scatter_elements_reduce.wgsl", [idx, u], [y], [*params, first, end], columns,
                     workgroup=64, constants={"HOW": how}, subs={"T": y.gpu_type}, faults=True,
                     loops=loop_passes(end - first))
    return y


def _nd(rec, layer, data, indices, updates, batch_dims):
    """GatherND (updates None) or ScatterND without reduction."""
    x = device_tensor(rec, data, f"{layer.name}:data")
    idx = _index_tensor(rec, indices, f"{layer.name}:indices")
    if x is None or idx is None or len(idx.shape) < 1:
        return NotImplemented
    k = idx.shape[-1]
    b = int(batch_dims)
    if b + k > len(x.shape) or k > MAX_RANK or tuple(x.shape[:b]) != tuple(idx.shape[:b]):
        return NotImplemented
    host = indices.host if is_device_tensor(indices) else indices
    if host is not None:
        host = np.asarray(host)
        for j in range(k):
            comp, dim = host[..., j], x.shape[b + j]
            if comp.size and (comp.min() < -dim or comp.max() >= dim):
                return NotImplemented
    st = row_strides(x.shape)
    s = math.prod(x.shape[b + k:])
    m = math.prod(idx.shape[b:-1])
    batch_stride = math.prod(x.shape[b:])
    dims = list(x.shape[b:b + k])
    tail = [0] * (MAX_RANK - k)
    if idx.size and not s and updates is not None:
        return NotImplemented  # empty slices: no invocation would read (and check) the indices
    params = [0, s, max(m, 1), batch_stride, k, *dims, *tail, *st[b:b + k], *tail]
    if updates is None:
        y = rec.alloc([*idx.shape[:-1], *x.shape[b + k:]], x.dtype)
        if not y.size:
            if idx.size and k:
                check_only(rec, idx, dims)  # empty slices: no invocation of the gather would check the indices
            return y
        params[0] = y.size
        params.append(rec.check_indices(dims))  # one slot per tuple component, in order
        # Data past the binding limit: one dispatch per block of it (a window), each writing the outputs whose
        # element lies in its block (params 18, 19: the block's first and end element).
        for first, count in rec.element_blocks(x.size, [x]):
            whole = count == x.size
            rec.dispatch("compute/gather_nd.wgsl", [x if whole else rec.window(x, first, (count,)), idx], [y],
                         [*params, first, first + count], y.size, workgroup=256,
                         subs={"TA": x.gpu_type, "TB": "i32", "T": y.gpu_type, "ROLE": _role("gather")},
                         constants={"WINDOWED": int(not whole)}, faults=True)
        return y
    u = device_tensor(rec, updates, f"{layer.name}:updates")
    if u is None or b or u.dtype != x.dtype or tuple(u.shape) != (*idx.shape[:-1], *x.shape[k:]):
        return NotImplemented
    if fits_binding(x, rec.ctx.max_binding):
        y = _copy_all(rec, x)
    else:  # (a transfer copy is not bound)
        y = rec.alloc(x.shape, x.dtype)
        rec.copy(x, 0, y, 0, x.size)
    params[0] = u.size
    params.append(rec.check_indices(dims))
    # Data past the binding limit (a key/value cache): one dispatch per block of the output, each writing the
    # updates whose element lies in its block.
    for first, count in rec.element_blocks(y.size, [y]):
        whole = count == y.size
        rec.dispatch("compute/gather_nd.wgsl", [idx, u], [y if whole else rec.window(y, first, (count,))],
                     [*params, first, first + count], u.size, workgroup=256,
                     subs={"TA": "i32", "TB": u.gpu_type, "T": y.gpu_type, "ROLE": _role("scatter")},
                     constants={"WINDOWED": int(not whole)}, faults=True)
    return y


@gpu("GatherND", 11)
def gather_nd(rec, layer, data, indices, *, batch_dims=0, **attrs):
    return _nd(rec, layer, data, indices, None, batch_dims)


@gpu("ScatterND", 11)
def scatter_nd(rec, layer, data, indices, updates, *, reduction="none", **attrs):
    if reduction != "none":
        return _scatter_nd_reduce(rec, layer, data, indices, updates, reduction)
    return _nd(rec, layer, data, indices, updates, 0)


def _scatter_nd_reduce(rec, layer, data, indices, updates, reduction: str):
    """ScatterND with a reduction: compute/scatter_nd_reduce.wgsl over a copy of the data, one invocation per
    slice element folding the update rows in order (the cpu's ufunc.at order), rows past the loop limit split
    into dispatches; int64 add and mul stay on the host (``scatter_reduction``)."""
    operands = _scatter_operands(rec, layer, data, indices, updates, reduction)
    if operands is None or len(operands[2].shape) < 1:
        return NotImplemented
    how, x, idx, u = operands
    k = idx.shape[-1]
    if k > min(len(x.shape), MAX_RANK) or tuple(u.shape) != (*idx.shape[:-1], *x.shape[k:]):
        return NotImplemented  # the CPU kernel names the bad shapes
    host = indices.host if is_device_tensor(indices) else indices
    if host is not None:
        host = np.asarray(host)
        for j in range(k):
            if not _host_indices_ok(host[..., j], x.shape[j]):
                return NotImplemented
    if not all(fits_binding(t, rec.ctx.max_binding) for t in (x, idx, u)):
        raise Declined(f"ScatterND reduction of '{layer.inputs[0]}': a tensor past the binding limit")
    slice_size = math.prod(x.shape[k:])
    rows = math.prod(idx.shape[:-1])
    if idx.size and not slice_size:
        return NotImplemented  # empty slices: no invocation would read (and check) the indices
    y = _copy_all(rec, x)
    if not rows or not slice_size:
        return y
    per = rows
    while per > 1 and not rec.loops_fit(loop_passes(per, k)):
        per = (per + 1) // 2
    dims = list(x.shape[:k])
    params = [slice_size, k, *pad6(dims), *pad6(row_strides(x.shape)[:k], 0), rec.check_indices(dims)]
    for first in range(0, rows, per):
        end = min(rows, first + per)
        rec.dispatch("compute/scatter_nd_reduce.wgsl", [idx, u], [y], [*params, first, end], slice_size,
                     workgroup=64, constants={"HOW": how}, subs={"T": y.gpu_type}, faults=True,
                     loops=loop_passes(end - first, k))
    return y


@gpu("OneHot", 9, host_inputs=(1, 2))
def one_hot(rec, layer, indices, depth, values, *, axis=-1, **attrs):
    idx = device_tensor(rec, indices, f"{layer.name}:indices")
    values = np.asarray(values).reshape(-1)
    if idx is None or values.size != 2 or values.dtype not in STORAGE or idx.dtype == np.bool_:
        return NotImplemented
    depth = int(np.asarray(depth).reshape(-1)[0])
    if depth < 0:
        return NotImplemented
    rank = len(idx.shape) + 1
    axis = _tensor.normalized_axis(axis, rank)
    out_shape = [*idx.shape[:axis], depth, *idx.shape[axis:]]
    try:
        off, on = storage_bits(values[0], values.dtype), storage_bits(values[1], values.dtype)
    except OverflowError:
        return NotImplemented
    y = rec.alloc(out_shape, values.dtype)
    inner = math.prod(idx.shape[axis:])
    rec.dispatch("compute/one_hot.wgsl", [idx], [y], [y.size, max(depth, 1), max(inner, 1), off, on], y.size,
                 workgroup=256, subs={"TI": idx.gpu_type, "T": y.gpu_type})
    return y
