"""Facets of the elementwise family's ops: the size rules of broadcasting arithmetic, comparisons, Where, Cast and
DequantizeLinear (outputs the broadcast of their inputs), and how their int64 results are bounded (sums and
products widen, selections pass their inputs' values on).

Each rule is ``fn(layer, args) -> [(shape, nbytes, detail)]`` (``wgsentis.ops.spec.SizeRule``); the memory budget
(``wgsentis.budget``) reads them from the ops' specs."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from wgsentis.ops import spec
from wgsentis.ops.spec import ALL_INPUTS, ANY_INT32, Output, describe, size_rule


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


# Their rules read shapes, dtypes and attributes only.
describe("Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "PRelu", "BitShift", "BitwiseAnd",
         "BitwiseOr", "BitwiseXor", *_COMPARISONS, "Where", "Cast", "CastLike", "DequantizeLinear",
         size_reads_shapes=True)


# -- int64 on the device (backends/gpu/placement.py) ---------------------------------------------------
# Results that can leave the int32 range the device holds int64 values in, for int64 inputs all within it: sums,
# differences, products, powers, negation and absolute value of -2**31. (Max, Min, Where, Mod... select or shrink.)
describe("Add", "Sub", int64_bound=lambda layer, b, args: b[0] + b[1], widens_int64=True)
describe("Sum", int64_bound=lambda layer, b, args: sum(b), widens_int64=True)
describe("Mul", int64_bound=lambda layer, b, args: b[0] * b[1], widens_int64=True)
describe("Neg", "Abs", "Div", int64_bound=lambda layer, b, args: b[0] if b else 0, widens_int64=True)
describe("Pow", widens_int64=True)
describe("Mod", int64_bound=lambda layer, b, args: min(b[:2]))
# Narrow integer types bound what a Cast from them makes.
_TYPE_BOUNDS = {np.dtype(np.bool_): 1, np.dtype(np.int8): 128, np.dtype(np.uint8): 255, np.dtype(np.int16): 32768,
                np.dtype(np.uint16): 65535}


def _cast_bound(layer: Any, bounds: list[int], args: list[Any]) -> int:
    source = np.dtype(getattr(args[0], "dtype", np.float32))
    return _TYPE_BOUNDS.get(source, (bounds[0] if bounds else 0) if source == np.int64 else ANY_INT32)


describe("Cast", "CastLike", int64_bound=_cast_bound)
# Selections: the output's values are some of the inputs'.
describe("Max", "Min", passes_values_of=ALL_INPUTS, preserves_values=True)
describe("Clip", passes_values_of=ALL_INPUTS)
describe("Where", passes_values_of=(1, 2), views_values_of=(1, 2), preserves_values=True)
describe("Relu", "Shrink", preserves_values=True)


# -- structured pruning (profiler/prune_channels.py, prune_constants.py) ---------------------------------
# Shape-preserving, per-element ops: a channel of the output depends on the same channel of input 0 only.
describe("Relu", "LeakyRelu", "Elu", "Selu", "Celu", "Gelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh",
         "Softplus", "Softsign", "Mish", "Clip", "Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Erf", "Floor",
         "Ceil", "Round", "Sign", "Dropout", "Cast", "ThresholdedRelu", "Sin", "Cos", "Not", "IsNaN", "IsInf",
         "Shrink", channel_rule="elementwise")
describe("Add", "Sub", "Mul", "Div", "Sum", "Max", "Min", "Mean", "Pow", "PRelu", "Where", "Equal", "Less",
         "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Mod", "BitShift", channel_rule="broadcast")
describe("Cast", "Mul", "Add", "Sub", "Div", "Sqrt", "Neg", prune_foldable=True)


# -- opset adapters (registry.lookup: the GPU backends build the canonical forms) --------------------------
# Dropout before 12 (is_test, ratio as attributes) runs as inference Dropout-12: no ratio, no training mode.
describe("Dropout", opset_adapters=(spec.OpsetAdapter(1, 12, lambda attrs, args: ({}, args[:1])),))
