"""Size rules of broadcasting arithmetic, comparisons, Where, Cast and DequantizeLinear: outputs the broadcast of their
inputs.

Each rule is ``fn(layer, args) -> [(shape, nbytes, detail)]`` (``wgsentis.ops.spec.SizeRule``); the memory budget
(``wgsentis.budget``) reads them from the ops' specs."""

from __future__ import annotations

import math
from typing import Any


from wgsentis.ops import spec
from wgsentis.ops.spec import Output, size_rule


# -- broadcasting arithmetic ----------------------------------------------------------------------------

_COMPARISONS = frozenset({"Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "And", "Or", "Xor"})


@size_rule("Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "PRelu", "BitShift",
           "BitwiseAnd", "BitwiseOr", "BitwiseXor", *_COMPARISONS)
def _elementwise(layer: Any, args: list[Any]) -> list[Output]:
    shape = args[0].shape
    for arg in args[1:]:
        if arg is not None and arg.shape != shape:
            shape = spec.broadcast(shape, arg.shape)
    itemsize = 1 if layer.op_type in _COMPARISONS else args[0].dtype.itemsize
    return [(shape, math.prod(shape) * itemsize, "")]


@size_rule("Where")
def _where(layer: Any, args: list[Any]) -> list[Output]:
    shape = spec.broadcast(spec.broadcast(args[0].shape, args[1].shape), args[2].shape)
    return [spec.out(shape, spec.itemsize_of(args[1]))]


@size_rule("Cast", "CastLike")
def _cast(layer: Any, args: list[Any]) -> list[Output]:
    if layer.op_type == "CastLike":
        itemsize = spec.itemsize_of(args[1])
    else:
        to = layer.attrs["to"]
        if isinstance(to, str):  # Cast-1 spelled the type by name
            return []
        itemsize = spec.dtype_size(to, 4)
    return [spec.out(spec.shape_of(args[0]), itemsize)]


@size_rule("DequantizeLinear")
def _dequantize(layer: Any, args: list[Any]) -> list[Output]:
    return [spec.out(spec.shape_of(args[0]), spec.itemsize_of(args[1]))]
