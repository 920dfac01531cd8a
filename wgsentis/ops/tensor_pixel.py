"""gpu-pixel programs of the tensor family: views (Identity, Reshape, Flatten, Squeeze, Unsqueeze, Dropout at
inference), one affine copy for Transpose, Slice, Split, Expand, Tile, DepthToSpace, SpaceToDepth and
ReverseSequence, Concat, Pad and CumSum; and the helpers the other pixel families share (``pixel``, ``pixel_tensor``,
``filled_texture``, ``affine_copy``). The indexing ops' programs are indexing_pixel.py's, the generators'
generators_pixel.py's, Cast's cast_pixel.py's and Resize's resize_pixel.py's.

A copy reads input coordinate ``d[j] = (start[j] + c[src[j]] * step[j]) mod dim[j]`` for output coordinates ``c``
(the modulo is what Tile and Expand need and a no-op for the others). Where the output's blocked axis is fed by the
input's blocked axis with step 1 and a four-aligned start, the copy moves whole texels (wgsl/pixel/texels.wgsl):
a transpose carries the blocked axis along, a slice or a concatenation on another axis moves texels. Otherwise
each lane is addressed (wgsl/pixel/map.wgsl). Semantics mirror the numpy kernels (tensor.py); what they
would reject, the builders decline (NotImplemented) so the CPU kernel raises its own error."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from wgsentis.backends.gpu import shader_gen
from wgsentis.backends.gpu.tensors import GTensor, loop_passes
from wgsentis.backends.pixel_layout import LANES, MAX_RANK, texel_kind
from wgsentis.ops import tensor as _tensor
from wgsentis.ops.elementwise_gpu import refusing
from wgsentis.ops.registry import GPU_PIXEL, register
from wgsentis.ops.tensor_gpu import (
    depth_to_space_plan,
    host_ints,
    pad_geometry,
    reverse_sequence_plan,
    slice_geometry,
    space_to_depth_plan,
    pad_request,
    split_part_request,
    split_sizes,
    squeezed_shape,
    storage_bits,
    unsqueezed_shape,
)


def pixel(op: str, since: int = 1, host_inputs: tuple[int, ...] = (), narrow_types: bool = False):
    """``register(op, since, backend="gpu-pixel")`` of a builder made ``refusing`` (NotImplemented where the CPU
    kernel would raise)."""

    def wrap(fn):
        build = refusing(fn)
        register(op, since, backend=GPU_PIXEL, host_inputs=host_inputs, narrow_types=narrow_types)(build)
        return build

    return wrap


def pixel_tensor(rec, x: Any, name: str = "") -> GTensor | None:
    """``x`` as a texture tensor of this recorder (a host array uploaded), or None where it cannot be one or its
    rank passes MAX_RANK."""
    t = rec.tensor(x, name)
    if t is None or len(t.shape) > MAX_RANK:
        return None
    return t


# -- views --------------------------------------------------------------------------------------------------------
def _reshaped(rec, data, shape):
    x = pixel_tensor(rec, data)
    if x is None or len(shape) > MAX_RANK:
        return NotImplemented
    return rec.reshape(x, [int(d) for d in shape])


@pixel("Identity", 1)
def identity(rec, layer, x, **attrs):
    t = pixel_tensor(rec, x)
    return NotImplemented if t is None else t


@pixel("Reshape", 5, host_inputs=(1,))
def reshape(rec, layer, data, shape, *, allowzero=0, **attrs):
    return _reshaped(rec, data, _tensor.reshape_target(data.shape, host_ints(shape), allowzero))


@pixel("Flatten", 1)
def flatten(rec, layer, x, *, axis=1, **attrs):
    rank = len(x.shape)
    if not -rank <= axis <= rank:
        return NotImplemented
    axis = axis + rank if axis < 0 else axis
    return _reshaped(rec, x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))


@pixel("Squeeze", 13, host_inputs=(1,))
def squeeze(rec, layer, data, axes=None, **attrs):
    shape = squeezed_shape(tuple(data.shape), None if axes is None else host_ints(axes))
    return NotImplemented if shape is None else _reshaped(rec, data, shape)


@pixel("Unsqueeze", 13, host_inputs=(1,))
def unsqueeze(rec, layer, data, axes, **attrs):
    return _reshaped(rec, data, unsqueezed_shape(tuple(data.shape), host_ints(axes)))


def filled_texture(rec, shape, dtype, value) -> GTensor:
    """A new texture tensor of ``shape`` and ``dtype`` with every element ``value``."""
    bits = storage_bits(value, dtype)
    return rec.map([], shape, dtype, -1, "pixel/body/fill.wgsl", [bits], subs={"T": texel_kind(dtype)})


def _dropout_identity(rec, layer, data):
    y = pixel_tensor(rec, data)
    if y is None:
        return NotImplemented
    if len(layer.outputs) > 1 and layer.outputs[1]:
        return y, filled_texture(rec, data.shape, np.bool_, True)
    return y


@pixel("Dropout", 12, host_inputs=(1, 2))
def dropout_v12(rec, layer, data, ratio=None, training_mode=None, **attrs):
    training = training_mode is not None and bool(np.asarray(training_mode))
    if training and (ratio is None or float(np.asarray(ratio)) != 0.0):
        return NotImplemented  # random masks stay on the CPU
    return _dropout_identity(rec, layer, data)


# -- the affine copy ------------------------------------------------------------------------------------------
_AFFINE = "pixel/body/affine.wgsl"  # affine_source(c), the coordinates read (words: starts, sources, steps)


def affine_copy(rec, x: GTensor, out_shape: list[int], src: list[int | None], start: list[int],
                step: list[int]) -> GTensor:
    """y[c] = x[d] with d[j] = (start[j] + c[src[j]] * step[j]) mod x.shape[j] for each input axis j (src None:
    start alone), in texels where the blocked axis allows it."""
    rank_in, rank_out = len(x.shape), len(out_shape)
    lead_in, lead_out = MAX_RANK - rank_in, MAX_RANK - rank_out
    starts, srcs, steps = [0] * MAX_RANK, [0] * MAX_RANK, [0] * MAX_RANK
    for j in range(rank_in):
        starts[lead_in + j] = int(start[j])
        if src[j] is not None:
            srcs[lead_in + j] = lead_out + int(src[j])
            steps[lead_in + j] = int(step[j])
    extra = [*starts, *srcs, *steps]
    if not x.shape:
        return rec.map([x], out_shape, x.dtype, -1, "pixel/body/copy.wgsl")
    axis = x.layout.axis
    feeder = src[axis]
    dim = x.shape[axis]
    if feeder is not None and step[axis] == 1 and start[axis] % LANES == 0 and (
            start[axis] + out_shape[feeder] <= dim or dim % LANES == 0) and dim > 1:
        return rec.texels([x], out_shape, x.dtype, feeder, "pixel/body/affine_texel.wgsl", extra, helpers=_AFFINE)
    out_axis = feeder if feeder is not None else -1
    return rec.map([x], out_shape, x.dtype, out_axis if rank_out else 0, "pixel/body/affine_lane.wgsl", extra,
                   helpers=_AFFINE)


@pixel("Transpose", 1)
def transpose(rec, layer, data, *, perm=None, **attrs):
    x = rec.tensor(data)
    if x is None:
        return NotImplemented
    rank = len(x.shape)
    perm = list(range(rank))[::-1] if perm is None else [int(p) for p in perm]
    if sorted(perm) != list(range(rank)):
        return NotImplemented
    out_shape = [x.shape[p] for p in perm]
    if rank > MAX_RANK:  # size-1 axes carry nothing: transpose the rest, as views where the layouts allow
        kept = [a for a in range(rank) if x.shape[a] != 1]
        squeezed = rec.view(x, [x.shape[a] for a in kept])
        if squeezed is None or len(kept) > MAX_RANK:
            return NotImplemented
        order = [kept.index(p) for p in perm if p in kept]
        y = transpose(rec, layer, squeezed, perm=order)
        out = rec.view(y, out_shape)
        return NotImplemented if out is None else out
    src = [perm.index(j) for j in range(rank)]
    return affine_copy(rec, x, out_shape, src, [0] * rank, [1] * rank)


def _slice(rec, data, starts, ends, axes, steps):
    x = pixel_tensor(rec, data)
    if x is None:
        return NotImplemented
    geometry = slice_geometry(x.shape, starts, ends, axes, steps)
    if geometry is None:
        return NotImplemented
    out_shape, first, stride = geometry
    return affine_copy(rec, x, out_shape, list(range(len(x.shape))), first, stride)


@pixel("Slice", 10, host_inputs=(1, 2, 3, 4))
def slice_(rec, layer, data, starts, ends, axes=None, steps=None, **attrs):
    return _slice(rec, data, host_ints(starts), host_ints(ends), None if axes is None else host_ints(axes),
                  None if steps is None else host_ints(steps))


def _split(rec, layer, data, axis, sizes, count):
    x = pixel_tensor(rec, data)
    if x is None:
        return NotImplemented
    rank = len(x.shape)
    axis = _tensor.normalized_axis(axis, rank)
    sizes = split_sizes(x.shape[axis], sizes, count)
    if sizes is None:
        return NotImplemented
    outs, begin = [], 0
    for k, size in enumerate(sizes):
        if k < len(layer.outputs) and not layer.outputs[k]:
            outs.append(None)  # an unused output: nothing to draw
        else:
            shape = list(x.shape)
            shape[axis] = size
            first = [0] * rank
            first[axis] = begin
            outs.append(affine_copy(rec, x, shape, list(range(rank)), first, [1] * rank))
        begin += size
    return tuple(outs)


@pixel("Split", 13, host_inputs=(1,))
def split_v13(rec, layer, x, split=None, *, axis=0, num_outputs=None, **attrs):
    request = split_part_request(layer, split, num_outputs)
    return NotImplemented if request is None else _split(rec, layer, x, axis, *request)


@pixel("Expand", 8, host_inputs=(1,))
def expand(rec, layer, data, shape, **attrs):
    x = pixel_tensor(rec, data)
    if x is None:
        return NotImplemented
    target = list(np.broadcast_shapes(tuple(x.shape), tuple(host_ints(shape))))
    if len(target) > MAX_RANK:
        return NotImplemented
    lead = len(target) - len(x.shape)
    return affine_copy(rec, x, target, [lead + j for j in range(len(x.shape))], [0] * len(x.shape),
                       [1] * len(x.shape))


def _tile(rec, data, reps):
    x = pixel_tensor(rec, data)
    if x is None or len(reps) != len(x.shape) or any(r < 0 for r in reps):
        return NotImplemented
    rank = len(x.shape)
    return affine_copy(rec, x, [d * r for d, r in zip(x.shape, reps, strict=True)], list(range(rank)), [0] * rank,
                       [1] * rank)


@pixel("Tile", 6, host_inputs=(1,))
def tile(rec, layer, x, repeats, **attrs):
    return _tile(rec, x, host_ints(repeats))


def _permute(rec, x: GTensor, shape: list[int], perm: list[int], out_shape: list[int]):
    """x.reshape(shape).transpose(perm).reshape(out_shape)."""
    if len(shape) > MAX_RANK:
        return NotImplemented
    v = rec.reshape(x, shape)
    rank = len(shape)
    y = affine_copy(rec, v, [shape[p] for p in perm], [perm.index(j) for j in range(rank)], [0] * rank, [1] * rank)
    return rec.reshape(y, out_shape, 1)


@pixel("DepthToSpace", 1)
def depth_to_space(rec, layer, data, *, blocksize=None, mode="DCR", **attrs):
    x = pixel_tensor(rec, data)
    plan = None if x is None else depth_to_space_plan(x.shape, blocksize, mode)
    return NotImplemented if plan is None else _permute(rec, x, *plan)


@pixel("SpaceToDepth", 1)
def space_to_depth(rec, layer, data, *, blocksize=None, mode="DCR", **attrs):
    x = pixel_tensor(rec, data)
    plan = None if x is None else space_to_depth_plan(x.shape, blocksize, mode)
    return NotImplemented if plan is None else _permute(rec, x, *plan)


@pixel("ReverseSequence", 10, host_inputs=(1,))
def reverse_sequence(rec, layer, data, sequence_lens, *, batch_axis=1, time_axis=0, **attrs):
    """Each element reads time L[b] - 1 - t of its batch b where t < L[b], else its own (L: a lengths tensor)."""
    x = pixel_tensor(rec, data, f"{layer.name}:input")
    plan = reverse_sequence_plan(x, sequence_lens, batch_axis, time_axis)
    if plan is None:
        return NotImplemented
    frame = MAX_RANK - len(x.shape)
    b, t = frame + plan[0], frame + plan[1]
    lengths = pixel_tensor(rec, plan[2], f"{layer.name}:sequence_lens")
    return rec.map([x, lengths], x.shape, x.dtype, x.layout.axis, "pixel/body/reverse_sequence.wgsl", [b, t])


# -- concat -------------------------------------------------------------------------------------------------------
_CONCAT_PER_DRAW = 6  # inputs one draw binds: 14 addressing words each, within the 128 parameter words


@pixel("Concat", 4)
def concat(rec, layer, *inputs, axis=None, **attrs):
    if axis is None or not inputs or any(t is None for t in inputs):
        return NotImplemented
    xs = [pixel_tensor(rec, t, f"{layer.name}:{k}") for k, t in enumerate(inputs)]
    if any(x is None for x in xs) or len({x.dtype for x in xs}) != 1:
        return NotImplemented
    rank = len(xs[0].shape)
    if rank == 0:
        return NotImplemented
    axis = _tensor.normalized_axis(axis, rank)
    for x in xs:
        if len(x.shape) != rank or any(x.shape[a] != xs[0].shape[a] for a in range(rank) if a != axis):
            return NotImplemented
    parts = [x for x in xs if x.shape[axis]]
    if not parts:
        parts = xs[:1]
    while len(parts) > _CONCAT_PER_DRAW:  # the first ones joined into one, then the rest
        parts = [_concat_draw(rec, parts[:_CONCAT_PER_DRAW], axis), *parts[_CONCAT_PER_DRAW:]]
    return _concat_draw(rec, parts, axis)


def _concat_draw(rec, xs: list[GTensor], axis: int) -> GTensor:
    """One draw joining ``xs`` along ``axis``: by texels where every part blocks ``axis``, or another axis,
    and each part's offset along ``axis`` is four-aligned; by lanes otherwise."""
    if len(xs) == 1:
        return xs[0]
    rank = len(xs[0].shape)
    frame = MAX_RANK - rank + axis
    out_shape = list(xs[0].shape)
    out_shape[axis] = sum(x.shape[axis] for x in xs)
    ends = list(np.cumsum([x.shape[axis] for x in xs]))
    axes = {x.layout.axis for x in xs}
    texel = len(axes) == 1 and (axes != {axis} or all(e % LANES == 0 for e in ends[:-1]))
    if texel and axes == {axis} and any(x.shape[axis] == 1 for x in xs) and out_shape[axis] > 1:
        texel = False
    body = shader_gen.concat_body(len(xs), texel)
    words = [frame, *(int(e) for e in ends)]  # the axis in the frame, then each part's end along it
    if texel:
        return rec.texels(xs, out_shape, xs[0].dtype, xs[0].layout.axis, body, words)
    return rec.map(xs, out_shape, xs[0].dtype, axis, body, words)


