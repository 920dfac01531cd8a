"""gpu-compute programs of the tensor family: views (Identity, Reshape, Flatten, Squeeze, Unsqueeze),
copies through one generic strided kernel (Transpose, Concat, Split, Slice, Expand, Tile, DepthToSpace,
SpaceToDepth), Pad, gathers and scatters, generators (ConstantOfShape, EyeLike, Range, OneHot, Trilu)
and CumSum. Its public helpers (device tensors, strided copies, fills) also serve the cast, image and
dropout families' programs (cast_gpu.py, image_gpu.py, dropout_gpu.py).

Semantics mirror the numpy kernels in tensor.py; where a value must be checked or computed on the host
(shapes, axes, pads) the planner hands it over as a host array, and anything the GPU cannot reproduce
exactly returns ``NotImplemented`` so the layer falls back to the CPU kernel.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from wgsentis.backends.gpu.tensors import Declined, GTensor, fits_binding, loop_passes, window_grain
from wgsentis.dtypes import ONNX_TO_NUMPY
from wgsentis.ops import tensor as _tensor
from wgsentis.ops.elementwise_gpu import refusing
from wgsentis.ops.reduce_gpu import norm_axis
from wgsentis.ops.registry import GPU_COMPUTE, register

MAX_RANK = 6
_I32_MIN, _I32_MAX = -(2**31), 2**31 - 1
# dtype -> WGSL storage type (int64 is stored as int32 values)
STORAGE = {np.dtype(np.float32): "f32", np.dtype(np.int32): "i32", np.dtype(np.int64): "i32",
           np.dtype(np.bool_): "u32"}
_INTS = (np.dtype(np.int32), np.dtype(np.int64))


# -- helpers ------------------------------------------------------------------------------------
def gpu(op: str, since: int = 1, host_inputs: tuple[int, ...] = ()):
    """``register(op, since, backend="gpu-compute")`` of a tensor-family builder, made ``refusing``: it
    answers NotImplemented where the CPU kernel would raise (bad axes, shapes, sizes), so the layer falls
    back and the CPU kernel reports its own error."""

    def wrap(fn):
        build = refusing(fn)
        register(op, since, backend=GPU_COMPUTE, host_inputs=host_inputs)(build)
        return build

    return wrap


def _is_gpu(t: Any) -> bool:
    return hasattr(t, "alloc") and hasattr(t, "gpu_type")


def device_tensor(rec, t: Any, name: str = ""):
    """``t`` as a bindable device tensor (host arrays are uploaded once), or None when it cannot be
    one (a dtype the GPU lacks, a tensor split into chunks above the binding limit)."""
    if _is_gpu(t):
        return t if t.alloc is not None else None
    if isinstance(t, np.ndarray) and t.dtype in STORAGE:
        g = rec.upload(t, name)
        return g if g.alloc is not None else None
    return None


def row_strides(shape) -> list[int]:
    """Row-major element strides of ``shape``."""
    out, acc = [0] * len(shape), 1
    for a in range(len(shape) - 1, -1, -1):
        out[a] = acc
        acc *= int(shape[a])
    return out


def pad6(values, fill: int = 1) -> list[int]:
    """``values`` as ints, padded with ``fill`` to the kernels' MAX_RANK entries."""
    return [int(v) for v in values] + [fill] * (MAX_RANK - len(values))


def storage_bits(value, dtype) -> int:
    """The 32-bit storage pattern of one ``value`` of logical ``dtype``."""
    dtype = np.dtype(dtype)
    if dtype == np.float32:
        return int(np.asarray(value, np.float32).reshape(()).view(np.uint32))
    if dtype == np.bool_:
        return int(bool(np.asarray(value).reshape(())))
    v = int(np.asarray(value).reshape(()))
    if not _I32_MIN <= v <= _I32_MAX:
        raise OverflowError(v)
    return v & 0xFFFFFFFF


def _coalesce(dims, ins, outs, mods) -> list[tuple[int, int, int, int]]:
    """Drop size-1 axes and merge neighbours that stay linear in both input and output (fewer
    div/mods per element, and high ranks that collapse fit the kernel's six axes)."""
    merged: list[tuple[int, int, int, int]] = []
    for d, i, o, m in zip(dims, ins, outs, mods, strict=True):
        if d == 1:
            continue
        m = m if m and m < d else 0
        if merged:
            pd, pin, pout, pm = merged[-1]
            if pm == 0 and m == 0 and pin == i * d and pout == o * d:
                merged[-1] = (pd * d, i, o, 0)
                continue
        merged.append((int(d), int(i), int(o), int(m)))
    return merged or [(1, 0, 0, 0)]


