"""Facets of convolutions and pools: their size rules (outputs from their geometry, ops/conv.py and ops/pool.py, and the
working copies their kernels make), the pools' tile rule, and MaxPool's selection of values.

Each rule is ``fn(layer, args) -> [(shape, nbytes, detail)]`` (``wgsentis.ops.spec.SizeRule``); the memory budget
(``wgsentis.budget``) reads them from the ops' specs."""

from __future__ import annotations

import math
from typing import Any

from wgsentis.ops import spec
from wgsentis.ops.conv import conv_geometry, conv_transpose_geometry, spatial_attrs
from wgsentis.ops.pool import pool_geometry
from wgsentis.ops.spec import Output, describe, images_and_channels, size_rule, tile_rule


# -- convolutions and pools -----------------------------------------------------------------------------


def _padded_input(x: tuple[int, ...], pads: list[int], itemsize: int) -> list[Output]:
    """The input padded by ``pads`` (what a kernel pads into before it slides its windows), when some pad
    is longer than the axis it pads (short pads leave it near the input's size, already allocated)."""
    nd = len(x) - 2
    if not nd or max(pads) <= min(x[2:]):
        return []
    spatial = [x[2 + i] + max(pads[i], 0) + max(pads[nd + i], 0) for i in range(nd)]
    return [spec.out((*x[:2], *spatial), itemsize, "the padded input")]


def _windows(x: tuple[int, ...], kernel: list[int], attrs: dict[str, Any]) -> tuple[list[int], list[int]] | None:
    """(pads, output spatial dims) of a convolution or pool with explicit pads and floor rounding (the
    common case, computed inline: this runs before every such layer); None for auto_pad or ceil_mode."""
    if attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "") or attrs.get("ceil_mode"):
        return None
    nd = len(x) - 2
    strides = attrs.get("strides") or [1] * nd
    dilations = attrs.get("dilations") or [1] * nd
    pads = attrs.get("pads") or [0] * (2 * nd)
    if not len(kernel) == len(strides) == len(dilations) == nd or len(pads) != 2 * nd:
        raise ValueError("attributes do not match the spatial rank")
    return pads, [(x[2 + i] + pads[i] + pads[nd + i] - (kernel[i] - 1) * dilations[i] - 1) // strides[i] + 1
                  for i in range(nd)]


def _conv_output(layer: Any, x: tuple[int, ...], w: tuple[int, ...], itemsize: int) -> list[Output]:
    attrs = layer.attrs
    kernel = attrs.get("kernel_shape") or list(w[2:])
    found = _windows(x, kernel, attrs)
    if found is None:
        strides, dilations, pads = spatial_attrs(len(x) - 2, kernel, attrs.get("strides"), attrs.get("dilations"),
                                                 attrs.get("pads"))
        begins, ends, outs = conv_geometry(x[2:], kernel, strides, dilations, pads, attrs["auto_pad"])
        pads = begins + ends
    else:
        pads, outs = found
    shape = (x[0], w[0], *outs)
    outputs = [(shape, math.prod(shape) * itemsize, "")]
    if max(pads) > min(x[2:]):
        outputs += _padded_input(x, pads, itemsize)
    return outputs


@size_rule("Conv", "FusedConv", "DeformConv")
def _conv(layer: Any, args: list[Any]) -> list[Output]:
    x = args[0]
    return _conv_output(layer, x.shape, args[1].shape, x.dtype.itemsize)


@size_rule("ConvInteger")
def _conv_integer(layer: Any, args: list[Any]) -> list[Output]:
    return _conv_output(layer, spec.shape_of(args[0]), spec.shape_of(args[1]), 4)


@size_rule("QLinearConv")
def _qlinear_conv(layer: Any, args: list[Any]) -> list[Output]:
    zero_point = spec.arg(args, 7)
    itemsize = 1 if zero_point is None else spec.itemsize_of(zero_point)
    return _conv_output(layer, spec.shape_of(args[0]), spec.shape_of(args[3]), itemsize)


@size_rule("ConvTranspose")
def _conv_transpose(layer: Any, args: list[Any]) -> list[Output]:
    attrs = layer.attrs
    x, w = spec.shape_of(args[0]), spec.shape_of(args[1])
    nd = len(x) - 2
    kernel = [int(k) for k in attrs.get("kernel_shape") or w[2:]]
    strides, dilations, pads = spatial_attrs(nd, kernel, attrs.get("strides"), attrs.get("dilations"),
                                             attrs.get("pads"))
    output_padding = [int(v) for v in attrs.get("output_padding") or [0] * nd][-nd:]
    _, outs = conv_transpose_geometry(x[2:], kernel, strides, dilations, pads, attrs.get("auto_pad", "NOTSET"),
                                      output_padding, attrs.get("output_shape"))
    return [spec.out((x[0], w[1] * int(attrs.get("group", 1)), *outs), spec.itemsize_of(args[0]))]


@size_rule("MaxPool", "AveragePool", "LpPool")
def _pool(layer: Any, args: list[Any]) -> list[Output]:
    attrs = layer.attrs
    x = args[0].shape
    kernel = attrs["kernel_shape"]
    found = _windows(x, kernel, attrs)
    if found is None:
        strides, dilations, pads = spatial_attrs(len(x) - 2, kernel, attrs.get("strides"), attrs.get("dilations"),
                                                 attrs.get("pads"))
        begins, ends, outs = pool_geometry(x[2:], kernel, strides, dilations, pads, attrs.get("auto_pad", "NOTSET"),
                                           int(attrs.get("ceil_mode", 0)))
        pads = begins + ends
    else:
        pads, outs = found
        outs = [max(o, 0) for o in outs]  # a window larger than the padded input: an empty dim, as the kernel
    itemsize = args[0].dtype.itemsize
    outputs = [spec.out((*x[:2], *outs), itemsize)]
    if layer.op_type == "MaxPool" and len(layer.outputs) > 1 and layer.outputs[1]:
        outputs.append(spec.out((*x[:2], *outs), 8, "Indices"))
    return outputs + _padded_input(x, pads, itemsize)


@size_rule("MaxRoiPool")
def _max_roi_pool(layer: Any, args: list[Any]) -> list[Output]:
    height, width = (int(v) for v in layer.attrs["pooled_shape"])
    return [spec.out((spec.shape_of(args[1])[0], spec.shape_of(args[0])[1], height, width), spec.itemsize_of(args[0]))]


@size_rule("RoiAlign")
def _roi_align(layer: Any, args: list[Any]) -> list[Output]:
    height, width = int(layer.attrs.get("output_height", 1)), int(layer.attrs.get("output_width", 1))
    return [spec.out((spec.shape_of(args[1])[0], spec.shape_of(args[0])[1], height, width), spec.itemsize_of(args[0]))]


@size_rule("GridSample")
def _grid_sample(layer: Any, args: list[Any]) -> list[Output]:
    x, grid = spec.shape_of(args[0]), spec.shape_of(args[1])
    return [spec.out((*x[:2], *grid[1:-1]), spec.itemsize_of(args[0]))]


# Pools run over each image and channel apart: gpu-compute may cut them into tiles of those past the binding limit.
tile_rule("MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")(
    images_and_channels)
describe("MaxPool", passes_values_of=(0,), preserves_values=True)  # a max selects one of its window's values
describe("GlobalMaxPool", preserves_values=True)

describe("Conv", "FusedConv", "ConvTranspose", weight_input=1)
describe("Conv", channel_rule="weighted")
describe("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool", "GlobalLpPool", channel_rule="pool")
