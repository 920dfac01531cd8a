"""Tensor manipulation operators (numpy kernels): identity, shapes and views (Reshape, Flatten, Squeeze, Unsqueeze,
Transpose, Shape, Size), joins and splits (Concat, Split, Slice), broadcasting, tiling and padding (Expand, Tile, Pad,
CenterCropPad), scans (CumSum, CumProd) and layout rearrangements (DepthToSpace, SpaceToDepth, ReverseSequence,
Col2Im); and the axis, integer and index helpers every family shares (``normalized_axis``, ``normalized_axes``,
``int_list``, ``int_scalar``, ``check_indices``). The gathers, scatters and selections are indexing.py's; the
constants and other generators generators.py's. Their GPU programs are tensor_gpu.py's and tensor_pixel.py's.

Reshape, Flatten, Squeeze, Unsqueeze and Transpose return numpy views of their input wherever
numpy allows one; kernels never write into their inputs, so sharing memory is safe.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from wgsentis.errors import IndexOutOfRangeError
from wgsentis.ops.registry import register, register_flops

# -- shared helpers ---------------------------------------------------------------------------


def normalized_axis(axis: int, rank: int, what: str = "axis") -> int:
    """Normalize a possibly negative axis into [0, rank)."""
    axis = int(axis)
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"{what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def normalized_axes(axes, rank: int) -> list[int]:
    """Normalize a list of axes; duplicates are an error."""
    out = [normalized_axis(a, rank, "axes entry") for a in axes]
    if len(set(out)) != len(out):
        raise ValueError(f"axes {list(axes)} repeat an axis")
    return out


def int_list(value) -> list[int]:
    """A 0-d or 1-d integer tensor (or list) as a list of Python ints."""
    arr = np.asarray(value)
    if arr.dtype.kind not in "biuf":  # complex, strings, objects: never a shape, axis or count
        raise ValueError(f"expected integer values, got a {arr.dtype.name} tensor")
    flat = arr.reshape(-1).tolist()  # Python scalars in one call (a numpy scalar per element costs more)
    return flat if arr.dtype.kind in "iu" else [int(v) for v in flat]


def int_scalar(value) -> int:
    """A one-element input (a count, an axis, a shift) as a Python int; ValueError for any other size."""
    arr = np.asarray(value)
    if arr.size != 1:
        raise ValueError(f"expected a scalar, got shape {arr.shape}")
    return int(arr.reshape(-1)[0])


SMALL_INDEX_COUNT = 16  # indices up to this many are checked as Python ints (check_indices)


def check_indices(ctx, idx: np.ndarray, bound: int, what: str = "indices", negative_ok: bool = True) -> None:
    """Raise IndexOutOfRangeError, naming ``ctx``'s layer, unless every value of ``idx`` lies in [-bound, bound),
    or in [0, bound) when ``negative_ok`` is false (ops whose spec gives negative indices no meaning).
    It names the largest value past the end or, when none is, the smallest below the lowest valid one: the
    value the gpu-compute backend's fault slots report (wgsl/common/faults.wgsl), so both backends name the
    same one."""
    idx = np.asarray(idx)
    if not idx.size:
        return
    if idx.size <= SMALL_INDEX_COUNT:
        # A shape's Gather picks one or two dims: Python's max/min of a few ints cost less than two numpy
        # reductions, and pick the same values.
        values = idx.reshape(-1).tolist()
        bad = int(max(values))
        if bad < bound:
            bad = int(min(values))
            if bad >= (-bound if negative_ok else 0):
                return
        raise IndexOutOfRangeError(ctx.layer.name, ctx.layer.op_type, bad, bound, what, negative_ok)
    bad = int(idx.max())
    if bad < bound:
        bad = int(idx.min())
        if bad >= (-bound if negative_ok else 0):
            return
    raise IndexOutOfRangeError(ctx.layer.name, ctx.layer.op_type, bad, bound, what, negative_ok)


# -- identity ---------------------------------------------------------------------------------


@register("Identity", 1)
def identity(ctx, x):
    return x


# -- shapes and views -------------------------------------------------------------------------


def reshape_target(in_shape: tuple[int, ...], shape: list[int], allowzero: int) -> list[int]:
    """Resolve 0 (copy input dim unless allowzero) and -1 (inferred) in a Reshape target."""
    out = list(shape)
    # Most targets give every dim, or every dim but one -1 (a decoder's 57 reshapes a step): those resolve in a few
    # steps here; anything else, and every error, takes the general path below (same results, same messages).
    low = min(out, default=1)
    if low > 0 and math.prod(out) == math.prod(in_shape):
        return out
    if low == -1 and 0 not in out and out.count(-1) == 1:
        known = -math.prod(out)
        total = math.prod(in_shape)
        if known and not total % known:
            out[out.index(-1)] = total // known
            return out
    for i, d in enumerate(shape):
        if d == 0 and not allowzero:
            if i >= len(in_shape):
                raise ValueError(f"Reshape: 0 at position {i} but input has rank {len(in_shape)}")
            out[i] = in_shape[i]
        elif d < -1:
            raise ValueError(f"Reshape: invalid dimension {d}")
    unknown = [i for i, d in enumerate(out) if d == -1]
    total = math.prod(in_shape)
    if len(unknown) > 1:
        raise ValueError(f"Reshape: more than one -1 in {shape}")
    if unknown:
        known = math.prod(d for d in out if d != -1)
        if known == 0 or total % known:
            raise ValueError(f"Reshape: cannot infer -1 reshaping {in_shape} to {shape}")
        out[unknown[0]] = total // known
    if math.prod(out) != total:
        raise ValueError(f"Reshape: cannot reshape {in_shape} ({total} elements) to {out}")
    return out


@register("Reshape", 1)
def reshape_v1(ctx, data, *, shape=None, consumed_inputs=None):
    if shape is None:
        raise ValueError("Reshape-1 needs the 'shape' attribute")
    return data.reshape(reshape_target(data.shape, list(shape), 0))


def _cached_target(ctx, in_shape: tuple[int, ...], shape: np.ndarray, allowzero: int) -> Sequence[int]:
    """``reshape_target`` of a shape input whose value cannot change while it is the same object: a value the
    engine keeps read-only from run to run (its own copy: ``backends.shape_values.ShapeValues``) or a graph constant.
    The last target is kept per layer with the input it came from, so a decoder's 57 reshapes a token, whose
    targets are kept shape values, skip the parse on every run after the first."""
    cache = getattr(ctx, "cache", None)
    if cache is None:
        return reshape_target(in_shape, int_list(shape), allowzero)
    last = cache.get("reshape_target")
    if last is not None and last[0] is shape and last[1] == in_shape:
        return last[2]
    target = reshape_target(in_shape, int_list(shape), allowzero)
    constant_cache = getattr(ctx, "constant_cache", None)
    stable = ((isinstance(shape, np.ndarray) and shape.base is None and not shape.flags.writeable)
              or (constant_cache is not None and constant_cache(1) is not None))
    if stable:
        cache["reshape_target"] = (shape, in_shape, tuple(target))
    return target


@register("Reshape", 5)
def reshape_v5(ctx, data, shape):
    return data.reshape(_cached_target(ctx, data.shape, shape, 0))


@register("Reshape", 14)
def reshape(ctx, data, shape, *, allowzero=0):
    return data.reshape(_cached_target(ctx, data.shape, shape, allowzero))


@register("Flatten", 1)
def flatten(ctx, x, *, axis=1):
    rank = x.ndim
    if not -rank <= axis <= rank:
        raise ValueError(f"Flatten: axis {axis} out of range for rank {rank}")
    axis = axis + rank if axis < 0 else axis
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


def _squeeze(data: np.ndarray, axes) -> np.ndarray:
    if axes is None or len(axes) == 0:
        return data.reshape([d for d in data.shape if d != 1])
    axes = normalized_axes(axes, data.ndim)
    for a in axes:
        if data.shape[a] != 1:
            raise ValueError(f"Squeeze: axis {a} has size {data.shape[a]}, not 1")
    return data.reshape([d for i, d in enumerate(data.shape) if i not in axes])


@register("Squeeze", 1)
def squeeze_v1(ctx, data, *, axes=None):
    return _squeeze(data, axes)


@register("Squeeze", 13)
def squeeze(ctx, data, axes=None):
    return _squeeze(data, None if axes is None else int_list(axes))


def _unsqueeze(data: np.ndarray, axes) -> np.ndarray:
    rank = data.ndim + len(axes)
    axes = set(normalized_axes(axes, rank))
    dims = iter(data.shape)
    return data.reshape([1 if i in axes else next(dims) for i in range(rank)])


@register("Unsqueeze", 1)
def unsqueeze_v1(ctx, data, *, axes=None):
    if axes is None:
        raise ValueError("Unsqueeze needs the 'axes' attribute")
    return _unsqueeze(data, axes)


@register("Unsqueeze", 13)
def unsqueeze(ctx, data, axes):
    return _unsqueeze(data, int_list(axes))


@register("Transpose", 1)
def transpose(ctx, data, *, perm=None):
    if perm is None:
        return data.transpose()
    if sorted(perm) != list(range(data.ndim)):
        raise ValueError(f"Transpose: perm {perm} is not a permutation of rank {data.ndim}")
    return data.transpose(perm)


@register("Shape", 1)
def shape_v1(ctx, data):
    return np.array(np.shape(data), dtype=np.int64)


@register("Shape", 15)
def shape(ctx, data, *, start=0, end=None):
    dims = np.shape(data)
    rank = len(dims)
    # Out-of-range start/end are clamped, as Python slicing does.
    return np.array(dims[start:rank if end is None else end], dtype=np.int64)


@register("Size", 1)
def size(ctx, data):
    return np.array(np.size(data), dtype=np.int64)


# -- joining and splitting ------------------------------------------------------------------------


@register("Concat", 1)
def concat_v1(ctx, *inputs, axis=1):
    return concat(ctx, *inputs, axis=axis)


@register("Concat", 4)
def concat(ctx, *inputs, axis=None):
    if axis is None:
        raise ValueError("Concat needs the 'axis' attribute")
    if not inputs:
        raise ValueError("Concat needs at least one input")
    rank = np.ndim(inputs[0])
    return np.concatenate(inputs, axis=normalized_axis(axis, rank))


def split_request(opset: int, split_input: Any, split_attr: Any, num_outputs: Any,
                  outputs: int) -> tuple[list[int] | None, int]:
    """Split's one opset adapter, for every backend: (the part sizes asked for, None for equal parts; the number
    of parts). Split-1 takes the sizes as its second input or its ``split`` attribute, Split-2 as the attribute,
    Split-13 as the second input; Split-18 may give ``num_outputs`` instead (both: ValueError)."""
    if opset >= 18 and split_input is not None and num_outputs is not None:
        raise ValueError("Split: give either the 'split' input or 'num_outputs', not both")
    if opset < 2:
        sizes = int_list(split_input) if split_input is not None else split_attr
    elif opset < 13:
        sizes = split_attr
    else:
        sizes = None if split_input is None else int_list(split_input)
    count = outputs if num_outputs is None or opset < 18 else int(num_outputs)
    return (None if sizes is None else list(sizes)), count


def split_parts(dim: int, sizes: list[int] | None, count: int) -> list[int]:
    """Split's one shape rule: the part sizes along an axis of ``dim``, ``sizes`` checked, or ``count`` parts of
    ceil(dim / count) (the last ones shorter); ValueError where they cannot be."""
    if sizes is None:
        if count <= 0:
            raise ValueError("Split: number of outputs must be positive")
        chunk = -(-dim // count)  # ceil: the last chunk may be smaller
        sizes = [min(chunk, max(dim - i * chunk, 0)) for i in range(count)]
    if sum(sizes) != dim or any(s < 0 for s in sizes):
        raise ValueError(f"Split: sizes {sizes} do not add up to dimension {dim}")
    return list(sizes)


def _split(x: np.ndarray, axis: int, sizes: list[int] | None, count: int) -> tuple:
    axis = normalized_axis(axis, x.ndim)
    sizes = split_parts(x.shape[axis], sizes, count)
    bounds = list(itertools.accumulate(sizes, initial=0))  # Python ints: a numpy cumsum costs more on a few sizes
    index = [slice(None)] * x.ndim
    parts = []
    for start, stop in itertools.pairwise(bounds):
        index[axis] = slice(int(start), int(stop))
        parts.append(x[tuple(index)])
    return tuple(parts)


@register("Split", 1)
def split_v1(ctx, x, split_sizes=None, *, axis=0, split=None):
    return _split(x, axis, *split_request(1, split_sizes, split, None, ctx.num_outputs))


@register("Split", 2)
def split_v2(ctx, x, *, axis=0, split=None):
    return _split(x, axis, *split_request(2, None, split, None, ctx.num_outputs))


@register("Split", 13)
def split_v13(ctx, x, split=None, *, axis=0):
    return _split(x, axis, *split_request(13, split, None, None, ctx.num_outputs))


@register("Split", 18)
def split_v18(ctx, x, split=None, *, axis=0, num_outputs=None):
    return _split(x, axis, *split_request(18, split, None, num_outputs, ctx.num_outputs))


def _slice(data: np.ndarray, starts, ends, axes, steps) -> np.ndarray:
    """Basic slicing with ONNX clamping rules (always a numpy view)."""
    if axes is None:
        axes = list(range(len(starts)))
    axes = normalized_axes(axes, data.ndim)
    if steps is None:
        steps = [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ValueError("Slice: starts, ends, axes and steps must have the same length")
    index = [slice(None)] * data.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        dim = data.shape[axis]
        if step == 0:
            raise ValueError("Slice: step cannot be 0")
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if step > 0:
            start = min(max(start, 0), dim)
            end = min(max(end, 0), dim)
            index[axis] = slice(start, end, step)
        else:
            start = min(max(start, 0), dim - 1)
            end = min(max(end, -1), dim - 1)
            index[axis] = slice(start, None if end < 0 else end, step)
    return data[tuple(index)]


@register("Slice", 1)
def slice_v1(ctx, data, *, starts=None, ends=None, axes=None):
    if starts is None or ends is None:
        raise ValueError("Slice-1 needs 'starts' and 'ends'")
    return _slice(data, list(starts), list(ends), axes, None)


@register("Slice", 10)
def slice_(ctx, data, starts, ends, axes=None, steps=None):
    return _slice(data, int_list(starts), int_list(ends), None if axes is None else int_list(axes),
                  None if steps is None else int_list(steps))


# -- broadcasting, tiling, padding ----------------------------------------------------------------


@register("Expand", 8)
def expand(ctx, x, shape):
    dims = tuple(int_list(shape))
    if dims == x.shape:  # already that shape (a decoder's causal mask, every step): a copy, no broadcast machinery
        return x.copy()
    target = np.broadcast_shapes(x.shape, dims)
    return np.array(np.broadcast_to(x, target))


@register("Tile", 1)
def tile_v1(ctx, x, tiles, axis):
    reps = [1] * x.ndim
    reps[normalized_axis(int_scalar(axis), x.ndim)] = int_scalar(tiles)
    return np.tile(x, reps)


@register("Tile", 6)
def tile(ctx, x, repeats):
    reps = int_list(repeats)
    if len(reps) != x.ndim:
        raise ValueError(f"Tile: repeats has {len(reps)} entries for rank {x.ndim}")
    return np.tile(x, reps)


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


def _pad(data: np.ndarray, pads: list[int], mode: str, value, axes) -> np.ndarray:
    rank = data.ndim
    axes = list(range(rank)) if axes is None else normalized_axes(axes, rank)
    if len(pads) != 2 * len(axes):
        raise ValueError(f"Pad: {len(pads)} pads for {len(axes)} axes")
    if mode not in _PAD_MODES:
        raise ValueError(f"Pad: unknown mode '{mode}'")
    begin = [0] * rank
    end = [0] * rank
    for i, a in enumerate(axes):
        begin[a] = pads[i]
        end[a] = pads[i + len(axes)]
    # Negative pads crop: slice them off first, then pad with the non-negative remainder.
    if any(p < 0 for p in begin + end):
        index = tuple(slice(-b if b < 0 else 0, (d + e) if e < 0 else d)
                      for b, e, d in zip(begin, end, data.shape, strict=True))
        data = data[index]
    width = [(max(b, 0), max(e, 0)) for b, e in zip(begin, end, strict=True)]
    if not any(b or e for b, e in width):
        return data.copy()
    if mode == "constant":
        fill = np.asarray(0 if value is None else value).reshape(-1)
        fill_value = fill[0] if fill.size else 0
        if data.dtype == object:
            fill_value = fill_value if value is not None else ""
            return np.pad(data, width, mode="constant", constant_values=fill_value)
        return np.pad(data, width, mode="constant", constant_values=np.asarray(fill_value).astype(data.dtype))
    for a, (b, e) in enumerate(width):
        if (b or e) and data.shape[a] == 0:
            raise ValueError(f"Pad: mode '{mode}' cannot pad empty axis {a}")
    return np.pad(data, width, mode=_PAD_MODES[mode])


def pad_request(opset: int, pads: Any, value: Any, axes: Any) -> tuple[list[int], Any, list[int] | None]:
    """Pad's one opset adapter, for every backend: (the pads, the constant value, the axes or None). Pad-1 and
    Pad-2 take the pads (``paddings`` at 1) and ``value`` as attributes; from 11 they are inputs 1 and 2, and from
    18 input 3 names the axes. ValueError where the pads are missing."""
    if pads is None:
        raise ValueError("Pad-1 needs 'paddings'" if opset < 2 else "Pad-2 needs 'pads'")
    return int_list(pads), value, None if axes is None else int_list(axes)


@register("Pad", 1)
def pad_v1(ctx, data, *, mode="constant", paddings=None, value=0.0):
    return _pad(data, *_with_mode(pad_request(1, paddings, value, None), mode))


@register("Pad", 2)
def pad_v2(ctx, data, *, mode="constant", pads=None, value=0.0):
    return _pad(data, *_with_mode(pad_request(2, pads, value, None), mode))


@register("Pad", 11)
def pad_v11(ctx, data, pads, constant_value=None, *, mode="constant"):
    return _pad(data, *_with_mode(pad_request(11, pads, constant_value, None), mode))


@register("Pad", 18)
def pad(ctx, data, pads, constant_value=None, axes=None, *, mode="constant"):
    return _pad(data, *_with_mode(pad_request(18, pads, constant_value, axes), mode))


def _with_mode(request: tuple[list[int], Any, list[int] | None], mode: str) -> tuple:
    """(pads, mode, value, axes): _pad's argument order."""
    pads, value, axes = request
    return pads, mode, value, axes