def _copy_axes(shape, in_strides, out_strides, mods=None):
    """The coalesced axes of a strided copy, or None past the kernel's rank."""
    axes = _coalesce(shape, in_strides, out_strides, mods or [0] * len(shape))
    return axes if len(axes) <= MAX_RANK else None


def dispatch_copy(rec, x, y, axes, in_base: int = 0, out_base: int = 0) -> None:
    """Record the strided copy of ``axes`` (from ``_copy_axes``) from x into y."""
    n = math.prod(a[0] for a in axes)
    tile = int(any(a[3] for a in axes))
    # In the TILE pipeline every axis takes its modulo: the untiled ones by their own size.
    mods = [a[3] or a[0] for a in axes] if tile else [0] * len(axes)
    params = [n, len(axes), in_base, out_base, *pad6([a[0] for a in axes]), *pad6([a[1] for a in axes], 0),
              *pad6([a[2] for a in axes], 0), *pad6(mods, 1)]
    linear = row_strides([a[0] for a in axes])
    in_linear = int(not tile and all(a[1] == s for a, s in zip(axes, linear, strict=True)))
    out_linear = int(all(a[2] == s for a, s in zip(axes, linear, strict=True)))
    rec.dispatch("compute/copy.wgsl", [x], [y], params, n, workgroup=256, subs={"T": x.gpu_type},
                 constants={"TILE": tile, "IN_LINEAR": in_linear, "OUT_LINEAR": out_linear})


def _permute(rec, x, shape, perm, out_shape):
    """y = x.reshape(shape).transpose(perm).reshape(out_shape), as one strided copy."""
    st = row_strides(shape)
    it = [shape[p] for p in perm]
    axes = _copy_axes(it, [st[p] for p in perm], row_strides(it))
    if axes is None:
        return NotImplemented
    y = rec.alloc(out_shape, x.dtype)
    if y.size:
        dispatch_copy(rec, x, y, axes)
    return y


def _ints(value) -> list[int]:
    return [int(v) for v in np.asarray(value).reshape(-1)]


def split_sizes(dim: int, sizes: list[int] | None, count: int) -> list[int] | None:
    """Split's part sizes along an axis of ``dim``: ``sizes`` checked, or ``count`` parts of ceil(dim / count)
    (the last ones shorter); None where the CPU kernel raises."""
    if sizes is None:
        if count <= 0:
            return None
        chunk = -(-dim // count)
        sizes = [min(chunk, max(dim - i * chunk, 0)) for i in range(count)]
    if sum(sizes) != dim or any(s < 0 for s in sizes):
        return None
    return list(sizes)


def slice_geometry(shape, starts, ends, axes, steps) -> tuple[list[int], list[int], list[int]] | None:
    """Slice as (output shape, first index, step) per axis, clamped as the CPU kernel clamps; None where it
    raises (mismatched lengths, a zero step, a bad axis: ValueError from ``_tensor.normalized_axes``)."""
    rank = len(shape)
    axes = list(range(len(starts))) if axes is None else _tensor.normalized_axes(axes, rank)
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps) or 0 in steps:
        return None
    out_shape, first, stride = list(shape), [0] * rank, [1] * rank
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        dim = shape[axis]
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if step > 0:
            sl = slice(min(max(start, 0), dim), min(max(end, 0), dim), step)
        else:
            end = min(max(end, -1), dim - 1)
            sl = slice(min(max(start, 0), dim - 1), None if end < 0 else end, step)
        r = range(*sl.indices(dim))
        out_shape[axis] = len(r)
        first[axis], stride[axis] = (r.start, r.step) if len(r) else (0, 1)
    return out_shape, first, stride


