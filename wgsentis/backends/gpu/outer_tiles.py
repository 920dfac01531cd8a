"""Layers whose tensors pass the storage binding limit, run in tiles along their leading axes (gpu-compute).

A dispatch binds each tensor whole (or a window of it), and a binding is limited (128 MiB on lavapipe and by
WebGPU's default). Convolutions, elementwise ops and MatMul/Gemm tile themselves (conv_gpu, elementwise_gpu,
matmul_gpu). For the other ops whose leading axes are independent (a Softmax over its last axis is a Softmax of
each row; a pool, of each image and channel), ``tiled_build`` runs the layer's own builder once per tile: the tile
is a range along one leading axis ``s`` with every axis before it fixed to one index, so that it is one contiguous
run of every tensor that carries those axes and keeps their rank (the op's attributes still apply as they are).
Each sliced input's run is copied into a staging tensor (a transfer copy: copies are not bound), the builder
records the tile's program on the staging tensors, and its outputs' runs are copied into the layer's outputs.
Inputs that do not carry the leading axes (a LayerNormalization's scale, a Gather's indices, a BatchNormalization's
statistics) are bound whole, as the builder binds them. ``RULES`` says, per op, through which leading axis the
layer's inputs and outputs are independent.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from wgsentis.backends.gpu.placement import host_of
from wgsentis.backends.gpu.tensors import GTensor

_REDUCES = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
            "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")


def _axis(value: Any, rank: int) -> int | None:
    value = int(value)
    return value + rank if -rank <= value < 0 else (value if 0 <= value < rank else None)


def _before(axis: Any, rank: int) -> int | None:
    """The last leading axis before ``axis``: None when ``axis`` is the first (nothing leads it) or invalid."""
    a = _axis(axis, rank)
    return None if a is None or a == 0 else a - 1


def _axis_attribute(default: int) -> Callable[[Any, list[Any]], int | None]:
    """The rule of an op along the axis its ``axis`` attribute names (``default`` when absent): the axes before it
    lead."""
    return lambda layer, args: _before(layer.attrs.get("axis", default), len(args[0].shape))


def _softmax(layer, args) -> int | None:
    return _axis_attribute(-1 if layer.opset >= 13 else 1)(layer, args)


def _reduce(layer, args) -> int | None:
    rank = len(args[0].shape)
    axes = layer.attrs.get("axes")
    if axes is None and len(args) > 1 and args[1] is not None:
        axes = host_of(args[1])
    if axes is None or len(np.asarray(axes).reshape(-1)) == 0:
        return None  # every axis reduced (noop_with_empty_axes aside): nothing leads
    first = min(_axis(a, rank) if _axis(a, rank) is not None else -1 for a in np.asarray(axes).reshape(-1))
    return None if first <= 0 else first - 1


def _transpose(layer, args) -> int | None:
    perm = layer.attrs.get("perm")
    if perm is None:
        return None
    fixed = -1
    for i, p in enumerate(perm):
        if int(p) != i:
            break
        fixed = i
    return None if fixed < 0 else fixed


def _resize_sizes(args: list[Any]) -> np.ndarray | None:
    """A Resize's host-known target sizes (input 3), or None (scales instead, or computed on the device)."""
    sizes = host_of(args[3]) if len(args) > 3 else None
    if sizes is None or np.size(sizes) == 0:
        return None
    return np.asarray(sizes).reshape(-1)


def _resize_ratios(layer, args) -> np.ndarray | None:
    """Output over input size per axis of a Resize (opset 11+, no ``axes``): its scales, or its sizes' ratios."""
    if len(args) < 3 or layer.attrs.get("axes") is not None:
        return None
    sizes = _resize_sizes(args)
    if sizes is not None:
        return sizes / np.maximum(np.asarray(args[0].shape, np.float64), 1)
    scales = host_of(args[2])
    if scales is None or np.size(scales) == 0:
        return None
    return np.asarray(scales, np.float64).reshape(-1)


