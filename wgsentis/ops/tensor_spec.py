"""Facets of the tensor family's ops (views, joins, movements, Resize): the size rules of the ops that grow a tensor by
its shape inputs (Expand, Tile, Pad, CenterCropPad, Resize, Upsample, Col2Im, MaxUnpool), the leading axes gpu-compute
tiles them along, and which inputs' values they pass on.

Each rule is ``fn(layer, args) -> [(shape, nbytes, detail)]`` (``wgsentis.ops.spec.SizeRule``); the memory budget
(``wgsentis.budget``) reads them from the ops' specs."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from wgsentis.ops import spec
from wgsentis.ops.conv import spatial_attrs
from wgsentis.ops.resize import resize_geometry
from wgsentis.ops.spec import (
    ALL_INPUTS,
    Output,
    before_axis_attribute,
    describe,
    images,
    leading_before,
    size_rule,
    tile_rule,
    valid_axis,
)


# -- shape-driven growth -----------------------------------------------------------------------------


@size_rule("Expand")
def _expand(layer: Any, args: list[Any]) -> list[Output]:
    return [spec.out(spec.broadcast(spec.shape_of(args[0]), tuple(spec.ints(args[1]))), spec.itemsize_of(args[0]))]


@size_rule("Tile")
def _tile(layer: Any, args: list[Any]) -> list[Output]:
    shape = list(spec.shape_of(args[0]))
    repeats = spec.ints(args[1])  # (Tile-1's tiles and axis: through its opset adapter, below)
    if len(repeats) != len(shape):
        raise ValueError("repeats do not match the rank")
    shape = [d * r for d, r in zip(shape, repeats, strict=True)]
    return [spec.out(shape, spec.itemsize_of(args[0]))]


@size_rule("Pad")
def _pad(layer: Any, args: list[Any]) -> list[Output]:
    shape = list(spec.shape_of(args[0]))
    pads = spec.ints(args[1])  # (Pad-1 and Pad-2's attributes: through their opset adapters, below)
    axes_arg = spec.arg(args, 3)
    rank = len(shape)
    axes = list(range(rank)) if axes_arg is None else [spec.axis_of(a, rank) for a in spec.ints(axes_arg)]
    if len(pads) != 2 * len(axes):
        raise ValueError("pads do not match the axes")
    for i, a in enumerate(axes):
        shape[a] += pads[i] + pads[i + len(axes)]
    return [spec.out(shape, spec.itemsize_of(args[0]))]


@size_rule("CenterCropPad")
def _center_crop_pad(layer: Any, args: list[Any]) -> list[Output]:
    shape = list(spec.shape_of(args[0]))
    axes = layer.attrs.get("axes")
    axes = list(range(len(shape))) if axes is None else [spec.axis_of(a, len(shape)) for a in axes]
    target = spec.ints(args[1])
    if len(target) != len(axes):
        raise ValueError("shape does not match the axes")
    for a, size in zip(axes, target, strict=True):
        shape[a] = size
    return [spec.out(shape, spec.itemsize_of(args[0]))]


@size_rule("Resize")
def _resize(layer: Any, args: list[Any]) -> list[Output]:
    shape = spec.shape_of(args[0])
    if layer.opset < 11:  # Resize-10: (X, scales)
        scales, sizes, axes, policy = spec.host(args[1]), None, None, "stretch"
    else:
        scales = None if spec.arg(args, 2) is None else spec.host(args[2])
        sizes = None if spec.arg(args, 3) is None else spec.host(args[3])
        axes, policy = layer.attrs.get("axes"), layer.attrs.get("keep_aspect_ratio_policy", "stretch")
    _, _, out_of, _, _ = resize_geometry(shape, scales, sizes, None, axes, policy)
    return [spec.out([out_of[i] for i in range(len(shape))], spec.itemsize_of(args[0]))]


@size_rule("Upsample")
def _upsample(layer: Any, args: list[Any]) -> list[Output]:
    shape = spec.shape_of(args[0])
    scales = spec.host(args[1])  # (Upsample-7's attribute: through its opset adapter, below)
    with np.errstate(over="ignore"):  # as the kernel: float32 scales (an overflow is its error to report)
        scales = np.asarray(scales, dtype=np.float32)
    _, _, out_of, _, _ = resize_geometry(shape, scales, None, None, None, "stretch")
    return [spec.out([out_of[i] for i in range(len(shape))], spec.itemsize_of(args[0]))]


@size_rule("Col2Im")
def _col2im(layer: Any, args: list[Any]) -> list[Output]:
    n, cols, _ = spec.shape_of(args[0])
    image, block = spec.ints(args[1]), spec.ints(args[2])
    nd = len(image)
    pads = [int(p) for p in (layer.attrs.get("pads") or [0] * (2 * nd))]
    channels = cols // math.prod(block)
    outputs = [spec.out((n, channels, *image), spec.itemsize_of(args[0]))]
    if any(pads):
        padded = [image[d] + pads[d] + pads[d + nd] for d in range(nd)]
        outputs.append(spec.out((n, channels, *padded), spec.itemsize_of(args[0]), "the padded image it sums into"))
    return outputs


@size_rule("MaxUnpool")
def _max_unpool(layer: Any, args: list[Any]) -> list[Output]:
    shape = spec.shape_of(args[0])
    nd = len(shape) - 2
    kernel = [int(k) for k in layer.attrs["kernel_shape"]]
    strides, _, pads = spatial_attrs(nd, kernel, layer.attrs.get("strides"), None, layer.attrs.get("pads"))
    inferred = [*shape[:2], *((shape[2 + i] - 1) * strides[i] - pads[i] - pads[nd + i] + kernel[i]
                              for i in range(nd))]
    if spec.arg(args, 2) is None:
        return [spec.out(inferred, spec.itemsize_of(args[0]))]
    return [spec.out(spec.ints(args[2]), spec.itemsize_of(args[0]), "output_shape"),
            spec.out(inferred, spec.itemsize_of(args[0]), "the unpooled input before it is fitted to output_shape")]


# -- tile rules (backends/gpu/outer_tiles.py) ----------------------------------------------------------


@tile_rule("Transpose")
def _transpose_tiles(layer: Any, shapes: list[tuple[int, ...]], host: list[Any]) -> int | None:
    """The leading axes the permutation keeps in place."""
    perm = layer.attrs.get("perm")
    if perm is None:
        return None
    fixed = -1
    for i, p in enumerate(perm):
        if int(p) != i:
            break
        fixed = i
    return None if fixed < 0 else fixed


def resize_sizes(host: list[Any]) -> np.ndarray | None:
    """A Resize's host-known target sizes (input 3), or None (scales instead, or computed on the device)."""
    sizes = host[3] if len(host) > 3 else None
    if sizes is None or np.size(sizes) == 0:
        return None
    return np.asarray(sizes).reshape(-1)