def pad_geometry(shape, pads, mode: str, axes) -> tuple[list[int], list[int], list[int], list[int]] | None:
    """Pad as (pad before each axis (>= 0), cropped before each axis, input elements kept per axis, output
    shape): negative pads crop first, as the CPU kernel slices them off and then pads what remains. None where
    the CPU kernel raises (pads of the wrong length, a crop past the axis, edge/reflect/wrap of an empty axis)."""
    rank = len(shape)
    axes = list(range(rank)) if axes is None else _tensor.normalized_axes(axes, rank)
    if len(pads) != 2 * len(axes):
        return None
    begin, end = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        begin[a] = pads[i]
        end[a] = pads[i + len(axes)]
    length = [d - max(-b, 0) - max(-e, 0) for d, b, e in zip(shape, begin, end, strict=True)]
    if any(n < 0 for n in length):
        return None
    if mode != "constant" and any(n == 0 and (b > 0 or e > 0) for n, b, e in zip(length, begin, end, strict=True)):
        return None  # the CPU kernel raises: cannot pad an empty axis
    out_shape = [n + max(b, 0) + max(e, 0) for n, b, e in zip(length, begin, end, strict=True)]
    return [max(b, 0) for b in begin], [max(-b, 0) for b in begin], length, out_shape


# -- views --------------------------------------------------------------------------------------
def reshaped_view(rec, x, shape):
    """A view of ``x`` (uploaded if on the host) with ``shape``; NotImplemented where it cannot be bound."""
    x = device_tensor(rec, x)
    return NotImplemented if x is None else rec.view(x, [int(d) for d in shape])


@gpu("Identity", 1)
def identity(rec, layer, x, **attrs):
    return rec.view(x, x.shape) if _is_gpu(x) else NotImplemented


@gpu("Reshape", 1)
def reshape_v1(rec, layer, data, *, shape=None, **attrs):
    if shape is None:
        return NotImplemented
    return reshaped_view(rec, data, _tensor.reshape_target(data.shape, list(shape), 0))


@gpu("Reshape", 5, host_inputs=(1,))
def reshape(rec, layer, data, shape, *, allowzero=0, **attrs):
    return reshaped_view(rec, data, _tensor.reshape_target(data.shape, _ints(shape), allowzero))


@gpu("Flatten", 1)
def flatten(rec, layer, x, *, axis=1, **attrs):
    rank = len(x.shape)
    if not -rank <= axis <= rank:
        return NotImplemented
    axis = axis + rank if axis < 0 else axis
    return reshaped_view(rec, x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))


def squeezed_shape(shape, axes) -> list[int] | None:
    """Squeeze's output shape for ``axes`` (None or empty: every axis of size 1); None where an axis is not 1."""
    if axes is None or len(axes) == 0:
        return [d for d in shape if d != 1]
    axes = _tensor.normalized_axes(axes, len(shape))
    if any(shape[a] != 1 for a in axes):
        return None  # the CPU kernel raises the error
    return [d for i, d in enumerate(shape) if i not in axes]


@gpu("Squeeze", 1)
def squeeze_v1(rec, layer, data, *, axes=None, **attrs):
    shape = squeezed_shape(tuple(data.shape), axes)
    return NotImplemented if shape is None else reshaped_view(rec, data, shape)


@gpu("Squeeze", 13, host_inputs=(1,))
def squeeze(rec, layer, data, axes=None, **attrs):
    shape = squeezed_shape(tuple(data.shape), None if axes is None else _ints(axes))
    return NotImplemented if shape is None else reshaped_view(rec, data, shape)


def unsqueezed_shape(shape, axes) -> list[int]:
    """Unsqueeze's output shape: ``shape`` with a 1 inserted at each of ``axes`` (axes of the output)."""
    rank = len(shape) + len(axes)
    axes = set(_tensor.normalized_axes(axes, rank))
    dims = iter(shape)
    return [1 if i in axes else next(dims) for i in range(rank)]


@gpu("Unsqueeze", 1)
def unsqueeze_v1(rec, layer, data, *, axes=None, **attrs):
    if axes is None:
        return NotImplemented
    return reshaped_view(rec, data, unsqueezed_shape(tuple(data.shape), list(axes)))


@gpu("Unsqueeze", 13, host_inputs=(1,))
def unsqueeze(rec, layer, data, axes, **attrs):
    return reshaped_view(rec, data, unsqueezed_shape(tuple(data.shape), _ints(axes)))


def filled_tensor(rec, shape, dtype, value):
    """A new tensor of ``shape`` filled with ``value``."""
    y = rec.alloc(shape, dtype)
    rec.dispatch("compute/generate.wgsl", [], [y], [y.size, storage_bits(value, dtype)], y.size,
                 workgroup=256, subs={"T": y.gpu_type, "EXPR": f"bitcast<{y.gpu_type}>(pu(1u))"})
    return y