def _resize(layer, args) -> int | None:
    """Leading axes the Resize keeps (ratio 1, by scales or by sizes: each tile then gets its own sizes)."""
    ratios = _resize_ratios(layer, args)
    if ratios is None:
        return None
    kept = -1
    for i, r in enumerate(ratios):
        if r != 1:
            break
        kept = i
    return None if kept < 0 else min(kept, 1)


def _images_and_channels(layer, args) -> int | None:
    return 1  # each image and channel apart (per-channel parameters sliced with the channels: _params)


def _images(layer, args) -> int | None:
    return 0  # images apart


def _cumsum(layer, args) -> int | None:
    """CumSum runs along the axis its second input holds."""
    axis = host_of(args[1]) if len(args) > 1 else None
    return None if axis is None else _before(int(np.asarray(axis).reshape(-1)[0]), len(args[0].shape))


def _slice(layer, args) -> int | None:
    """Leading axes the Slice (opset 10+: starts, ends, axes, steps inputs) keeps whole."""
    if len(args) < 3:
        return None
    host = [host_of(a) for a in args[1:5]]
    if host[0] is None or host[1] is None or any(h is None and a is not None for h, a in zip(host, args[1:5],
                                                                                           strict=True)):
        return None  # (a starts, ends, axes or steps known only on the device: what the Slice cuts is unknown)
    rank = len(args[0].shape)
    starts, ends = np.asarray(host[0]).reshape(-1), np.asarray(host[1]).reshape(-1)
    axes = np.arange(starts.size) if len(host) < 3 or host[2] is None else np.asarray(host[2]).reshape(-1)
    steps = np.ones(starts.size, np.int64) if len(host) < 4 or host[3] is None else np.asarray(host[3]).reshape(-1)
    cut = []
    for a, b, e, st in zip(axes, starts, ends, steps, strict=False):
        axis = _axis(a, rank)
        if axis is None:
            return None
        dim = args[0].shape[axis]
        whole = st == 1 and (b == 0 or b <= -dim) and e >= dim
        if not whole:
            cut.append(axis)
    return _before(min(cut), rank) if cut else rank - 1


RULES: dict[str, Callable[[Any, list[Any]], int | None]] = {
    "Softmax": _softmax, "LogSoftmax": _softmax, "Hardmax": _softmax,
    "LayerNormalization": _axis_attribute(-1), "TopK": _axis_attribute(-1),
    **dict.fromkeys(("ArgMax", "ArgMin", "Gather", "GatherElements", "ScatterElements", "Split"), _axis_attribute(0)),
    **dict.fromkeys(_REDUCES, _reduce),
    "Transpose": _transpose, "Resize": _resize, "Slice": _slice, "CumSum": _cumsum,
    **dict.fromkeys(("MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool",
                     "BatchNormalization", "InstanceNormalization"), _images_and_channels),
    **dict.fromkeys(("LRN", "DepthToSpace", "SpaceToDepth"), _images),
    "Expand": lambda layer, args: 64,  # every axis of its output (cut to its rank)
}
# Ops whose every device input must carry the leading axes (their indices and updates are shaped as the data's
# along them): a tile of the data with a whole indices tensor would pair the wrong elements.
_ALL_SLICED = ("GatherElements", "ScatterElements")
# Ops whose 1-D inputs of the channel count are per-channel parameters: sliced with a tile of channels.
_CHANNEL_PARAMS = ("BatchNormalization", "InstanceNormalization")


def _growth(layer: Any, args: list[Any], last: int) -> float:
    """How many times wider than its input row a tile's output row is (a Resize's upscale, a Gather's indices
    against its axis), so that the tile is sized by the wider."""
    if layer.op_type == "Resize":
        ratios = _resize_ratios(layer, args)
        return 1.0 if ratios is None else max(1.0, float(np.prod(ratios[last + 1:])))
    if layer.op_type == "Gather" and len(args) > 1 and args[1] is not None:
        axis = _axis(layer.attrs.get("axis", 0), len(args[0].shape))
        return max(1.0, math.prod(np.shape(args[1])) / max(1, args[0].shape[axis]))
    return 1.0


