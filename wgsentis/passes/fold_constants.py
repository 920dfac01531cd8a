"""Constant folding: layers whose inputs are all constants run once at load time."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from wgsentis.budget import output_bytes
from wgsentis.ir import Graph, Layer, TensorInfo, captured_names
from wgsentis.ops import registry

# Folding a layer that makes a tensor this much bigger than its inputs only bloats the model
# (e.g. Expand of a scalar), except for ConstantOfShape, which is how some exporters store weights.
_MAX_GROWTH_BYTES = 64 << 20
# A ConstantOfShape larger than this is left to run time, where the worker's memory budget checks it:
# folding runs at load, before any worker (and its memory_limit) exists.
_MAX_CONSTANT_OF_SHAPE_BYTES = 1 << 30
# All the splats one graph may fold at load, together: ten 1 GiB ConstantOfShape nodes in a 300-byte model
# must not cost 10 GiB before a worker exists (VGG-19's splat weights, the largest seen, are 548 MB).
_MAX_FOLDED_SPLAT_BYTES = 2 << 30


# Runs a graph of one layer whose inputs are all constants; returns its outputs.
Evaluator = Callable[[Graph], list]


class FoldConstants:
    """Replace constant-input layers by their outputs; keeps random ops and control flow.

    ``max_folded_splat_bytes``: the ConstantOfShape outputs one graph may fold in all (the rest run at run
    time, under the worker's memory budget)."""

    def __init__(self, evaluate: Evaluator, max_folded_splat_bytes: int = _MAX_FOLDED_SPLAT_BYTES) -> None:
        self.evaluate = evaluate
        self.max_folded_splat_bytes = max_folded_splat_bytes

    def run(self, graph: Graph, opsets: dict[str, int]) -> None:
        outputs = {o.name for o in graph.outputs}
        kept: list[Layer] = []
        splat_bytes = 0  # folded ConstantOfShape outputs so far
        for layer in graph.layers:
            impl = registry.lookup(layer.op_type, layer.domain, layer.opset)
            foldable = (
                impl is not None and not captured_names(layer)
                and registry.is_deterministic(impl, [graph.constants.get(n) for n in layer.inputs])
                and all((not n) or n in graph.constants for n in layer.inputs)
                and not any(o in outputs for o in layer.outputs if o)
                and layer.op_type not in ("If", "Loop", "Scan", "SequenceMap")
            )
            if foldable and self._too_big(layer, graph):
                foldable = False  # known from shapes alone: never allocate it just to throw it away
            if foldable and layer.op_type == "ConstantOfShape":
                predicted = output_bytes(layer, [graph.constants[n] if n else None for n in layer.inputs]) or 0
                foldable = splat_bytes + predicted <= self.max_folded_splat_bytes
                splat_bytes += predicted if foldable else 0
            if foldable:
                values = self._evaluate(layer, graph)
                if values is not None:
                    for name, value in zip(layer.outputs, values, strict=False):
                        if name:
                            graph.constants[name] = value
                    continue
            kept.append(layer)
        graph.layers = kept

    @staticmethod
    def _too_big(layer: Layer, graph: Graph) -> bool:
        """Whether the layer's outputs, predicted from its constant inputs (wgsentis.budget), exceed what
        folding keeps; unknown sizes are left to the check after evaluation."""
        predicted = output_bytes(layer, [graph.constants[n] if n else None for n in layer.inputs])
        if predicted is None:
            return False
        if layer.op_type == "ConstantOfShape":
            return predicted > _MAX_CONSTANT_OF_SHAPE_BYTES
        in_bytes = sum(graph.constants[n].nbytes for n in layer.inputs if n)
        return predicted > max(in_bytes * 4, _MAX_GROWTH_BYTES)

    def _evaluate(self, layer: Layer, graph: Graph) -> list[np.ndarray] | None:
        sub = Graph(name=f"fold:{layer.name}", inputs=[], outputs=[], layers=[layer],
                    constants={n: graph.constants[n] for n in layer.inputs if n})
        sub.outputs = [TensorInfo(o, None, None) for o in layer.outputs if o]
        try:
            values = self.evaluate(sub)
        except Exception:
            return None  # leave it to run time, where the error names the layer and inputs
        if not all(isinstance(v, np.ndarray) for v in values):
            return None
        in_bytes = sum(graph.constants[n].nbytes for n in layer.inputs if n)
        out_bytes = sum(v.nbytes for v in values)
        if layer.op_type != "ConstantOfShape" and out_bytes > max(in_bytes * 4, _MAX_GROWTH_BYTES):
            return None
        names = [o for o in layer.outputs if o]
        by_name = dict(zip(names, values, strict=True))
        return [by_name.get(o) if o else None for o in layer.outputs]