# -- strided copies -----------------------------------------------------------------------------
@gpu("Transpose", 1)
def transpose(rec, layer, data, *, perm=None, **attrs):
    x = device_tensor(rec, data)
    rank = len(data.shape)
    perm = list(range(rank))[::-1] if perm is None else [int(p) for p in perm]
    if x is None or sorted(perm) != list(range(rank)):
        return NotImplemented
    return _permute(rec, x, list(x.shape), perm, [x.shape[p] for p in perm])


_MAX_SLAB_COPIES = 8  # Concat/Split as buffer copies when each tensor is at most this many slabs


@gpu("Concat", 4)
def concat(rec, layer, *inputs, axis=None, **attrs):
    if axis is None or not inputs or any(t is None for t in inputs):
        return NotImplemented
    xs = [device_tensor(rec, t, f"{layer.name}:{k}") for k, t in enumerate(inputs)]
    if any(x is None for x in xs) or len({x.dtype for x in xs}) != 1:
        return NotImplemented
    rank = len(xs[0].shape)
    axis = _tensor.normalized_axis(axis, rank)
    out_shape = list(xs[0].shape)
    out_shape[axis] = sum(x.shape[axis] for x in xs)
    out_st = row_strides(out_shape)
    plans, offset = [], 0
    for x in xs:
        if len(x.shape) != rank or any(x.shape[a] != out_shape[a] for a in range(rank) if a != axis):
            return NotImplemented
        if x.size:
            axes = _copy_axes(x.shape, row_strides(x.shape), out_st)
            if axes is None:
                return NotImplemented
            plans.append((x, axes, offset * out_st[axis]))
        offset += x.shape[axis]
    y = rec.alloc(out_shape, xs[0].dtype)
    outer = math.prod(out_shape[:axis])
    if outer <= _MAX_SLAB_COPIES:
        # Each input is `outer` contiguous slabs of the output (one for NCHW channel concat with N=1):
        # buffer copies, a memcpy, beat a copy shader's dispatch.
        out_row = math.prod(out_shape[axis:])
        offset = 0
        for x in xs:
            row = math.prod(x.shape[axis:])
            for k in range(outer):
                rec.copy(x, k * row, y, k * out_row + offset, row)
            offset += row
        return y
    for x, axes, base in plans:  # one dispatch per input writes its slab of the output
        dispatch_copy(rec, x, y, axes, out_base=base)
    return y


def _split(rec, layer, data, axis, sizes, count):
    x = device_tensor(rec, data)
    if x is None:
        return NotImplemented
    rank = len(x.shape)
    axis = _tensor.normalized_axis(axis, rank)
    sizes = split_sizes(x.shape[axis], sizes, count)
    if sizes is None:
        return NotImplemented
    st = row_strides(x.shape)
    plans, start = [], 0
    for s in sizes:
        shape = list(x.shape)
        shape[axis] = s
        axes = _copy_axes(shape, st, row_strides(shape))
        if axes is None:
            return NotImplemented
        plans.append((shape, axes, start * st[axis]))
        start += s
    outer = math.prod(x.shape[:axis])
    in_row = math.prod(x.shape[axis:])
    outs = []
    for k, (shape, axes, base) in enumerate(plans):
        if k < len(layer.outputs) and not layer.outputs[k]:
            outs.append(None)  # an unused output: nothing to compute
            continue
        y = rec.alloc(shape, x.dtype)
        if y.size and outer <= _MAX_SLAB_COPIES:  # contiguous slabs: buffer copies (see Concat)
            row = math.prod(shape[axis:])
            for j in range(outer):
                rec.copy(x, j * in_row + base, y, j * row, row)
        elif y.size:
            dispatch_copy(rec, x, y, axes, in_base=base)
        outs.append(y)
    return tuple(outs)


@gpu("Split", 1, host_inputs=(1,))
def split_v1(rec, layer, x, split_sizes=None, *, axis=0, split=None, **attrs):
    sizes = _ints(split_sizes) if split_sizes is not None else split
    return _split(rec, layer, x, axis, None if sizes is None else list(sizes), len(layer.outputs))


@gpu("Split", 2)
def split_v2(rec, layer, x, *, axis=0, split=None, **attrs):
    return _split(rec, layer, x, axis, None if split is None else list(split), len(layer.outputs))