def resize_ratios(layer: Any, shapes: list[tuple[int, ...]], host: list[Any]) -> np.ndarray | None:
    """Output over input size per axis of a Resize (opset 11+, no ``axes``): its scales, or its sizes' ratios."""
    if len(host) < 3 or layer.attrs.get("axes") is not None:
        return None
    sizes = resize_sizes(host)
    if sizes is not None:
        return sizes / np.maximum(np.asarray(shapes[0], np.float64), 1)
    scales = host[2]
    if scales is None or np.size(scales) == 0:
        return None
    return np.asarray(scales, np.float64).reshape(-1)


def _resize_growth(layer: Any, shapes: list[tuple[int, ...]], host: list[Any], last: int) -> float:
    ratios = resize_ratios(layer, shapes, host)
    return 1.0 if ratios is None else max(1.0, float(np.prod(ratios[last + 1:])))


@tile_rule("Resize", tile_growth=_resize_growth)
def _resize_tiles(layer: Any, shapes: list[tuple[int, ...]], host: list[Any]) -> int | None:
    """Leading axes the Resize keeps (ratio 1, by scales or by sizes: each tile then gets its own sizes)."""
    ratios = resize_ratios(layer, shapes, host)
    if ratios is None:
        return None
    kept = -1
    for i, r in enumerate(ratios):
        if r != 1:
            break
        kept = i
    return None if kept < 0 else min(kept, 1)


@tile_rule("Slice")
def _slice_tiles(layer: Any, shapes: list[tuple[int, ...]], host: list[Any]) -> int | None:
    """Leading axes the Slice (opset 10+: starts, ends, axes, steps inputs) keeps whole."""
    if len(host) < 3:
        return None
    known = host[1:5]
    present = [s is not None for s in shapes[1:5]]
    if known[0] is None or known[1] is None or any(h is None and p for h, p in zip(known, present, strict=True)):
        return None  # (a starts, ends, axes or steps known only on the device: what the Slice cuts is unknown)
    rank = len(shapes[0])
    starts, ends = np.asarray(known[0]).reshape(-1), np.asarray(known[1]).reshape(-1)
    axes = np.arange(starts.size) if len(known) < 3 or known[2] is None else np.asarray(known[2]).reshape(-1)
    steps = np.ones(starts.size, np.int64) if len(known) < 4 or known[3] is None else np.asarray(known[3]).reshape(-1)
    cut = []
    for a, b, e, st in zip(axes, starts, ends, steps, strict=False):
        axis = valid_axis(a, rank)
        if axis is None:
            return None
        dim = shapes[0][axis]
        whole = st == 1 and (b == 0 or b <= -dim) and e >= dim
        if not whole:
            cut.append(axis)
    return leading_before(min(cut), rank) if cut else rank - 1