@register("CenterCropPad", 18)
def center_crop_pad(ctx, input_data, shape, *, axes=None):
    """Crop (window start rounded down) or zero-pad (extra pixel on the right) each axis to ``shape``."""
    rank = input_data.ndim
    axes = list(range(rank)) if axes is None else normalized_axes(axes, rank)
    target = int_list(shape)
    if len(target) != len(axes):
        raise ValueError(f"CenterCropPad: {len(target)} sizes for {len(axes)} axes")
    src = [slice(None)] * rank
    dst = [slice(None)] * rank
    out_shape = list(input_data.shape)
    for a, size in zip(axes, target, strict=True):
        dim = input_data.shape[a]
        out_shape[a] = size
        if size < dim:
            start = (dim - size) // 2
            src[a] = slice(start, start + size)
        elif size > dim:
            start = (size - dim) // 2
            dst[a] = slice(start, start + dim)
    out = np.zeros(out_shape, dtype=input_data.dtype)
    out[tuple(dst)] = input_data[tuple(src)]
    return out


# -- scans --------------------------------------------------------------------------------------


def _cumulative(x: np.ndarray, axis, exclusive: int, reverse: int, op: np.ufunc,
                identity_value) -> np.ndarray:
    axis = normalized_axis(int_scalar(axis), x.ndim)
    data = np.flip(x, axis) if reverse else x
    out = op.accumulate(data, axis=axis, dtype=x.dtype)
    if exclusive:
        first = [slice(None)] * x.ndim
        first[axis] = slice(0, 1)
        head = np.full_like(out[tuple(first)], identity_value)
        rest = [slice(None)] * x.ndim
        rest[axis] = slice(0, -1)
        out = np.concatenate([head, out[tuple(rest)]], axis=axis)
    return np.ascontiguousarray(np.flip(out, axis)) if reverse else out


