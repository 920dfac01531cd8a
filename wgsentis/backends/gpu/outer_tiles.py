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
statistics) are bound whole, as the builder binds them. Each op's spec (``wgsentis.ops.spec``: ``tile_axis``,
``tiles_all_inputs``, ``tiles_channel_params``, ``tile_growth``, declared by its family) says through which leading
axis the layer's inputs and outputs are independent; this module keeps no per-op table.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from wgsentis.backends.gpu.placement import host_of
from wgsentis.backends.gpu.tensors import GTensor
from wgsentis.ops.spec import spec_of
from wgsentis.ops.tensor_spec import resize_sizes



def _facts(args: list[Any]) -> tuple[list[Any], list[Any]]:
    """The inputs as tile rules see them: their shapes (None for an omitted input) and host values (None where
    only the device holds one)."""
    return [None if a is None else tuple(np.shape(a)) for a in args], [host_of(a) for a in args]


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
    op = spec_of(layer.op_type, layer.domain)
    data = args[0] if args else None
    if op.tile_axis is None or not isinstance(data, GTensor) or data.alloc is None:
        return NotImplemented
    shapes, host = _facts(args)
    last = op.tile_axis(layer, shapes, host)
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
    if op.tiles_all_inputs and any(isinstance(a, GTensor | np.ndarray) and not s
                                            for a, s in zip(args, sliced, strict=True)):
        return NotImplemented
    widest = max([math.prod(a.shape[last + 1:]) for a, s in zip(args, sliced, strict=True) if s] +
                 [math.prod(shape[last + 1:])] * (layer.op_type == "Expand"))
    widest = math.ceil(widest * (1.0 if op.tile_growth is None else op.tile_growth(layer, shapes, host, last)))
    # A Resize given sizes and an Expand cut their target to each tile's (below): the two ops whose shape inputs
    # name the output's whole size rather than a rule over the input's.
    sizes = resize_sizes(host) if layer.op_type == "Resize" else None
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
                             _params(rec, op.tiles_channel_params, a, shape, axis, start, count)
                             for a, s in zip(args, sliced, strict=True)]
                if layer.op_type == "Expand":  # the tile's own target shape
                    tile_args[1] = np.array([*(1,) * axis, count, *shape[axis + 1:]], np.int64)
                elif sizes is not None:  # the tile's own sizes
                    tile_args[3] = np.array([*(1,) * axis, count, *sizes[axis + 1:]], np.int64)
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


def _params(rec: Any, channel_params: bool, arg: Any, shape: tuple[int, ...], axis: int, start: int,
            count: int) -> Any:
    """A whole input as the tile sees it: a per-channel parameter (of an op whose spec says it has them) sliced to
    a tile of channels (host constants sliced once per tile, device tensors copied), anything else as it is."""
    if not channel_params or axis != 1 or np.shape(arg) != (shape[1],):
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


__all__ = ["tiled_build"]