# -- pad ----------------------------------------------------------------------------------------------------------
_PAD_MODE = {"constant": 0, "edge": 1, "reflect": 2, "wrap": 3}


def _pad(rec, data, pads, mode, value, axes):
    x = pixel_tensor(rec, data)
    if x is None or mode not in _PAD_MODE:
        return NotImplemented
    rank = len(x.shape)
    geometry = pad_geometry(x.shape, pads, mode, axes)
    if geometry is None:
        return NotImplemented
    begin, crop_lo, length, out_shape = geometry
    fill = np.asarray(0 if value is None else value).reshape(-1)
    fill_bits = storage_bits(np.asarray(fill[0] if fill.size else 0).astype(x.dtype), x.dtype)
    if 0 in length:  # nothing to read: every element is the fill value
        return filled_texture(rec, out_shape, x.dtype, np.asarray(fill[0] if fill.size else 0).astype(x.dtype))
    lead = MAX_RANK - rank
    shift = [0] * lead + begin
    crop = [0] * lead + crop_lo
    lengths = [1] * lead + length
    return rec.map([x], out_shape, x.dtype, x.layout.axis, "pixel/body/pad.wgsl", [*shift, *crop, *lengths, fill_bits],
                   helpers="pixel/body/pad_mode.wgsl", subs={"T": x.layout.kind}, constants={"MODE": _PAD_MODE[mode]})


