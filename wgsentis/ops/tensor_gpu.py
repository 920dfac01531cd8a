"""gpu-compute programs of the tensor family: views (Identity, Reshape, Flatten, Squeeze, Unsqueeze),
copies through one generic strided kernel (Transpose, Concat, Split, Slice, Expand, Tile, DepthToSpace,
SpaceToDepth, ReverseSequence), Pad and CumSum. Its public helpers (the ``gpu`` registration, device tensors,
strided copies, fills, the shape plans tensor_pixel.py shares) also serve the indexing and generator programs
(indexing_gpu.py, generators_gpu.py) and the cast, image and dropout families' (cast_gpu.py, resize_gpu.py,
dropout_gpu.py).

Semantics mirror the numpy kernels in tensor.py; where a value must be checked or computed on the host
(shapes, axes, pads) the planner hands it over as a host array, and anything the GPU cannot reproduce
exactly returns ``NotImplemented`` so the layer falls back to the CPU kernel.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from wgsentis.backends.gpu.tensors import loop_passes
from wgsentis.ops import tensor as _tensor
from wgsentis.ops.elementwise_gpu import refusing
from wgsentis.ops.reduce_gpu import norm_axis
from wgsentis.ops.registry import GPU_COMPUTE, register

MAX_RANK = 6
I32_MIN, I32_MAX = -(2**31), 2**31 - 1
# dtype -> WGSL storage type (int64 is stored as int32 values)
STORAGE = {np.dtype(np.float32): "f32", np.dtype(np.int32): "i32", np.dtype(np.int64): "i32",
           np.dtype(np.bool_): "u32"}
INT_TYPES = (np.dtype(np.int32), np.dtype(np.int64))


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


def is_device_tensor(t: Any) -> bool:
    """Whether ``t`` is a tensor on the device (it has an allocation and a WGSL storage type), not a host array."""
    return hasattr(t, "alloc") and hasattr(t, "gpu_type")


def device_tensor(rec, t: Any, name: str = ""):
    """``t`` as a bindable device tensor (host arrays are uploaded once), or None when it cannot be
    one (a dtype the GPU lacks, a tensor split into chunks above the binding limit)."""
    if is_device_tensor(t):
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
    if not I32_MIN <= v <= I32_MAX:
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


def host_ints(value) -> list[int]:
    """A host input (shape, axes, pads, sizes) as a list of Python ints."""
    return [int(v) for v in np.asarray(value).reshape(-1)]


def split_sizes(dim: int, sizes: list[int] | None, count: int) -> list[int] | None:
    """Split's part sizes (``tensor.split_parts``, the one rule); None where the CPU kernel raises."""
    try:
        return _tensor.split_parts(dim, sizes, count)
    except ValueError:
        return None


def split_part_request(layer: Any, split_input: Any, num_outputs: Any) -> Any:
    """``tensor.split_request`` for a GPU builder of Split-13 and later (its layer's opset; older layers come
    through their adapters with the sizes as the input): (sizes, count), or None where the CPU kernel raises."""
    try:
        return _tensor.split_request(layer.opset, split_input, None, num_outputs, len(layer.outputs))
    except ValueError:
        return None


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
    return rec.view(x, x.shape) if is_device_tensor(x) else NotImplemented


@gpu("Reshape", 5, host_inputs=(1,))
def reshape(rec, layer, data, shape, *, allowzero=0, **attrs):
    return reshaped_view(rec, data, _tensor.reshape_target(data.shape, host_ints(shape), allowzero))


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


@gpu("Squeeze", 13, host_inputs=(1,))
def squeeze(rec, layer, data, axes=None, **attrs):
    shape = squeezed_shape(tuple(data.shape), None if axes is None else host_ints(axes))
    return NotImplemented if shape is None else reshaped_view(rec, data, shape)


def unsqueezed_shape(shape, axes) -> list[int]:
    """Unsqueeze's output shape: ``shape`` with a 1 inserted at each of ``axes`` (axes of the output)."""
    rank = len(shape) + len(axes)
    axes = set(_tensor.normalized_axes(axes, rank))
    dims = iter(shape)
    return [1 if i in axes else next(dims) for i in range(rank)]


@gpu("Unsqueeze", 13, host_inputs=(1,))
def unsqueeze(rec, layer, data, axes, **attrs):
    return reshaped_view(rec, data, unsqueezed_shape(tuple(data.shape), host_ints(axes)))


# compute/generate.wgsl's FILL override: what its elements hold (a fill, an identity matrix, an integer or float
# Range; generators_gpu.py builds the last three).
FILL_CONSTANT, FILL_EYE, FILL_RANGE_INT, FILL_RANGE_FLOAT = 0, 1, 2, 3


def filled_tensor(rec, shape, dtype, value):
    """A new tensor of ``shape`` filled with ``value``."""
    y = rec.alloc(shape, dtype)
    rec.dispatch("compute/generate.wgsl", [], [y], [y.size, storage_bits(value, dtype)], y.size,
                 workgroup=256, subs={"T": y.gpu_type}, constants={"FILL": FILL_CONSTANT})
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


@gpu("Split", 13, host_inputs=(1,))
def split_v13(rec, layer, x, split=None, *, axis=0, num_outputs=None, **attrs):
    request = split_part_request(layer, split, num_outputs)
    return NotImplemented if request is None else _split(rec, layer, x, axis, *request)


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


@gpu("Slice", 10, host_inputs=(1, 2, 3, 4))
def slice_(rec, layer, data, starts, ends, axes=None, steps=None, **attrs):
    return _slice(rec, data, host_ints(starts), host_ints(ends), None if axes is None else host_ints(axes),
                  None if steps is None else host_ints(steps))


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
        target = tuple(np.broadcast_shapes(tuple(x.shape), tuple(host_ints(shape))))
    except ValueError:
        return NotImplemented
    return _broadcast_copy(rec, x, list(target))


def _tile(rec, data, reps):
    x = device_tensor(rec, data)
    if x is None or len(reps) != len(x.shape) or any(r < 0 for r in reps):
        return NotImplemented
    return _broadcast_copy(rec, x, [d * r for d, r in zip(x.shape, reps, strict=True)], reps)


@gpu("Tile", 6, host_inputs=(1,))
def tile(rec, layer, x, repeats, **attrs):
    return _tile(rec, x, host_ints(repeats))


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


def pad_request(opset: int, pads: Any, value: Any, axes: Any) -> Any:
    """``tensor.pad_request`` for a GPU builder: (pads, value, axes), or None where the CPU kernel raises."""
    try:
        return _tensor.pad_request(opset, pads, value, axes)
    except ValueError:
        return None


@gpu("Pad", 11, host_inputs=(1, 2, 3))
def pad(rec, layer, data, pads, constant_value=None, axes=None, *, mode="constant", **attrs):
    request = pad_request(11, pads, constant_value, axes)
    return NotImplemented if request is None else _pad(rec, data, request[0], mode, request[1], request[2])


# -- CumSum ---------------------------------------------------------------------------------------
@register("CumSum", 11, backend=GPU_COMPUTE, host_inputs=(1,))
def cum_sum(rec, layer, x, axis, *, exclusive=0, reverse=0, **attrs):
    # int64 runs here where its values' bound keeps every sum within the int32 words the GPU stores it in
    # (placement.int64_range_reason puts the others on the host).
    if not is_device_tensor(x) or x.dtype not in (np.float32, np.int32, np.int64) or x.ndim == 0:
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
