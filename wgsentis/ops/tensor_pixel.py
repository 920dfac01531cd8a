"""gpu-pixel programs of the tensor family: views (Identity, Reshape, Flatten, Squeeze, Unsqueeze, Dropout at
inference), one affine copy for Transpose, Slice, Split, Expand and Tile, Concat, Pad, Gather, DepthToSpace,
SpaceToDepth, Cast/CastLike, and Resize/Upsample.

A copy reads input coordinate ``d[j] = (start[j] + c[src[j]] * step[j]) mod dim[j]`` for output coordinates ``c``
(the modulo is what Tile and Expand need and a no-op for the others). Where the output's blocked axis is fed by the
input's blocked axis with step 1 and a four-aligned start, the copy moves whole texels (wgsl/pixel/texels.wgsl):
a transpose carries the blocked axis along, a slice or a concatenation on another axis moves texels. Otherwise
each lane is addressed (wgsl/pixel/map.wgsl). Semantics mirror the numpy kernels (tensor.py, image.py); what they
would reject, the builders decline (NotImplemented) so the CPU kernel raises its own error."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from wgsentis.backends.gpu.device import wgsl_source
from wgsentis.backends.gpu.tensors import GTensor, loop_passes
from wgsentis.backends.pixel_layout import LANES, MAX_RANK, texel_kind
from wgsentis.dtypes import ONNX_TO_NUMPY
from wgsentis.ops import tensor as _tensor
from wgsentis.ops.cast import cast_target
from wgsentis.ops.cast_gpu import narrow_cast
from wgsentis.ops.elementwise_gpu import refusing
from wgsentis.ops.elementwise_pixel import unary
from wgsentis.ops.image_gpu import resize_tables
from wgsentis.ops.registry import GPU_PIXEL, register
from wgsentis.ops.tensor_gpu import (
    reverse_sequence_plan,
    scatter_reduction,
    squeezed_shape,
    unsqueezed_shape,
    depth_to_space_plan,
    pad_geometry,
    slice_geometry,
    space_to_depth_plan,
    split_sizes,
    storage_bits,
)

_INTS = (np.dtype(np.int32), np.dtype(np.int64))


def pixel(op: str, since: int = 1, host_inputs: tuple[int, ...] = (), narrow_types: bool = False):
    """``register(op, since, backend="gpu-pixel")`` of a builder made ``refusing`` (NotImplemented where the CPU
    kernel would raise)."""

    def wrap(fn):
        build = refusing(fn)
        register(op, since, backend=GPU_PIXEL, host_inputs=host_inputs, narrow_types=narrow_types)(build)
        return build

    return wrap


def _ints(value) -> list[int]:
    return [int(v) for v in np.asarray(value).reshape(-1)]


def _tensor_of(rec, x: Any, name: str = "") -> GTensor | None:
    t = rec.tensor(x, name)
    if t is None or len(t.shape) > MAX_RANK:
        return None
    return t


# -- views --------------------------------------------------------------------------------------------------------
def _reshaped(rec, data, shape):
    x = _tensor_of(rec, data)
    if x is None or len(shape) > MAX_RANK:
        return NotImplemented
    return rec.reshape(x, [int(d) for d in shape])


@pixel("Identity", 1)
def identity(rec, layer, x, **attrs):
    t = _tensor_of(rec, x)
    return NotImplemented if t is None else t


@pixel("Reshape", 1)
def reshape_v1(rec, layer, data, *, shape=None, **attrs):
    if shape is None:
        return NotImplemented
    return _reshaped(rec, data, _tensor.reshape_target(data.shape, list(shape), 0))


@pixel("Reshape", 5, host_inputs=(1,))
def reshape(rec, layer, data, shape, *, allowzero=0, **attrs):
    return _reshaped(rec, data, _tensor.reshape_target(data.shape, _ints(shape), allowzero))


@pixel("Flatten", 1)
def flatten(rec, layer, x, *, axis=1, **attrs):
    rank = len(x.shape)
    if not -rank <= axis <= rank:
        return NotImplemented
    axis = axis + rank if axis < 0 else axis
    return _reshaped(rec, x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))


@pixel("Squeeze", 1)
def squeeze_v1(rec, layer, data, *, axes=None, **attrs):
    shape = squeezed_shape(tuple(data.shape), axes)
    return NotImplemented if shape is None else _reshaped(rec, data, shape)


@pixel("Squeeze", 13, host_inputs=(1,))
def squeeze(rec, layer, data, axes=None, **attrs):
    shape = squeezed_shape(tuple(data.shape), None if axes is None else _ints(axes))
    return NotImplemented if shape is None else _reshaped(rec, data, shape)


@pixel("Unsqueeze", 1)
def unsqueeze_v1(rec, layer, data, *, axes=None, **attrs):
    if axes is None:
        return NotImplemented
    return _reshaped(rec, data, unsqueezed_shape(tuple(data.shape), list(axes)))


@pixel("Unsqueeze", 13, host_inputs=(1,))
def unsqueeze(rec, layer, data, axes, **attrs):
    return _reshaped(rec, data, unsqueezed_shape(tuple(data.shape), _ints(axes)))


def _filled(rec, shape, dtype, value) -> GTensor:
    bits = storage_bits(value, dtype)
    return rec.map([], shape, dtype, -1, f"r = bitcast<{texel_kind(dtype)}>(pe(0u));", [bits])


def _dropout_identity(rec, layer, data):
    y = _tensor_of(rec, data)
    if y is None:
        return NotImplemented
    if len(layer.outputs) > 1 and layer.outputs[1]:
        return y, _filled(rec, data.shape, np.bool_, True)
    return y


@pixel("Dropout", 1)
def dropout_v1(rec, layer, data, **attrs):
    return _dropout_identity(rec, layer, data)


@pixel("Dropout", 12, host_inputs=(1, 2))
def dropout_v12(rec, layer, data, ratio=None, training_mode=None, **attrs):
    training = training_mode is not None and bool(np.asarray(training_mode))
    if training and (ratio is None or float(np.asarray(ratio)) != 0.0):
        return NotImplemented  # random masks stay on the CPU
    return _dropout_identity(rec, layer, data)


# -- the affine copy ------------------------------------------------------------------------------------------
_AFFINE = ("var d: Coords; for (var j = 0u; j < 6u; j++) { "
           "d.c[j] = u32(pei(j) + i32(c.c[pe(6u + j)]) * pei(12u + j)) % max(dim_of(14u, j), 1u); }")


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
        return rec.map([x], out_shape, x.dtype, -1, "r = x0(c);")
    axis = x.layout.axis
    feeder = src[axis]
    dim = x.shape[axis]
    if feeder is not None and step[axis] == 1 and start[axis] % LANES == 0 and (
            start[axis] + out_shape[feeder] <= dim or dim % LANES == 0) and dim > 1:
        return rec.texels([x], out_shape, x.dtype, feeder, _AFFINE + " out = x0(d);", extra)
    out_axis = feeder if feeder is not None else -1
    return rec.map([x], out_shape, x.dtype, out_axis if rank_out else 0, _AFFINE + " r = x0(d);", extra)


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
    x = _tensor_of(rec, data)
    if x is None:
        return NotImplemented
    geometry = slice_geometry(x.shape, starts, ends, axes, steps)
    if geometry is None:
        return NotImplemented
    out_shape, first, stride = geometry
    return affine_copy(rec, x, out_shape, list(range(len(x.shape))), first, stride)


@pixel("Slice", 1)
def slice_v1(rec, layer, data, *, starts=None, ends=None, axes=None, **attrs):
    if starts is None or ends is None:
        return NotImplemented
    return _slice(rec, data, [int(v) for v in starts], [int(v) for v in ends], axes, None)


@pixel("Slice", 10, host_inputs=(1, 2, 3, 4))
def slice_(rec, layer, data, starts, ends, axes=None, steps=None, **attrs):
    return _slice(rec, data, _ints(starts), _ints(ends), None if axes is None else _ints(axes),
                  None if steps is None else _ints(steps))


def _split(rec, layer, data, axis, sizes, count):
    x = _tensor_of(rec, data)
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


@pixel("Split", 1, host_inputs=(1,))
def split_v1(rec, layer, x, split_sizes=None, *, axis=0, split=None, **attrs):
    sizes = _ints(split_sizes) if split_sizes is not None else split
    return _split(rec, layer, x, axis, None if sizes is None else list(sizes), len(layer.outputs))


@pixel("Split", 2)
def split_v2(rec, layer, x, *, axis=0, split=None, **attrs):
    return _split(rec, layer, x, axis, None if split is None else list(split), len(layer.outputs))


@pixel("Split", 13, host_inputs=(1,))
def split_v13(rec, layer, x, split=None, *, axis=0, num_outputs=None, **attrs):
    if split is not None and num_outputs is not None:
        return NotImplemented
    count = len(layer.outputs) if num_outputs is None else int(num_outputs)
    return _split(rec, layer, x, axis, None if split is None else _ints(split), count)


@pixel("Expand", 8, host_inputs=(1,))
def expand(rec, layer, data, shape, **attrs):
    x = _tensor_of(rec, data)
    if x is None:
        return NotImplemented
    target = list(np.broadcast_shapes(tuple(x.shape), tuple(_ints(shape))))
    if len(target) > MAX_RANK:
        return NotImplemented
    lead = len(target) - len(x.shape)
    return affine_copy(rec, x, target, [lead + j for j in range(len(x.shape))], [0] * len(x.shape),
                       [1] * len(x.shape))


def _tile(rec, data, reps):
    x = _tensor_of(rec, data)
    if x is None or len(reps) != len(x.shape) or any(r < 0 for r in reps):
        return NotImplemented
    rank = len(x.shape)
    return affine_copy(rec, x, [d * r for d, r in zip(x.shape, reps, strict=True)], list(range(rank)), [0] * rank,
                       [1] * rank)


@pixel("Tile", 1, host_inputs=(1, 2))
def tile_v1(rec, layer, x, tiles, axis, **attrs):
    reps = [1] * len(x.shape)
    reps[_tensor.normalized_axis(_tensor.int_scalar(axis), len(x.shape))] = _tensor.int_scalar(tiles)
    return _tile(rec, x, reps)


@pixel("Tile", 6, host_inputs=(1,))
def tile(rec, layer, x, repeats, **attrs):
    return _tile(rec, x, _ints(repeats))


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
    x = _tensor_of(rec, data)
    plan = None if x is None else depth_to_space_plan(x.shape, blocksize, mode)
    return NotImplemented if plan is None else _permute(rec, x, *plan)


@pixel("SpaceToDepth", 1)
def space_to_depth(rec, layer, data, *, blocksize=None, mode="DCR", **attrs):
    x = _tensor_of(rec, data)
    plan = None if x is None else space_to_depth_plan(x.shape, blocksize, mode)
    return NotImplemented if plan is None else _permute(rec, x, *plan)


@pixel("ReverseSequence", 10, host_inputs=(1,))
def reverse_sequence(rec, layer, data, sequence_lens, *, batch_axis=1, time_axis=0, **attrs):
    """Each element reads time L[b] - 1 - t of its batch b where t < L[b], else its own (L: a lengths tensor)."""
    x = _tensor_of(rec, data, f"{layer.name}:input")
    plan = reverse_sequence_plan(x, sequence_lens, batch_axis, time_axis)
    if plan is None:
        return NotImplemented
    frame = MAX_RANK - len(x.shape)
    b, t = frame + plan[0], frame + plan[1]
    lengths = _tensor_of(rec, plan[2], f"{layer.name}:sequence_lens")
    body = (f"var e: Coords; e.c[{MAX_RANK - 1}] = c.c[{b}]; let n = u32(x1(e)); var d = c; "
            f"if (c.c[{t}] < n) {{ d.c[{t}] = n - 1u - c.c[{t}]; }} r = x0(d);")
    return rec.map([x, lengths], x.shape, x.dtype, x.layout.axis, body)


# -- concat -------------------------------------------------------------------------------------------------------
_CONCAT_PER_DRAW = 6  # inputs one draw binds: 14 addressing words each, within the 128 parameter words


@pixel("Concat", 4)
def concat(rec, layer, *inputs, axis=None, **attrs):
    if axis is None or not inputs or any(t is None for t in inputs):
        return NotImplemented
    xs = [_tensor_of(rec, t, f"{layer.name}:{k}") for k, t in enumerate(inputs)]
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
    branches = []
    for k in range(len(xs)):
        take = "out = x{k}(d);" if texel else "r = x{k}(d);"
        offset = "0u" if k == 0 else f"pe({k - 1}u)"
        branches.append(f"if (p < pe({k}u)) {{ var d = c; d.c[{frame}] = p - {offset}; {take.format(k=k)} }}")
    body = f"let p = c.c[{frame}]; " + " else ".join(branches)
    if texel:
        return rec.texels(xs, out_shape, xs[0].dtype, xs[0].layout.axis, body, [int(e) for e in ends])
    return rec.map(xs, out_shape, xs[0].dtype, axis, body, [int(e) for e in ends])


# -- pad ----------------------------------------------------------------------------------------------------------
_PAD_MODE = {"constant": 0, "edge": 1, "reflect": 2, "wrap": 3}
_PAD_BODY = """var d: Coords;
var inside = true;
for (var j = 0u; j < 6u; j++) {
    let n = i32(pe(12u + j));
    var q = i32(c.c[j]) - pei(j);
    if (MODE == 0u) {
        if (q < 0 || q >= n) { inside = false; q = 0; }
    } else if (MODE == 1u) {
        q = clamp(q, 0, n - 1);
    } else if (MODE == 2u) {
        if (n == 1) { q = 0; } else {
            let period = 2 * (n - 1);
            q = ((q % period) + period) % period;
            if (q >= n) { q = period - q; }
        }
    } else {
        q = ((q % n) + n) % n;
    }
    d.c[j] = u32(q + pei(6u + j));
}
r = select(bitcast<T>(pe(18u)), x0(d), inside);"""


def _pad(rec, data, pads, mode, value, axes):
    x = _tensor_of(rec, data)
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
        return _filled(rec, out_shape, x.dtype, np.asarray(fill[0] if fill.size else 0).astype(x.dtype))
    lead = MAX_RANK - rank
    shift = [0] * lead + begin
    crop = [0] * lead + crop_lo
    lengths = [1] * lead + length
    body = _PAD_BODY.replace("MODE", f"{_PAD_MODE[mode]}u").replace("bitcast<T>", f"bitcast<{x.layout.kind}>")
    return rec.map([x], out_shape, x.dtype, x.layout.axis, body, [*shift, *crop, *lengths, fill_bits])


@pixel("Pad", 1)
def pad_v1(rec, layer, data, *, mode="constant", paddings=None, value=0.0, **attrs):
    if paddings is None:
        return NotImplemented
    return _pad(rec, data, [int(p) for p in paddings], mode, value, None)


@pixel("Pad", 2)
def pad_v2(rec, layer, data, *, mode="constant", pads=None, value=0.0, **attrs):
    if pads is None:
        return NotImplemented
    return _pad(rec, data, [int(p) for p in pads], mode, value, None)


@pixel("Pad", 11, host_inputs=(1, 2, 3))
def pad(rec, layer, data, pads, constant_value=None, axes=None, *, mode="constant", **attrs):
    return _pad(rec, data, _ints(pads), mode, constant_value, None if axes is None else _ints(axes))


# -- gathers and scatters ------------------------------------------------------------------------------------------
# Indices computed on the device are bounds-checked where they are read (wgsl/common/faults.wgsl): an index
# outside [-len, len) is never used, and the run raises IndexOutOfRangeError naming the layer, as the CPU does.
# Host-known indices are checked on the host and the layer declines (the CPU kernel raises) when one is bad.
def _index_input(rec, indices, name: str) -> GTensor | None:
    if getattr(indices, "dtype", None) not in _INTS:
        return None
    return _tensor_of(rec, indices, name)


def _host_indices_ok(indices, length: int, negative_ok: bool = True) -> bool:
    host = indices.host if isinstance(indices, GTensor) else indices
    if host is None:
        return True
    host = np.asarray(host)
    return not host.size or (host.min() >= (-length if negative_ok else 0) and host.max() < length)


def _zero(kind: str) -> str:
    return f"{kind}(0)"


def _check_only(rec, idx: GTensor, dims: list[int], tuples: bool, negative_ok: bool = True,
                what: str = "indices") -> None:
    """Bounds-check the indices ``idx`` without gathering (a draw whose target is thrown away): a gather whose
    output is empty still raises, as the CPU kernel does, on an index outside its axis. ``tuples``: the last
    axis of ``idx`` holds the components of index tuples (GatherND), component j checked against dims[j]."""
    slot = rec.check_indices(dims, what, negative_ok=negative_ok)
    check = "checked_index" if negative_ok else "checked_nonneg"
    if tuples:
        bound = " ".join(f"if (c.c[{MAX_RANK - 1}] == {j}u) {{ dim = {d}; }}" for j, d in enumerate(dims))
        body = (f"var dim = 0; {bound} _ = {check}(i32(x0(c)), dim, pe(0u) + 2u * c.c[{MAX_RANK - 1}]); "
                "r = i32(0);")
    else:
        body = f"_ = {check}(i32(x0(c)), {dims[0]}, pe(0u)); r = i32(0);"
    rec.map([idx], idx.shape, np.int32, idx.layout.axis, body, [slot], faults=True)


@pixel("Gather", 1)
def gather(rec, layer, data, indices, *, axis=0, **attrs):
    return gather_along(rec, layer, data, indices, axis)


def gather_along(rec, layer, data, indices, axis: int, negative_ok: bool = True, what: str = "indices"):
    """Gather's program: ``data``'s slices along ``axis`` at ``indices``, bounds-checked where they are read
    (``negative_ok`` false: negative indices are out of range too, for ArrayFeatureExtractor; ``what`` names the
    input in the error)."""
    x = _tensor_of(rec, data, f"{layer.name}:data")
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
    lines = ["var d: Coords; var e: Coords;"]
    lines += [f"d.c[{ld + j}] = c.c[{lo + j}];" for j in range(axis)]
    lines += [f"e.c[{li + j}] = c.c[{lo + axis + j}];" for j in range(q)]
    lines += [f"d.c[{ld + j}] = c.c[{lo + q + j - 1}];" for j in range(axis + 1, rank)]
    check = "checked_index" if negative_ok else "checked_nonneg"
    lines.append(f"let k = {check}(i32(x1(e)), {dim}, pe(0u));")
    lines.append(f"if (k < 0) {{ r = {_zero(x.layout.kind)}; }} else {{ d.c[{ld + axis}] = u32(k); r = x0(d); }}")
    out_axis = (x.layout.axis if x.layout.axis < axis else x.layout.axis + q - 1) if x.layout.axis != axis else -1
    return rec.map([x, idx], out_shape, x.dtype, out_axis if out_shape else 0, " ".join(lines), [slot],
                    faults=True)


def _scatter_fold(layer, data, reduction: str, kind: str) -> tuple[str | None, str]:
    """A scatter body's fold of update ``v`` into ``acc`` and the helpers it needs: common/scatter_fold.wgsl
    (numpy's NaN rules for max and min, subnormals kept through the flushing fragment shader's arithmetic with
    common/subnormal.wgsl), or a plain store without reduction; None for an unknown reduction. Declined for data
    the GPU cannot fold exactly (``tensor_gpu.scatter_reduction``)."""
    if reduction == "none":
        return "acc = v;", ""
    how = scatter_reduction(layer, data, reduction)
    if how is None:
        return None, ""
    return (f"acc = fold_{kind}(acc, v, {how}u);",
            wgsl_source("common/subnormal.wgsl") + wgsl_source("common/scatter_fold.wgsl"))


def _elements(rec, layer, data, indices, updates, axis, reduction: str = "none"):
    """GatherElements (updates None) or ScatterElements, in gather form: an output element of a scatter looks
    along the axis for the last index that names it (and folds every such update for a reduction)."""
    x = _tensor_of(rec, data, f"{layer.name}:data")
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
        body = (f"var d = c; let k = checked_index(i32(x1(c)), {dim}, pe(0u)); "
                f"if (k < 0) {{ r = {_zero(kind)}; }} else {{ d.c[{frame}] = u32(k); r = x0(d); }}")
        return rec.map([x, idx], idx.shape, x.dtype, idx.layout.axis, body, [slot], faults=True)
    u = _tensor_of(rec, updates, f"{layer.name}:updates")
    if u is None or u.shape != idx.shape or u.dtype != x.dtype:
        return NotImplemented
    if any(idx.shape[j] > x.shape[j] for j in range(rank) if j != axis) or (idx.size and not x.size):
        return NotImplemented  # an index no output element would scan (and check)
    fold, helpers = _scatter_fold(layer, data, reduction, kind)
    if fold is None:
        return NotImplemented  # the CPU kernel names the unknown reduction
    walk = idx.shape[axis]
    per = walk
    while per > 1 and not rec.loops_fit(loop_passes(per) * 16):
        per = (per + 1) // 2
    slot = rec.check_indices([dim]) if idx.size else 0
    # pe: 0 the fault slot, 1 the axis length, 2 and 3 the walk's first and end position along the axis (a walk
    # past the loop limit is split into draws, each going on from the previous one's output), 4.. the indices'
    # shape
    inside = " && ".join(f"c.c[{MAX_RANK - rank + j}] < pe({4 + j}u)" for j in range(rank) if j != axis) or "true"
    body = (f"var acc = x0(c); if ({inside}) {{ var e = c; for (var p = pe(2u); p < pe(3u); p++) {{ "
            f"e.c[{frame}] = p; let k = checked_index(i32(x1(e)), pei(1u), pe(0u)); "
            f"if (k == i32(c.c[{frame}])) {{ let v = x2(e); {fold} }} }} }} r = acc;")
    y = x
    for first in range(0, max(walk, 1), max(per, 1)):
        y = rec.map([y, idx, u], x.shape, x.dtype, x.layout.axis, body,
                    [slot, dim, first, min(walk, first + per), *idx.shape], helpers=helpers, faults=True)
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
    x = _tensor_of(rec, data, f"{layer.name}:data")
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
        lines = ["var d: Coords; var e: Coords; var bad = false;"]
        lines += [f"e.c[{li + j}] = c.c[{lo + j}];" for j in range(q - 1)]
        lines += [f"d.c[{ld + j}] = c.c[{lo + j}];" for j in range(b)]
        for j in range(k):
            lines.append(f"e.c[5] = {j}u; {{ let v = checked_index(i32(x1(e)), {dims[j]}, pe(0u) + {2 * j}u); "
                         f"if (v < 0) {{ bad = true; }} else {{ d.c[{ld + b + j}] = u32(v); }} }}")
        lines += [f"d.c[{ld + b + k + j}] = c.c[{lo + q - 1 + j}];" for j in range(rank - b - k)]
        lines.append(f"r = select(x0(d), {_zero(kind)}, bad);")
        return rec.map([x, idx], out_shape, x.dtype, -1 if out_shape else 0, " ".join(lines), [slot], faults=True)
    u = _tensor_of(rec, updates, f"{layer.name}:updates")
    if u is None or b or u.dtype != x.dtype or tuple(u.shape) != (*idx.shape[:-1], *x.shape[k:]):
        return NotImplemented
    fold, helpers = _scatter_fold(layer, data, reduction, kind)
    rows = math.prod(idx.shape[:-1])
    if fold is None or len(u.shape) > MAX_RANK or (idx.size and not x.size):
        return NotImplemented
    if not rec.loops_fit(loop_passes(rows, k) * 16):
        return NotImplemented
    slot = rec.check_indices(dims) if idx.size else 0
    # Update row `row` of the (rows, k) index matrix: its coordinates in the indices' and updates' frames.
    lu = MAX_RANK - len(u.shape)
    lines = [f"var acc = x0(c); var e: Coords; var f: Coords; for (var row = 0u; row < {rows}u; row++) {{",
             "var rest = row; var hit = true;"]
    for j in range(q - 2, -1, -1):
        lines.append(f"e.c[{li + j}] = rest % {idx.shape[j]}u; f.c[{lu + j}] = rest % {idx.shape[j]}u; "
                     f"rest = rest / {idx.shape[j]}u;")
    for j in range(k):
        lines.append(f"e.c[5] = {j}u; {{ let v = checked_index(i32(x1(e)), {dims[j]}, pe(0u) + {2 * j}u); "
                     f"if (v != i32(c.c[{ld + j}])) {{ hit = false; }} }}")
    lines += [f"f.c[{lu + q - 1 + j}] = c.c[{ld + k + j}];" for j in range(rank - k)]
    lines.append(f"if (hit) {{ let v = x2(f); {fold} }} }} r = acc;")
    return rec.map([x, idx, u], x.shape, x.dtype, x.layout.axis, " ".join(lines), [slot], helpers=helpers,
                   faults=True)


@pixel("GatherND", 11)
def gather_nd(rec, layer, data, indices, *, batch_dims=0, **attrs):
    return _nd(rec, layer, data, indices, None, batch_dims)


@pixel("ScatterND", 11)
def scatter_nd(rec, layer, data, indices, updates, *, reduction="none", **attrs):
    return _nd(rec, layer, data, indices, updates, 0, reduction)


# -- cast ---------------------------------------------------------------------------------------------------------
# (source kind, target dtype) -> WGSL expression of `v` (bool lives as i32 0/1).
_CASTS = {
    ("f32", np.dtype(np.int32)): "f32_to_i32(v)", ("f32", np.dtype(np.int64)): "f32_to_i32(v)",
    ("f32", np.dtype(np.bool_)): "select(0, 1, v != 0.0)",
    ("i32", np.dtype(np.float32)): "f32(v)", ("i32", np.dtype(np.bool_)): "select(0, 1, v != 0)",
}


def _cast(rec, x, dtype):
    dtype = np.dtype(dtype) if dtype is not None else None
    src = getattr(x, "dtype", None)
    if src is None or dtype is None or texel_kind(src) is None or texel_kind(dtype) is None:
        return NotImplemented
    t = _tensor_of(rec, x)
    if t is None:
        return NotImplemented
    if src == dtype or (src in _INTS and dtype in _INTS) or (src == np.bool_ and dtype in _INTS):
        v = GTensor(t.alloc, t.shape, dtype, t.name, host=None if t.host is None else t.host.astype(dtype))
        v.layout = t.layout  # the same words: int32 <-> int64, bool (0/1) -> int
        return v
    if src == np.bool_ and dtype == np.float32:
        return unary(rec, t, "f32(v)", [], dtype)
    return unary(rec, t, _CASTS[(t.layout.kind, dtype)], [], dtype)


@pixel("Cast", 1, narrow_types=True)
def cast(rec, layer, x, *, to=None, **attrs):
    return narrow_cast(rec, x, cast_target(to), _cast)


@pixel("CastLike", 15, narrow_types=True)
def cast_like(rec, layer, x, target_type, **attrs):
    return narrow_cast(rec, x, getattr(target_type, "dtype", None), _cast)


# -- resize -------------------------------------------------------------------------------------------------------
def _resize(rec, layer, X, scales, sizes, roi, *, mode, ctm, nearest_mode, cubic_a=-0.75, exclude_outside=0,
            extrapolation_value=0.0, antialias=0, axes=None, policy="stretch"):
    """Resize from the CPU kernel's own tap tables (image_gpu.resize_tables), combined in its order (image.py,
    ONNX Runtime's): nearest copies its tap; linear ("corners") sums (w_inner * ... * w_outer) * x over the taps'
    tensor product from the first term; cubic ("passes") nests one sum from 0 per axis, adding x * w / divisor.
    Texel by texel where the blocked axis is not interpolated. Products that are added are rounded on their own
    (an XOR with a zero the compiler cannot see), so no driver contracts them into FMAs."""
    x = _tensor_of(rec, X)
    if x is None or antialias or mode not in ("nearest", "linear", "cubic") or not x.shape:
        return NotImplemented
    if mode != "nearest" and x.dtype != np.float32:
        return NotImplemented  # integer interpolation (ORT's fixed point, truncation) runs on the CPU
    out_shape, tables, _crop, combine = resize_tables(
        tuple(x.shape), scales, sizes, roi, mode=mode, ctm=ctm, nearest_mode=nearest_mode, cubic_a=cubic_a,
        exclude_outside=exclude_outside, axes=axes, policy=policy)
    extrap = storage_bits(np.asarray(extrapolation_value).astype(x.dtype), x.dtype)
    resized = [a for a, t in enumerate(tables) if t is not None]
    if not resized:
        return affine_copy(rec, x, out_shape, list(range(len(out_shape))), [0] * len(out_shape),
                           [1] * len(out_shape))
    words, offsets = [], []
    for a in resized:
        taps, weights, outside, divisors = tables[a]
        offsets.append(sum(w.size for w in words))
        # Per output index o: its taps, their weights, the outside flag and the divisor, as float32
        # (indices < 2^24).
        n = taps.shape[1]
        rows = np.concatenate([taps.astype(np.float32), weights, outside.astype(np.float32)[:, None],
                               divisors[:, None]], axis=1)
        words.append(rows.reshape(-1))
        if n > 64 or taps.max(initial=0) >= 1 << 24:
            return NotImplemented
    table = np.concatenate(words).astype(np.float32)
    tb = rec.upload(table, f"{layer.name}:taps", 0)
    rank = len(x.shape)
    lead = MAX_RANK - rank
    divides = any(np.any(tables[a][3] != 1) for a in resized)
    # Texel by texel needs no division: texels.wgsl has no math.wgsl (cubic with exclude_outside draws by element).
    texel = x.layout.axis not in resized and x.layout.kind == "f32" and not divides
    acc_type = "vec4<f32>" if texel else x.layout.kind
    zero = "vec4<f32>(0.0)" if texel else f"{acc_type}(0)"
    lines = ["var d = c; var outside = false; var first = true;"]
    for k, a in enumerate(resized):
        n = tables[a][0].shape[1]
        lines.append(f"let row{k} = {offsets[k]}u + c.c[{lead + a}] * {2 * n + 2}u; "
                     f"let div{k} = tab(row{k} + {2 * n + 1}u);")
        lines.append(f"if (tab(row{k} + {2 * n}u) != 0.0) {{ outside = true; }}")
    lines.append(f"var sum0 = {zero};")
    for k, a in enumerate(resized):
        n = tables[a][0].shape[1]
        if k and combine == "passes":
            lines.append(f"var sum{k} = {zero};")
        lines.append(f"for (var i{k} = 0u; i{k} < {n}u; i{k}++) {{")
        lines.append(f"d.c[{lead + a}] = u32(tab(row{k} + i{k})); let w{k} = tab(row{k} + {n}u + i{k});")
    last = len(resized) - 1
    if combine == "nearest":
        lines.append("sum0 = x0(d);" + "}" * len(resized))
    elif combine == "corners":
        weight = f"w{last}"
        for k in reversed(range(last)):
            weight = f"({weight} * w{k})"
        lines.append(f"let term = rz_round({weight} * x0(d)); sum0 = select(sum0 + term, term, first); first = false;")
        lines.append("}" * len(resized))
    else:
        lines.append(f"sum{last} = sum{last} + rz_term(x0(d), w{last}, div{last});")
        for k in reversed(range(last)):
            lines.append(f"}} sum{k} = sum{k} + rz_term(sum{k + 1}, w{k}, div{k});")
        lines.append("}")
    if not rec.loops_fit(loop_passes(*[tables[a][0].shape[1] for a in resized]) * 8):
        return NotImplemented  # each tap's addressing loops count too
    if texel:
        lines.append("out = select(sum0, vec4<f32>(bitcast<f32>(pe(0u))), outside);")
    else:
        lines.append(f"r = select(sum0, bitcast<{acc_type}>(pe(0u)), outside);")
    # The table is read lane by lane through its own accessor, whatever the draw's form (input 1: words 28-41).
    helpers = ["fn tab(i: u32) -> f32 { var e: Coords; e.c[5] = i; let at = locate(28u, e); "
               "return textureLoad(X1, at.xy, 0)[at.z]; }"]
    if combine != "nearest":
        value = "vec4<f32>" if texel else "f32"
        bits = "vec4<u32>" if texel else "u32"
        helpers.append(f"fn rz_round(v: {value}) -> {value} {{ return bitcast<{value}>(bitcast<{bits}>(v) ^ "
                       f"{bits}(opaque_zero())); }}")
        if texel:
            helpers.append("fn rz_term(v: vec4<f32>, w: f32, d: f32) -> vec4<f32> { return rz_round(v * w); }")
        else:
            helpers.append(f"fn rz_term(v: f32, w: f32, d: f32) -> f32 {{ let q = rz_round(v * w); "
                           f"if (d == 1.0) {{ return q; }} return {rec.ctx.division_function}(opaque_zero(), q, d); }}")
    draw = rec.texels if texel else rec.map
    return draw([x, tb], out_shape, x.dtype, x.layout.axis, "\n".join(lines), [extrap], helpers="\n".join(helpers))


@pixel("Resize", 10, host_inputs=(1,))
def resize_10(rec, layer, X, scales, *, mode="nearest", **attrs):
    return _resize(rec, layer, X, scales, None, None, mode=mode, ctm="asymmetric", nearest_mode="simple")


@pixel("Resize", 11, host_inputs=(1, 2, 3))
def resize(rec, layer, X, roi=None, scales=None, sizes=None, *, antialias=0, axes=None,
           coordinate_transformation_mode="half_pixel", cubic_coeff_a=-0.75, exclude_outside=0,
           extrapolation_value=0.0, keep_aspect_ratio_policy="stretch", mode="nearest",
           nearest_mode="round_prefer_floor", **attrs):
    return _resize(rec, layer, X, scales, sizes, roi, mode=mode, ctm=coordinate_transformation_mode,
                   nearest_mode=nearest_mode, cubic_a=cubic_coeff_a, exclude_outside=exclude_outside,
                   extrapolation_value=extrapolation_value, antialias=antialias, axes=axes,
                   policy=keep_aspect_ratio_policy)


@pixel("Upsample", 7)
def upsample_7(rec, layer, X, *, mode="nearest", scales=None, **attrs):
    if scales is None:
        return NotImplemented
    return resize_10(rec, layer, X, np.asarray(scales, dtype=np.float32), mode=mode)


@pixel("Upsample", 9, host_inputs=(1,))
def upsample_9(rec, layer, X, scales, *, mode="nearest", **attrs):
    return resize_10(rec, layer, X, scales, mode=mode)


__all__ = ["affine_copy", "pixel"]


# -- generators ---------------------------------------------------------------------------------------------------
@pixel("ConstantOfShape", 9, host_inputs=(0,))
def constant_of_shape(rec, layer, shape, *, value=None, **attrs):
    dims = _ints(shape)
    if any(d < 0 for d in dims) or len(dims) > MAX_RANK:
        return NotImplemented
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    if fill.size != 1 or texel_kind(fill.dtype) is None:
        return NotImplemented
    return _filled(rec, dims, fill.dtype, fill[0])


@pixel("EyeLike", 9)
def eye_like(rec, layer, x, *, dtype=None, k=0, **attrs):
    if len(x.shape) != 2:
        return NotImplemented
    out_dtype = np.dtype(x.dtype if dtype is None else ONNX_TO_NUMPY[dtype])
    kind = texel_kind(out_dtype)
    if kind is None:
        return NotImplemented
    body = f"r = select(bitcast<{kind}>(pe(2u)), bitcast<{kind}>(pe(1u)), i32(c.c[5]) - i32(c.c[4]) == pei(0u));"
    return rec.map([], x.shape, out_dtype, -1, body,
                   [int(k), storage_bits(1, out_dtype), storage_bits(0, out_dtype)])


@pixel("Range", 11, host_inputs=(0, 1, 2))
def range_(rec, layer, start, limit, delta, **attrs):
    dtype = np.asarray(start).dtype
    if texel_kind(dtype) is None or dtype == np.bool_:
        return NotImplemented
    s, lim, d = (np.asarray(v).reshape(()) for v in (start, limit, delta))
    if d == 0:
        return NotImplemented
    if dtype.kind == "i":
        count = max(-(-(int(lim) - int(s)) // int(d)), 0)
        last = int(s) + (count - 1) * int(d)
        if not all(-(2**31) <= v < 2**31 for v in (int(s), last, int(d))):
            return NotImplemented
        words, expr = [int(s), int(d)], "pei(0u) + i32(c.c[5]) * pei(1u)"
    else:
        count = max(math.ceil((float(lim) - float(s)) / float(d)), 0)
        if count >= 2**24:
            return NotImplemented  # the index would not be exact in f32
        # fma rounds start + i * delta once, as the CPU kernel's float64 sum rounded to float32.
        words, expr = [float(s), float(d)], "fma(f32(c.c[5]), pef(1u), pef(0u))"
    return rec.map([], [count], dtype, 0, f"r = {expr};", words)


@pixel("OneHot", 9, host_inputs=(1, 2))
def one_hot(rec, layer, indices, depth, values, *, axis=-1, **attrs):
    idx = _tensor_of(rec, indices, f"{layer.name}:indices")
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
    lines = ["var e: Coords;"]
    lines += [f"e.c[{li + j}] = c.c[{lo + j}];" for j in range(axis)]
    lines += [f"e.c[{li + j}] = c.c[{lo + j + 1}];" for j in range(axis, len(idx.shape))]
    # Negative indices count from the end; a float index is truncated, as the CPU kernel's astype.
    lines.append(f"var k = i32(x0(e)); if (k < 0) {{ k += {depth}; }}")
    lines.append(f"r = select(bitcast<{kind}>(pe(0u)), bitcast<{kind}>(pe(1u)), k == i32(c.c[{lo + axis}]));")
    return rec.map([idx], out_shape, values.dtype, -1, " ".join(lines),
                   [storage_bits(values[0], values.dtype), storage_bits(values[1], values.dtype)])


@pixel("Trilu", 14, host_inputs=(1,))
def trilu(rec, layer, data, k=None, *, upper=1, **attrs):
    x = _tensor_of(rec, data)
    if x is None or len(x.shape) < 2:
        return NotImplemented
    shift = 0 if k is None else _tensor.int_scalar(k)
    shift = min(max(shift, -(2**31) + 1), 2**31 - 1)  # beyond any matrix either way
    keep = "j - i >= pei(0u)" if upper else "j - i <= pei(0u)"
    body = f"let i = i32(c.c[4]); let j = i32(c.c[5]); r = select({x.layout.kind}(0), x0(c), {keep});"
    return rec.map([x], x.shape, x.dtype, x.layout.axis, body, [shift])


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
    kind = x.layout.kind
    lo, hi = ("p + 1u", f"{n}u") if reverse else ("0u", "p")
    if not exclusive:
        lo, hi = ("p", f"{n}u") if reverse else ("0u", "p + 1u")
    body = (f"let p = c.c[{frame}]; var acc = {kind}(0); var d = c; "
            f"for (var q = {lo}; q < {hi}; q++) {{ d.c[{frame}] = q; acc += x0(d); }} r = acc;")
    return rec.map([x], x.shape, x.dtype, x.layout.axis, body)