@tile_rule("Expand")
def _expand_tiles(layer: Any, shapes: list[tuple[int, ...]], host: list[Any]) -> int | None:
    return 64  # every axis of its output (cut to its rank; outer_tiles aligns the data with the target)


tile_rule("Split")(before_axis_attribute(0))
tile_rule("DepthToSpace", "SpaceToDepth")(images)


# -- values (backends/gpu/placement.py, program.py) ----------------------------------------------------
describe("Shape", "Size", shape_only=True)
# Views and joins: the output's values are the data's, laid out anew.
describe("Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Expand", "Transpose", "Slice",
         views_values_of=(0,), passes_values_of=(0,), preserves_values=True)
describe("Concat", views_values_of=ALL_INPUTS, passes_values_of=ALL_INPUTS, preserves_values=True)
# Movements: some of the data's values (and a Pad's constant), moved.
describe("Tile", "Split", "ReverseSequence", "Compress", "DepthToSpace", "SpaceToDepth", "Trilu",
         passes_values_of=(0,), preserves_values=True)
describe("Pad", passes_values_of=(0, 2), preserves_values=True)
describe("Resize", passes_values_of=(0,))
describe("CenterCropPad", "Col2Im", "SplitToSequence", preserves_values=True)


# -- structured pruning (profiler/prune_channels.py, prune_constants.py) ---------------------------------
describe("Identity", channel_rule="elementwise")
describe("Reshape", "Flatten", "Squeeze", "Unsqueeze", channel_rule="relayout")
describe("Concat", channel_rule="concat")
describe("Transpose", channel_rule="transpose")
describe("Pad", channel_rule="pad")
describe("Resize", "Upsample", channel_rule="resize")
describe("Reshape", "Unsqueeze", "Squeeze", "Identity", "Flatten", "Transpose", "Concat", prune_foldable=True)
# Inputs whose values' count is the output's rank (onnx_checks.py bounds it at import).
describe("Reshape", "Expand", rank_from_input=1)


# -- opset adapters (registry.lookup: the GPU backends build the canonical forms) --------------------------


def _tile_1(attrs: dict[str, Any], args: list[Any]) -> tuple[dict[str, Any], list[Any]] | None:
    """Tile-1 (input, tiles, axis): one axis repeated; Tile-6 takes a repeat per axis."""
    try:
        rank = len(args[0].shape)
        axis = spec.axis_of(int(spec.scalar(args[2])), rank)
        repeats = [1] * rank
        repeats[axis] = int(spec.scalar(args[1]))
    except (AttributeError, IndexError, TypeError, ValueError, spec.Unknown):
        return None  # the CPU kernel names the fault
    return attrs, [args[0], np.asarray(repeats, dtype=np.int64)]


_I64 = np.int64
describe("Reshape", opset_adapters=(
    spec.OpsetAdapter(1, 5, spec.attributes_as_inputs(("shape", 1, _I64), required=("shape",))),))
describe("Squeeze", opset_adapters=(spec.OpsetAdapter(1, 13, spec.attributes_as_inputs(("axes", 1, _I64))),))
describe("Unsqueeze", opset_adapters=(
    spec.OpsetAdapter(1, 13, spec.attributes_as_inputs(("axes", 1, _I64), required=("axes",))),))
describe("Split", opset_adapters=(
    # Split-1 takes the sizes as its second input or as the attribute; Split-2 as the attribute only.
    spec.OpsetAdapter(1, 13, spec.attributes_as_inputs(("split", 1, _I64), keep_inputs=2), host_inputs=(1,)),
    spec.OpsetAdapter(2, 13, spec.attributes_as_inputs(("split", 1, _I64)))))
describe("Slice", opset_adapters=(spec.OpsetAdapter(1, 10, spec.attributes_as_inputs(
    ("starts", 1, _I64), ("ends", 2, _I64), ("axes", 3, _I64), required=("starts", "ends"))),))
describe("Tile", opset_adapters=(spec.OpsetAdapter(1, 6, _tile_1, host_inputs=(1, 2)),))
describe("Pad", opset_adapters=(
    spec.OpsetAdapter(1, 11, spec.attributes_as_inputs(("paddings", 1, _I64), ("value", 2, None),
                                                       required=("paddings",))),
    spec.OpsetAdapter(2, 11, spec.attributes_as_inputs(("pads", 1, _I64), ("value", 2, None), required=("pads",)))))
describe("Upsample", opset_adapters=(
    spec.OpsetAdapter(7, 9, spec.attributes_as_inputs(("scales", 1, np.float32), required=("scales",))),))