@gpu("Split", 13, host_inputs=(1,))
def split_v13(rec, layer, x, split=None, *, axis=0, num_outputs=None, **attrs):
    if split is not None and num_outputs is not None:
        return NotImplemented
    count = len(layer.outputs) if num_outputs is None else int(num_outputs)
    return _split(rec, layer, x, axis, None if split is None else _ints(split), count)


def _slice(rec, data, starts, ends, axes, steps):
    x = device_tensor(rec, data)
    if x is None:
        return NotImplemented
    geometry = slice_geometry(x.shape, starts, ends, axes, steps)
    if geometry is None:
        return NotImplemented
    out_shape, first, stride = geometry
    st = row_strides(x.shape)
    in_st = [s * k for s, k in zip(st, stride, strict=True)]
    base = sum(f * s for f, s, n in zip(first, st, out_shape, strict=True) if n)
    axes6 = _copy_axes(out_shape, in_st, row_strides(out_shape))
    if axes6 is None:
        return NotImplemented
    y = rec.alloc(out_shape, x.dtype)
    if y.size:
        dispatch_copy(rec, x, y, axes6, in_base=base)
    return y


@gpu("Slice", 1)
def slice_v1(rec, layer, data, *, starts=None, ends=None, axes=None, **attrs):
    if starts is None or ends is None:
        return NotImplemented
    return _slice(rec, data, [int(v) for v in starts], [int(v) for v in ends], axes, None)


@gpu("Slice", 10, host_inputs=(1, 2, 3, 4))
def slice_(rec, layer, data, starts, ends, axes=None, steps=None, **attrs):
    return _slice(rec, data, _ints(starts), _ints(ends), None if axes is None else _ints(axes),
                  None if steps is None else _ints(steps))


def _broadcast_copy(rec, x, out_shape, reps=None):
    """Expand (zero strides on broadcast axes) or Tile (``reps``: modulo the input's dims)."""
    rank = len(out_shape)
    in_shape = [1] * (rank - len(x.shape)) + list(x.shape)
    st = row_strides(in_shape)
    if reps is None:
        in_st = [0 if in_shape[a] == 1 and out_shape[a] != 1 else st[a] for a in range(rank)]
        mods = None
    else:
        in_st, mods = st, [in_shape[a] if reps[a] != 1 else 0 for a in range(rank)]
    axes = _copy_axes(out_shape, in_st, row_strides(out_shape), mods)
    if axes is None:
        return NotImplemented
    y = rec.alloc(out_shape, x.dtype)
    if y.size:
        dispatch_copy(rec, x, y, axes)
    return y


@gpu("Expand", 8, host_inputs=(1,))
def expand(rec, layer, data, shape, **attrs):
    x = device_tensor(rec, data)
    if x is None:
        return NotImplemented
    try:
        target = tuple(np.broadcast_shapes(tuple(x.shape), tuple(_ints(shape))))
    except ValueError:
        return NotImplemented
    return _broadcast_copy(rec, x, list(target))


def _tile(rec, data, reps):
    x = device_tensor(rec, data)
    if x is None or len(reps) != len(x.shape) or any(r < 0 for r in reps):
        return NotImplemented
    return _broadcast_copy(rec, x, [d * r for d, r in zip(x.shape, reps, strict=True)], reps)


@gpu("Tile", 1, host_inputs=(1, 2))
def tile_v1(rec, layer, x, tiles, axis, **attrs):
    reps = [1] * len(x.shape)
    reps[_tensor.normalized_axis(_tensor.int_scalar(axis), len(x.shape))] = _tensor.int_scalar(tiles)
    return _tile(rec, x, reps)


@gpu("Tile", 6, host_inputs=(1,))
def tile(rec, layer, x, repeats, **attrs):
    return _tile(rec, x, _ints(repeats))