@register("CumSum", 11)
def cum_sum(ctx, x, axis, *, exclusive=0, reverse=0):
    return _cumulative(x, axis, exclusive, reverse, np.add, 0)


@register("CumProd", 26)
def cum_prod(ctx, x, axis, *, exclusive=0, reverse=0):
    return _cumulative(x, axis, exclusive, reverse, np.multiply, 1)


# -- layout rearrangements ------------------------------------------------------------------------


@register("DepthToSpace", 1)
def depth_to_space_v1(ctx, x, *, blocksize=None):
    return depth_to_space(ctx, x, blocksize=blocksize)


@register("DepthToSpace", 11)
def depth_to_space(ctx, x, *, blocksize=None, mode="DCR"):
    if blocksize is None or x.ndim != 4:
        raise ValueError("DepthToSpace needs a 4-D input and 'blocksize'")
    b, c, h, w = x.shape  # (N, C, H, W)
    bs = blocksize
    if c % (bs * bs):
        raise ValueError(f"DepthToSpace: channels {c} not divisible by blocksize^2 {bs * bs}")
    if mode == "DCR":
        tmp = x.reshape(b, bs, bs, c // (bs * bs), h, w).transpose(0, 3, 4, 1, 5, 2)
    elif mode == "CRD":
        tmp = x.reshape(b, c // (bs * bs), bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
    else:
        raise ValueError(f"DepthToSpace: unknown mode '{mode}'")
    return tmp.reshape(b, c // (bs * bs), h * bs, w * bs)


@register("SpaceToDepth", 1)
def space_to_depth_v1(ctx, x, *, blocksize=None):
    return space_to_depth(ctx, x, blocksize=blocksize)


@register("SpaceToDepth", 28)
def space_to_depth(ctx, x, *, blocksize=None, mode="DCR"):
    if blocksize is None or x.ndim != 4:
        raise ValueError("SpaceToDepth needs a 4-D input and 'blocksize'")
    b, c, h, w = x.shape  # (N, C, H, W)
    bs = blocksize
    if h % bs or w % bs:
        raise ValueError(f"SpaceToDepth: spatial size {h}x{w} not divisible by blocksize {bs}")
    tmp = x.reshape(b, c, h // bs, bs, w // bs, bs)
    if mode == "DCR":
        tmp = tmp.transpose(0, 3, 5, 1, 2, 4)
    elif mode == "CRD":
        tmp = tmp.transpose(0, 1, 3, 5, 2, 4)
    else:
        raise ValueError(f"SpaceToDepth: unknown mode '{mode}'")
    return tmp.reshape(b, c * bs * bs, h // bs, w // bs)


@register("ReverseSequence", 10)
def reverse_sequence(ctx, x, sequence_lens, *, batch_axis=1, time_axis=0):
    batch_axis, time_axis = normalized_axis(batch_axis, x.ndim), normalized_axis(time_axis, x.ndim)
    if batch_axis == time_axis:
        raise ValueError("ReverseSequence: batch_axis and time_axis must differ")
    lens = int_list(sequence_lens)
    out = x.copy()
    for b, n in enumerate(lens):
        if not 0 <= n <= x.shape[time_axis]:
            raise ValueError(f"ReverseSequence: sequence length {n} out of range")
        src = [slice(None)] * x.ndim
        src[batch_axis] = b
        src[time_axis] = slice(0, n)
        out[tuple(src)] = np.flip(x[tuple(src)], axis=time_axis - (batch_axis < time_axis))
    return out


@register("Col2Im", 18)
def col2im(ctx, x, image_shape, block_shape, *, dilations=None, pads=None, strides=None):
    """Sum sliding blocks (N, C*prod(block), L) back into an image (N, C, *image_shape)."""
    image = int_list(image_shape)
    block = int_list(block_shape)
    nd = len(image)
    dil = list(dilations) if dilations else [1] * nd
    stride = list(strides) if strides else [1] * nd
    pad = list(pads) if pads else [0] * (2 * nd)
    n, cols, length = x.shape
    kernel_size = math.prod(block)
    if cols % kernel_size:
        raise ValueError(f"Col2Im: input dim 1 ({cols}) not divisible by block size {kernel_size}")
    channels = cols // kernel_size
    padded = [image[d] + pad[d] + pad[d + nd] for d in range(nd)]
    counts = [(padded[d] - dil[d] * (block[d] - 1) - 1) // stride[d] + 1 for d in range(nd)]
    if math.prod(counts) != length:
        raise ValueError(f"Col2Im: {length} blocks given, the geometry implies {math.prod(counts)}")
    cols_view = x.reshape(n, channels, *block, *counts)  # (N, C, *block, *blocks)
    out = np.zeros((n, channels, *padded), dtype=x.dtype)
    for offset in np.ndindex(*block):
        window = tuple(slice(o * dl, o * dl + st * (c - 1) + 1, st)
                       for o, dl, st, c in zip(offset, dil, stride, counts, strict=True))
        out[(slice(None), slice(None), *window)] += cols_view[(slice(None), slice(None), *offset)]
    crop = tuple(slice(pad[d], pad[d] + image[d]) for d in range(nd))
    return out[(slice(None), slice(None), *crop)]


@register_flops("Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Shape", "Size", "Concat",
                "Split", "Slice", "Expand", "Tile", "Pad", "CenterCropPad", "DepthToSpace", "SpaceToDepth",
                "ReverseSequence")
def data_movement_flops(layer, in_shapes, out_shapes) -> int:
    """0: these ops only move data, they do no arithmetic."""
    return 0


@register_flops("CumSum", "CumProd", "Col2Im")
def accumulate_flops(layer, in_shapes, out_shapes) -> int:
    """One add (or multiply) per accumulated element: CumSum/CumProd and Col2Im count their input elements."""
    shape = in_shapes[0] if in_shapes else None
    return math.prod(shape) if shape is not None else 0