@pixel("Pad", 11, host_inputs=(1, 2, 3))
def pad(rec, layer, data, pads, constant_value=None, axes=None, *, mode="constant", **attrs):
    request = pad_request(11, pads, constant_value, axes)
    return NotImplemented if request is None else _pad(rec, data, request[0], mode, request[1], request[2])


@register("CumSum", 11, backend=GPU_PIXEL, host_inputs=(1,))
@refusing
def cum_sum(rec, layer, x, axis, *, exclusive=0, reverse=0, **attrs):
    """Each element sums its predecessors along the axis (int64 where its bound keeps the sums within int32:
    placement.int64_range_reason puts the others on the host)."""
    if not isinstance(x, GTensor) or x.dtype not in (np.float32, np.int32, np.int64) or not x.shape \
            or len(x.shape) > MAX_RANK:
        return NotImplemented
    axis = np.asarray(axis).reshape(-1)
    if axis.size != 1 or not -x.ndim <= int(axis[0]) < x.ndim:
        return NotImplemented
    a = int(axis[0]) % x.ndim
    n = x.shape[a]
    if not rec.loops_fit(loop_passes(n) * 8):
        return NotImplemented
    frame = MAX_RANK - x.ndim + a
    return rec.map([x], x.shape, x.dtype, x.layout.axis, "pixel/body/cum_sum.wgsl", [frame, n],
                   helpers="pixel/body/cum_sum_flags.wgsl", subs={"T": x.layout.kind},
                   constants={"EXCLUSIVE": bool(exclusive), "REVERSE": bool(reverse)})