def depth_to_space_plan(shape, blocksize, mode: str) -> tuple[list[int], list[int], list[int]] | None:
    """DepthToSpace as a reshape, a transpose and a reshape: (6-D shape, perm, output shape); None where the
    CPU kernel raises."""
    if blocksize is None or len(shape) != 4 or mode not in ("DCR", "CRD"):
        return None
    b, c, h, w = shape  # (N, C, H, W)
    bs = int(blocksize)
    if bs <= 0 or c % (bs * bs):
        return None
    if mode == "DCR":
        six, perm = [b, bs, bs, c // (bs * bs), h, w], [0, 3, 4, 1, 5, 2]
    else:
        six, perm = [b, c // (bs * bs), bs, bs, h, w], [0, 1, 4, 2, 5, 3]
    return six, perm, [b, c // (bs * bs), h * bs, w * bs]


def space_to_depth_plan(shape, blocksize, mode: str) -> tuple[list[int], list[int], list[int]] | None:
    """SpaceToDepth as a reshape, a transpose and a reshape: (6-D shape, perm, output shape); None where the
    CPU kernel raises."""
    if blocksize is None or len(shape) != 4 or mode not in ("DCR", "CRD"):
        return None
    b, c, h, w = shape  # (N, C, H, W)
    bs = int(blocksize)
    if bs <= 0 or h % bs or w % bs:
        return None
    perm = [0, 3, 5, 1, 2, 4] if mode == "DCR" else [0, 1, 3, 5, 2, 4]
    return [b, c, h // bs, bs, w // bs, bs], perm, [b, c * bs * bs, h // bs, w // bs]


def _depth_to_space(rec, data, blocksize, mode):
    x = device_tensor(rec, data)
    plan = None if x is None else depth_to_space_plan(x.shape, blocksize, mode)
    return NotImplemented if plan is None else _permute(rec, x, *plan)


@gpu("DepthToSpace", 1)
def depth_to_space(rec, layer, x, *, blocksize=None, mode="DCR", **attrs):
    return _depth_to_space(rec, x, blocksize, mode)


def _space_to_depth(rec, data, blocksize, mode):
    x = device_tensor(rec, data)
    plan = None if x is None else space_to_depth_plan(x.shape, blocksize, mode)
    return NotImplemented if plan is None else _permute(rec, x, *plan)


@gpu("SpaceToDepth", 1)
def space_to_depth(rec, layer, x, *, blocksize=None, mode="DCR", **attrs):
    return _space_to_depth(rec, x, blocksize, mode)


def reverse_sequence_plan(x, sequence_lens, batch_axis, time_axis) -> tuple[int, int, np.ndarray] | None:
    """(batch axis, time axis, lengths as int32) of a ReverseSequence of the device tensor ``x`` the GPU programs
    run: None where there is no such tensor or the CPU kernel raises (equal axes, a length outside [0, T], a count
    that is not the batch size)."""
    if x is None:
        return None
    shape = x.shape
    rank = len(shape)
    if rank < 2 or not -rank <= batch_axis < rank or not -rank <= time_axis < rank:
        return None
    batch_axis, time_axis = batch_axis % rank, time_axis % rank
    lens = np.asarray(sequence_lens).reshape(-1)
    if batch_axis == time_axis or lens.size != shape[batch_axis] or lens.dtype.kind not in "iu":
        return None
    if lens.size and (lens.min() < 0 or lens.max() > shape[time_axis]):
        return None
    return batch_axis, time_axis, lens.astype(np.int32)


@gpu("ReverseSequence", 10, host_inputs=(1,))
def reverse_sequence(rec, layer, data, sequence_lens, *, batch_axis=1, time_axis=0, **attrs):
    x = device_tensor(rec, data, f"{layer.name}:input")
    plan = reverse_sequence_plan(x, sequence_lens, batch_axis, time_axis)
    if plan is None:
        return NotImplemented
    y = rec.alloc(x.shape, x.dtype)
    if y.size:
        batch_axis, time_axis, lens = plan
        strides = row_strides(x.shape)
        lengths = device_tensor(rec, lens, f"{layer.name}:sequence_lens")
        rec.dispatch("compute/reverse_sequence.wgsl", [x, lengths], [y],
                     [y.size, strides[time_axis], x.shape[time_axis], strides[batch_axis], x.shape[batch_axis]],
                     y.size, workgroup=256, subs={"T": x.gpu_type})
    return y


# -- pad ----------------------------------------------------------------------------------------
_PAD_MODE = {"constant": 0, "edge": 1, "reflect": 2, "wrap": 3}


def _pad(rec, data, pads, mode, value, axes):
    x = device_tensor(rec, data)
    if x is None or mode not in _PAD_MODE:
        return NotImplemented
    rank = len(x.shape)
    if rank > MAX_RANK:
        return NotImplemented
    geometry = pad_geometry(x.shape, pads, mode, axes)
    if geometry is None:
        return NotImplemented
    shift, crop_lo, length, out_shape = geometry
    fill = np.asarray(0 if value is None else value).reshape(-1)
    fill_value = fill[0] if fill.size else 0
    try:
        fill_bits = storage_bits(np.asarray(fill_value).astype(x.dtype), x.dtype)
    except (OverflowError, ValueError):
        return NotImplemented
    y = rec.alloc(out_shape, x.dtype)
    params = [y.size, max(rank, 1), _PAD_MODE[mode], fill_bits, *pad6(out_shape or [1]),
              *pad6(row_strides(x.shape) or [0], 0), *pad6(shift or [0], 0),
              *pad6(crop_lo or [0], 0), *pad6(length or [1], 0)]
    rec.dispatch("compute/pad.wgsl", [x], [y], params, y.size, workgroup=256, subs={"T": x.gpu_type},
                 constants={"MODE": _PAD_MODE[mode]})
    return y


@gpu("Pad", 1)
def pad_v1(rec, layer, data, *, mode="constant", paddings=None, value=0.0, **attrs):
    if paddings is None:
        return NotImplemented
    return _pad(rec, data, [int(p) for p in paddings], mode, value, None)


@gpu("Pad", 2)
def pad_v2(rec, layer, data, *, mode="constant", pads=None, value=0.0, **attrs):
    if pads is None:
        return NotImplemented
    return _pad(rec, data, [int(p) for p in pads], mode, value, None)


@gpu("Pad", 11, host_inputs=(1, 2, 3))
def pad(rec, layer, data, pads, constant_value=None, axes=None, *, mode="constant", **attrs):
    return _pad(rec, data, _ints(pads), mode, constant_value, None if axes is None else _ints(axes))


# -- gathers and scatters -----------------------------------------------------------------------
def _host_indices_ok(indices, length: int, negative_ok: bool = True) -> bool:
    """Host-known indices in [-length, length), or [0, length) without ``negative_ok`` (else the CPU kernel
    raises its IndexOutOfRangeError). Device-only indices are checked by the kernels themselves
    (wgsl/common/faults.wgsl)."""
    host = indices.host if _is_gpu(indices) else indices
    if host is None:
        return True
    host = np.asarray(host)
    return not host.size or (host.min() >= (-length if negative_ok else 0) and host.max() < length)


def _index_tensor(rec, indices, name):
    if getattr(indices, "dtype", None) not in _INTS:
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
                     subs={"TA": x.gpu_type, "TB": "i32", "T": y.gpu_type, "INDEX": "B[i]",
                           "STORE": "Y[i] = A[off];"}, faults=True)
        return y
    u = device_tensor(rec, updates, f"{layer.name}:updates")
    if u is None or u.shape != idx.shape or u.dtype != x.dtype:
        return NotImplemented
    y = _copy_all(rec, x)
    params.append(rec.check_indices([length]))
    rec.dispatch("compute/gather_elements.wgsl", [idx, u], [y], params, idx.size, workgroup=256,
                 subs={"TA": "i32", "TB": u.gpu_type, "T": y.gpu_type, "INDEX": "A[i]", "STORE": "Y[off] = B[i];"},
                 faults=True)
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
    host = indices.host if _is_gpu(indices) else indices
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
                         subs={"TA": x.gpu_type, "TB": "i32", "T": y.gpu_type, "INDEX": "B[pos * k + j]",
                               "STORE": "Y[i] = A[off];" if whole else
                               "if (off >= pu(18u) && off < pu(19u)) { Y[i] = A[off - pu(18u)]; }"}, faults=True)
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
                     subs={"TA": "i32", "TB": u.gpu_type, "T": y.gpu_type, "INDEX": "A[pos * k + j]",
                           "STORE": "Y[off] = B[i];" if whole else
                           "if (off >= pu(18u) && off < pu(19u)) { Y[off - pu(18u)] = B[i]; }"}, faults=True)
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
    host = indices.host if _is_gpu(indices) else indices
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


# -- generators ---------------------------------------------------------------------------------
@gpu("ConstantOfShape", 9, host_inputs=(0,))
def constant_of_shape(rec, layer, shape, *, value=None, **attrs):
    dims = _ints(shape)
    if any(d < 0 for d in dims):
        return NotImplemented
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    if fill.size != 1 or fill.dtype not in STORAGE:
        return NotImplemented
    try:
        return filled_tensor(rec, dims, fill.dtype, fill[0])
    except OverflowError:
        return NotImplemented


@gpu("EyeLike", 9)
def eye_like(rec, layer, x, *, dtype=None, k=0, **attrs):
    if len(x.shape) != 2:
        return NotImplemented
    out_dtype = np.dtype(x.dtype if dtype is None else ONNX_TO_NUMPY[dtype])
    if out_dtype not in STORAGE:
        return NotImplemented
    y = rec.alloc(x.shape, out_dtype)
    t = y.gpu_type
    expr = f"select(bitcast<{t}>(pu(4u)), bitcast<{t}>(pu(3u)), i32(i % pu(1u)) - i32(i / pu(1u)) == pi(2u))"
    params = [y.size, max(x.shape[1], 1), int(k), storage_bits(1, out_dtype), storage_bits(0, out_dtype)]
    rec.dispatch("compute/generate.wgsl", [], [y], params, y.size, workgroup=256, subs={"T": t, "EXPR": expr})
    return y


@gpu("Range", 11, host_inputs=(0, 1, 2))
def range_(rec, layer, start, limit, delta, **attrs):
    dtype = np.asarray(start).dtype
    if dtype not in STORAGE or dtype == np.bool_:
        return NotImplemented
    s, lim, d = (np.asarray(v).reshape(()) for v in (start, limit, delta))
    if d == 0:
        return NotImplemented
    if dtype.kind == "i":
        count = max(-(-(int(lim) - int(s)) // int(d)), 0)
        last = int(s) + (count - 1) * int(d)
        if not (_I32_MIN <= int(s) <= _I32_MAX and _I32_MIN <= last <= _I32_MAX and _I32_MIN <= int(d) <= _I32_MAX):
            return NotImplemented
        params, expr = [0, int(s), int(d)], "pi(1u) + i32(i) * pi(2u)"
    else:
        count = max(math.ceil((float(lim) - float(s)) / float(d)), 0)
        if count >= 2**24:
            return NotImplemented  # the index would not be exact in f32
        # fma rounds start + i * delta once, as the CPU kernel's float64 sum rounded to float32.
        params, expr = [0, float(s), float(d)], "fma(f32(i), pf(2u), pf(1u))"
    y = rec.alloc([count], dtype)
    params[0] = count
    rec.dispatch("compute/generate.wgsl", [], [y], params, count, workgroup=256,
                 subs={"T": y.gpu_type, "EXPR": expr})
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


@gpu("Trilu", 14, host_inputs=(1,))
def trilu(rec, layer, data, k=None, *, upper=1, **attrs):
    x = device_tensor(rec, data)
    if x is None or len(x.shape) < 2:
        return NotImplemented
    shift = 0 if k is None else _tensor.int_scalar(k)
    shift = min(max(shift, _I32_MIN + 1), _I32_MAX)  # beyond any matrix either way
    y = rec.alloc(x.shape, x.dtype)
    params = [y.size, max(x.shape[-2], 1), max(x.shape[-1], 1), shift, int(bool(upper))]
    rec.dispatch("compute/trilu.wgsl", [x], [y], params, y.size, workgroup=256, subs={"T": x.gpu_type})
    return y


# -- CumSum ---------------------------------------------------------------------------------------
@register("CumSum", 11, backend=GPU_COMPUTE, host_inputs=(1,))
def cum_sum(rec, layer, x, axis, *, exclusive=0, reverse=0, **attrs):
    # int64 runs here where its values' bound keeps every sum within the int32 words the GPU stores it in
    # (placement.int64_range_reason puts the others on the host).
    if not _is_gpu(x) or x.dtype not in (np.float32, np.int32, np.int64) or x.ndim == 0:
        return NotImplemented
    axis = np.asarray(axis).reshape(-1)
    a = norm_axis(axis[0], x.ndim) if axis.size == 1 else None
    if a is None:
        return NotImplemented  # the CPU kernel reports the error (an axis out of range, or not a scalar)
    shape = x.shape
    outer, r, inner = math.prod(shape[:a]), shape[a], math.prod(shape[a + 1:])
    y = rec.alloc(shape, x.dtype)
    rec.dispatch("compute/cumsum.wgsl", [x], [y], [outer * inner, r, inner, int(bool(exclusive)), int(bool(reverse))],
                 outer * inner, workgroup=64, subs={"T": x.gpu_type}, loops=loop_passes(r))
    return y
