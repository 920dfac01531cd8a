"""Size rules of the indexing ops, whose output follows their indices' shape (Gather, GatherElements, GatherND, OneHot,
...).

Each rule is ``fn(layer, args) -> [(shape, nbytes, detail)]`` (``wgsentis.ops.spec.SizeRule``); the memory budget
(``wgsentis.budget``) reads them from the ops' specs."""

from __future__ import annotations

from typing import Any

import numpy as np

from wgsentis.ops import spec
from wgsentis.ops.spec import Output, size_rule


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


@size_rule("Concat")
def _concat(layer: Any, args: list[Any]) -> list[Output]:
    shapes = [spec.shape_of(a) for a in args if a is not None]
    axis = spec.axis_of(layer.attrs["axis"], len(shapes[0]))
    shape = list(shapes[0])
    shape[axis] = sum(s[axis] for s in shapes)
    return [spec.out(shape, spec.itemsize_of(args[0]))]
