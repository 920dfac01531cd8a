"""Facets of the indexing ops: size rules (outputs that follow their indices' shape: Gather, GatherElements, GatherND,
OneHot, ...), their tile rules, the input holding indices, and the values they pass on.

Each rule is ``fn(layer, args) -> [(shape, nbytes, detail)]`` (``wgsentis.ops.spec.SizeRule``); the memory budget
(``wgsentis.budget``) reads them from the ops' specs."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from wgsentis.ops import spec
from wgsentis.ops.spec import Output, before_axis_attribute, describe, size_rule, tile_rule, valid_axis


# -- indexing ----------------------------------------------------------------------------------------


@size_rule("Gather")
def _gather(layer: Any, args: list[Any]) -> list[Output]:
    data = spec.shape_of(args[0])
    axis = spec.axis_of(layer.attrs.get("axis", 0), len(data))
    return [spec.out((*data[:axis], *spec.shape_of(args[1]), *data[axis + 1:]), spec.itemsize_of(args[0]))]


@size_rule("GatherElements")
def _gather_elements(layer: Any, args: list[Any]) -> list[Output]:
    return [spec.out(spec.shape_of(args[1]), spec.itemsize_of(args[0]))]


@size_rule("GatherND")
def _gather_nd(layer: Any, args: list[Any]) -> list[Output]:
    data, indices = spec.shape_of(args[0]), spec.shape_of(args[1])
    batch_dims = int(layer.attrs.get("batch_dims", 0))
    return [spec.out((*indices[:-1], *data[batch_dims + indices[-1]:]), spec.itemsize_of(args[0]))]


@size_rule("OneHot")
def _one_hot(layer: Any, args: list[Any]) -> list[Output]:
    indices = spec.shape_of(args[0])
    depth = int(spec.host(args[1]).reshape(-1).tolist()[0])  # as the kernel: the first value, truncated
    axis = spec.axis_of(layer.attrs.get("axis", -1), len(indices) + 1)
    return [spec.out((*indices[:axis], depth, *indices[axis:]), spec.itemsize_of(args[2]))]


@size_rule("NonZero")
def _non_zero(layer: Any, args: list[Any]) -> list[Output]:
    value = spec.host(args[0])  # exact: one counting pass, far cheaper than the kernel itself
    if value.ndim == 0:
        return []
    return [spec.out((value.ndim, int(np.count_nonzero(value))), 8)]


describe("NonZero", size_reads_data=True)  # its output's size is a count over its data


@size_rule("Concat")
def _concat(layer: Any, args: list[Any]) -> list[Output]:
    shapes = [spec.shape_of(a) for a in args if a is not None]
    axis = spec.axis_of(layer.attrs["axis"], len(shapes[0]))
    shape = list(shapes[0])
    shape[axis] = sum(s[axis] for s in shapes)
    return [spec.out(shape, spec.itemsize_of(args[0]))]


# Their rules read shapes, dtypes and attributes only (a Gather's indices by their shape).
describe("Gather", "GatherElements", "GatherND", "Concat", size_reads_shapes=True)


# -- tile rules (backends/gpu/outer_tiles.py) ----------------------------------------------------------


def _gather_growth(layer: Any, shapes: list[tuple[int, ...]], host: list[Any], last: int) -> float:
    """A Gather's output row against its input's: its indices' size over the gathered axis."""
    if len(shapes) < 2 or shapes[1] is None:
        return 1.0
    axis = valid_axis(layer.attrs.get("axis", 0), len(shapes[0]))
    return max(1.0, math.prod(shapes[1]) / max(1, shapes[0][axis]))


tile_rule("Gather", tile_growth=_gather_growth)(before_axis_attribute(0))
# Their indices and updates are shaped as the data along the leading axes: every device input is cut with it.
tile_rule("GatherElements", "ScatterElements", tiles_all_inputs=True)(before_axis_attribute(0))


# -- values (backends/gpu/placement.py, program.py) ----------------------------------------------------
# Input 1 holds indices, checked against their axis on the device as on the host.
describe("Gather", "GatherElements", "GatherND", index_input=1, passes_values_of=(0,), preserves_values=True)
describe("ScatterElements", "ScatterND", index_input=1, passes_values_of=(0, 2), preserves_values=True)