def _sliced(arg: Any, lead: tuple[int, ...], rank: int) -> bool:
    """Whether an input carries the leading axes (and is tiled with them) rather than being bound whole: a device
    tensor, or a host array (a constant's tile is sliced on the host), of the data's rank (a lower-rank one, such
    as a LayerNormalization's scale, lines up with the trailing axes) and its sizes along them."""
    if isinstance(arg, GTensor) and arg.alloc is None:
        return False
    return isinstance(arg, GTensor | np.ndarray) and len(arg.shape) == rank and tuple(arg.shape[:len(lead)]) == lead


def tiled_build(rec: Any, layer: Any, build: Callable[..., Any], args: list[Any]) -> Any:
    """The layer's outputs built tile by tile (see the module docstring), or NotImplemented where its op has no
    rule, no tile fits the binding limit, or its builder declines a tile."""
    rule = RULES.get(layer.op_type)
    data = args[0] if args else None
    if rule is None or not isinstance(data, GTensor) or data.alloc is None:
        return NotImplemented
    last = rule(layer, args)
    if last is None:
        return NotImplemented
    # The shape the tiles cut: the data's, or an Expand's output (its data tiled where it is not broadcast).
    shape = _expanded(args) if layer.op_type == "Expand" else tuple(data.shape)
    if shape is None:
        return NotImplemented
    last = min(last, len(shape) - 1)
    if layer.op_type == "Expand":
        # The data, of the output's rank, is tiled along the leading axes it has whole, or bound whole where it
        # is broadcast along all of them: the leading axes are the longest run of either kind.
        aligned = (1,) * (len(shape) - len(data.shape)) + tuple(data.shape)
        args = [rec.view(data, aligned), *args[1:]]
        same = next((i for i in range(len(shape)) if aligned[i] != shape[i]), len(shape)) - 1
        ones = next((i for i in range(len(shape)) if aligned[i] != 1), len(shape)) - 1
        last = min(last, max(same, ones))
        if last < 0:
            return NotImplemented
    limit = rec.ctx.max_binding // 16 * 16
    sliced = [_sliced(a, shape[:last + 1], len(shape)) for a in args]
    if layer.op_type == "Expand":
        sliced[1:] = [False] * (len(args) - 1)  # the target shape: each tile's own (_params)
    if not any(sliced):
        sliced = [False] * len(args)  # (an Expand of a broadcast row: every tile reads all of it)
    if layer.op_type in _ALL_SLICED and any(isinstance(a, GTensor | np.ndarray) and not s
                                            for a, s in zip(args, sliced, strict=True)):
        return NotImplemented
    widest = max([math.prod(a.shape[last + 1:]) for a, s in zip(args, sliced, strict=True) if s] +
                 [math.prod(shape[last + 1:])] * (layer.op_type == "Expand"))
    widest = math.ceil(widest * _growth(layer, args, last))
    resize_sizes = _resize_sizes(args) if layer.op_type == "Resize" else None
    # The tile axis s: the outermost leading axis one index of which fits (every device element is a 4-byte word).
    axis = next((s for s in range(last + 1) if 4 * widest * math.prod(shape[s + 1:last + 1]) <= limit), None)
    if axis is None:
        return NotImplemented
    row = widest * math.prod(shape[axis + 1:last + 1])  # elements of one index along the tile axis
    per = max(1, limit // (4 * row))
    prefixes = math.prod(shape[:axis])
    outputs: list[GTensor] | None = None
    try:
        for prefix in range(prefixes):
            for start in range(0, shape[axis], per):
                count = min(per, shape[axis] - start)
                rec.begin_tile()
                tile_args = [_stage_in(rec, a, axis, prefix, start, count) if s else
                             _params(rec, layer, a, shape, axis, start, count)
                             for a, s in zip(args, sliced, strict=True)]
                if layer.op_type == "Expand":  # the tile's own target shape
                    tile_args[1] = np.array([*(1,) * axis, count, *shape[axis + 1:]], np.int64)
                elif resize_sizes is not None:  # the tile's own sizes
                    tile_args[3] = np.array([*(1,) * axis, count, *resize_sizes[axis + 1:]], np.int64)
                result = build(rec, layer, *tile_args, **layer.attrs)
                if result is NotImplemented:
                    return NotImplemented
                parts = list(result) if isinstance(result, tuple) else [result]
                if not all(isinstance(p, GTensor) and p.alloc is not None
                           and tuple(p.shape[:axis + 1]) == (*(1,) * axis, count) for p in parts):
                    return NotImplemented
                if outputs is None:
                    # Made outside the tiles: a later tile's temporaries must not be handed the layer's outputs.
                    rec.end_tiles()
                    outputs = [rec.alloc((*shape[:axis + 1], *p.shape[axis + 1:]), p.dtype) for p in parts]
                for part, out in zip(parts, outputs, strict=True):
                    inner = math.prod(part.shape[axis + 1:])
                    rec.copy(part, 0, out, (prefix * shape[axis] + start) * inner, count * inner)
    finally:
        rec.end_tiles()
    if outputs is None:
        return NotImplemented
    return tuple(outputs) if len(outputs) > 1 else outputs[0]


def _expanded(args: list[Any]) -> tuple[int, ...] | None:
    """An Expand's output shape, from its host-known target shape; None where that is not known or invalid."""
    target = host_of(args[1]) if len(args) > 1 else None
    if target is None:
        return None
    try:
        return tuple(int(d) for d in np.broadcast_shapes(tuple(args[0].shape),
                                                          tuple(int(v) for v in np.asarray(target).reshape(-1))))
    except ValueError:
        return None


def _params(rec: Any, layer: Any, arg: Any, shape: tuple[int, ...], axis: int, start: int, count: int) -> Any:
    """A whole input as the tile sees it: a per-channel parameter sliced to a tile of channels (host constants
    sliced once per tile, device tensors copied), anything else as it is."""
    if layer.op_type not in _CHANNEL_PARAMS or axis != 1 or np.shape(arg) != (shape[1],):
        return arg
    if isinstance(arg, GTensor) and arg.host is None:
        return _stage_in(rec, arg, 0, 0, start, count)
    host = arg.host if isinstance(arg, GTensor) else np.asarray(arg)
    return rec.derived(("channel_tile", start, count), (host,), lambda: host[start:start + count].copy())


def _stage_in(rec: Any, t: Any, axis: int, prefix: int, start: int, count: int) -> Any:
    """A staging copy of the tile's run of ``t``: index ``prefix`` of its axes before ``axis`` (flattened),
    ``count`` indices from ``start`` along ``axis``; shaped (1, ..., 1, count, *t.shape[axis + 1:]). A host array's
    run is sliced on the host, once per program."""
    tile_shape = (*(1,) * axis, count, *t.shape[axis + 1:])
    if isinstance(t, np.ndarray):
        rows = t.reshape(math.prod(t.shape[:axis]), t.shape[axis], -1)
        return rec.derived(("outer_tile", prefix, start, count), (t,),
                           lambda: np.ascontiguousarray(rows[prefix, start:start + count]).reshape(tile_shape))
    inner = math.prod(t.shape[axis + 1:])
    stage = rec.alloc(tile_shape, t.dtype)
    rec.copy(t, (prefix * t.shape[axis] + start) * inner, stage, 0, count * inner)
    return stage


__all__ = ["RULES", "tiled_build"]
