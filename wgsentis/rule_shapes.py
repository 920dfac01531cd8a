"""Shape inference from the ops' own shape rules, for what ONNX's inference leaves unknown.

ONNX's inference (``onnx_shapes.infer_types``) knows the standard ops; it stops at the ops it has no schema for
(com.microsoft's Gelu, SkipLayerNormalization, BiasSplitGelu...) and at graphs it fails on, and every value
downstream stays unknown. The importer then walks the graph with the specs' shape rules (``OpSpec.size_rule``,
the rule the memory budget sizes outputs with): a layer whose first output has no concrete shape, whose inputs
all have concrete shapes and known types, gets the shape its rule gives. ``infer`` returns those; the importer
hands them back to ONNX's inference as declared types, which carries them on through the standard ops after
them, and repeats while that finds more.

Only concrete shapes are inferred: a rule reads numbers, never symbols, so a dim that varies stays unknown (a
plan's signature handles it at run time).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from wgsentis.ir import Graph, Layer, TensorInfo
from wgsentis.ops.spec import outputs_by_rule, spec_of


class Shaped:
    """A stand-in input of known shape and type whose values the import cannot know (``spec.host`` raises
    ``spec.Unknown`` on it, so a rule that needs them gives up)."""

    __slots__ = ("dtype", "shape")
    host = None

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.shape, self.dtype = shape, dtype


def concrete(info: TensorInfo | None) -> bool:
    """Whether ``info`` is a tensor of known type and a shape of plain ints."""
    return (info is not None and info.kind == "tensor" and info.dtype is not None and info.shape is not None
            and all(isinstance(d, int) for d in info.shape))


def _argument(graph: Graph, known: dict[str, TensorInfo], name: str) -> Any:
    """Input ``name`` as a rule reads it: None where omitted, a constant's array, a ``Shaped`` stand-in, or
    ``KeyError`` where its shape or type is not known."""
    if not name:
        return None
    if name in graph.constants:
        return graph.constants[name]
    info = known.get(name)
    if not concrete(info):
        raise KeyError(name)
    return Shaped(tuple(info.shape), np.dtype(info.dtype))


def _first_output(layer: Layer, args: list[Any], was: TensorInfo | None) -> TensorInfo | None:
    """The first output's info from the layer's rule, or None where it has no rule or the rule cannot tell."""
    rule = spec_of(layer.op_type, layer.domain).size_rule
    if rule is None:
        return None
    try:
        shape, nbytes, _ = outputs_by_rule(rule, layer, args)[0]
    except Exception:  # a rule raises where the host cannot know the size: nothing is inferred then
        return None
    if shape is None:
        return None
    dtype = was.dtype if was is not None else None
    if dtype is None and layer.domain not in ("", "ai.onnx"):
        # The rule gives bytes, not the type: the first input's type where the item sizes agree (for the contrib
        # ops whose rules are kept here; ONNX's inference types every standard op's outputs where it runs at all,
        # and a guess from item sizes could mistake a Cast's int32 for its input's float32).
        first = next((a for a in args if a is not None), None)
        count = int(np.prod(shape)) if shape else 1
        if first is not None and count and nbytes == count * first.dtype.itemsize:
            dtype = first.dtype
    if dtype is None:
        return None
    return TensorInfo(layer.outputs[0], np.dtype(dtype), tuple(int(d) for d in shape))


def infer(graph: Graph) -> dict[str, TensorInfo]:
    """The first outputs of ``graph``'s top-level layers that ONNX left without a concrete shape and the layers'
    shape rules give one, by name, walking the layers in order (each inferred shape feeds the layers after it)."""
    known: dict[str, TensorInfo] = dict(graph.value_info)
    for info in graph.inputs:
        known.setdefault(info.name, info)
    found: dict[str, TensorInfo] = {}
    for layer in graph.layers:
        if not layer.outputs or not layer.outputs[0] or concrete(known.get(layer.outputs[0])):
            continue
        try:
            args = [_argument(graph, known, name) for name in layer.inputs]
        except KeyError:
            continue
        info = _first_output(layer, args, known.get(layer.outputs[0]))
        if info is not None:
            known[info.name] = found[info.name] = info
    return found
