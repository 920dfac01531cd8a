"""Facets of the reduction and sorting families' ops (ReduceX, Softmax/LogSoftmax/Hardmax, ArgMax/ArgMin, TopK,
Unique, CumSum): the leading axes through which gpu-compute may cut them into tiles past the binding limit
(their rows are independent), and what their int64 results are bounded by."""

from __future__ import annotations

from typing import Any

import numpy as np

from wgsentis.ops.spec import (
    OpsetAdapter,
    along_axis,
    attributes_as_inputs,
    before_axis_attribute,
    describe,
    leading_before,
    tile_rule,
    valid_axis,
)

REDUCE_OPS = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")


@tile_rule(*REDUCE_OPS)
def _reduce_tiles(layer: Any, shapes: list[tuple[int, ...]], host: list[Any]) -> int | None:
    """The axes before the first reduced one lead (axes from the attribute, or from input 1 at opset 18)."""
    rank = len(shapes[0])
    axes = layer.attrs.get("axes")
    if axes is None and len(host) > 1 and host[1] is not None:
        axes = host[1]
    if axes is None or len(np.asarray(axes).reshape(-1)) == 0:
        return None  # every axis reduced (noop_with_empty_axes aside): nothing leads
    first = min(valid_axis(a, rank) if valid_axis(a, rank) is not None else -1 for a in np.asarray(axes).reshape(-1))
    return None if first <= 0 else first - 1


def softmax_axis(opset: int, axis: Any, rank: int) -> tuple[int, bool] | None:
    """Softmax's, LogSoftmax's and Hardmax's one opset adapter, which every backend, the tile rule and the pruner
    read: (the first normalized axis, whether the axes from it on are flattened into one row), or None where
    ``axis`` is out of range. Before opset 13 the input is coerced to 2-D rows at ``axis`` (default 1; ``rank``
    itself gives rows of one element); from 13 the op runs along ``axis`` (default -1; a scalar's axis 0)."""
    flattened = opset < 13
    axis = int((1 if flattened else -1) if axis is None else axis)
    if not -rank <= axis < (rank + 1 if flattened else max(rank, 1)):
        return None
    return (axis + rank if axis < 0 else axis), flattened


@tile_rule("Softmax", "LogSoftmax", "Hardmax")
def _softmax_tiles(layer: Any, shapes: list[tuple[int, ...]], host: list[Any]) -> int | None:
    """The axes before the normalized ones lead."""
    found = softmax_axis(layer.opset, layer.attrs.get("axis"), len(shapes[0]))
    return None if found is None or found[0] == 0 else found[0] - 1


@tile_rule("CumSum")
def _cumsum_tiles(layer: Any, shapes: list[tuple[int, ...]], host: list[Any]) -> int | None:
    """CumSum runs along the axis its second input holds."""
    axis = host[1] if len(host) > 1 else None
    return None if axis is None else leading_before(int(np.asarray(axis).reshape(-1)[0]), len(shapes[0]))


tile_rule("ArgMax", "ArgMin")(before_axis_attribute(0))
tile_rule("TopK")(before_axis_attribute(-1))


# -- values (backends/gpu/placement.py, program.py) ----------------------------------------------------
describe("ReduceMax", "ReduceMin", passes_values_of=(0,), preserves_values=True)
describe("ArgMax", "ArgMin", int64_bound=lambda layer, b, args: along_axis(layer, args, 0))
describe("TopK", int64_bound=lambda layer, b, args: [b[0] if b else 0, along_axis(layer, args, -1)],
         preserves_values=True)
describe("Unique", preserves_values=True)


def _cumsum_bound(layer: Any, bounds: list[int], args: list[Any]) -> int:
    """Each partial sum is at most the first input's bound times the summed axis' length; the axis is a value
    (input 1) this rule does not see, so the longest axis bounds it."""
    shape = tuple(getattr(args[0], "shape", ())) if args else ()
    return (bounds[0] if bounds else 0) * max(shape, default=1)


describe("CumSum", int64_bound=_cumsum_bound, widens_int64=True)


# -- structured pruning (profiler/prune_channels.py) -----------------------------------------------------
describe("Softmax", "LogSoftmax", "Hardmax", channel_rule="softmax")
describe(*REDUCE_OPS, channel_rule="reduce")


# -- opset adapters (registry.lookup: the GPU backends build the canonical forms) --------------------------
for _op in REDUCE_OPS:  # the axes became an input at ReduceSum-13 and at 18 for the others
    describe(_op, opset_adapters=(OpsetAdapter(1, 13 if _op == "ReduceSum" else 18,
                                               attributes_as_inputs(("axes", 1, np.int64))),))


def _top_k_1(attrs: dict[str, Any], args: list[Any]) -> tuple[dict[str, Any], list[Any]] | None:
    """TopK-1 takes k as an attribute; TopK-10 as a one-element input; TopK-11 adds largest and sorted (1 and 1
    before it)."""
    rest = dict(attrs)
    k = rest.pop("k", None)
    return None if k is None else (rest, [args[0], np.asarray([k], dtype=np.int64)])


describe("TopK", opset_adapters=(OpsetAdapter(1, 11, _top_k_1),
                                 OpsetAdapter(10, 11, lambda attrs, args: (attrs, args))))
