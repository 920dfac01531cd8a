"""Size rules of the ops that grow a tensor by its shape inputs: Expand, Tile, Pad, CenterCropPad, Resize, Upsample,
Col2Im, MaxUnpool.

Each rule is ``fn(layer, args) -> [(shape, nbytes, detail)]`` (``wgsentis.ops.spec.SizeRule``); the memory budget
(``wgsentis.budget``) reads them from the ops' specs."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from wgsentis.ops import spec
from wgsentis.ops.conv import spatial_attrs
from wgsentis.ops.resize import resize_geometry
from wgsentis.ops.spec import Output, size_rule


# -- shape-driven growth -----------------------------------------------------------------------------


@size_rule("Expand")
def _expand(layer: Any, args: list[Any]) -> list[Output]:
    return [spec.out(spec.broadcast(spec.shape_of(args[0]), tuple(spec.ints(args[1]))), spec.itemsize_of(args[0]))]


@size_rule("Tile")
def _tile(layer: Any, args: list[Any]) -> list[Output]:
    shape = list(spec.shape_of(args[0]))
    if layer.opset < 6:  # Tile-1: (input, tiles, axis)
        axis = spec.axis_of(int(spec.scalar(args[2])), len(shape))
        shape[axis] *= int(spec.scalar(args[1]))
    else:
        repeats = spec.ints(args[1])
        if len(repeats) != len(shape):
            raise ValueError("repeats do not match the rank")
        shape = [d * r for d, r in zip(shape, repeats, strict=True)]
    return [spec.out(shape, spec.itemsize_of(args[0]))]


@size_rule("Pad")
def _pad(layer: Any, args: list[Any]) -> list[Output]:
    shape = list(spec.shape_of(args[0]))
    if layer.opset < 11:
        pads = [int(p) for p in (layer.attrs.get("pads") or layer.attrs.get("paddings"))]
        axes = list(range(len(shape)))
    else:
        pads = spec.ints(args[1])
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
    scales = layer.attrs["scales"] if layer.opset < 9 else spec.host(args[1])
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
