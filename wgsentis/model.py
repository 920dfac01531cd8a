"""Model: an imported graph and the optimized graph workers run.

The IR itself lives in ``wgsentis.ir``; the passes that optimize it are handed in by whoever builds the Model
(``load_model``), so the Model depends on neither the passes nor any backend.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import numpy as np

from wgsentis.ir import Dim, Graph, Layer, TensorInfo, captured_names, subgraphs

# Turns a copy of the imported graph (its own layer list, safe to change) into the graph workers run.
Optimizer = Callable[[Graph, dict[str, int]], Graph]


class Model:
    """An imported model: the graph as imported, and the optimized graph that workers run.

    ``add_output`` re-optimizes from the imported graph, so any intermediate tensor can be
    exposed even where a fusion would otherwise have removed it.
    """

    def __init__(self, graph: Graph, opsets: dict[str, int], name: str = "model", source: str = "",
                 metadata: dict[str, str] | None = None, optimizer: Optimizer | None = None) -> None:
        """``optimizer``: the passes (``wgsentis.passes.Optimizer``); None runs the graph as imported."""
        self.imported = graph
        self.opsets = opsets
        self.name = name
        self.source = source
        self.metadata = metadata or {}
        self.optimizer = optimizer
        self._extra_outputs: list[str] = []
        self.graph = self._optimize() if optimizer is not None else graph

    def _optimize(self, fed: frozenset[str] = frozenset()) -> Graph:
        """The optimized graph; ``fed``: overridable initializers it takes as inputs instead of constants."""
        graph = copy.copy(self.imported)
        graph.layers = [copy.copy(layer) for layer in self.imported.layers]
        graph.constants = {k: v for k, v in self.imported.constants.items() if k not in fed}
        graph.inputs = list(self.imported.inputs) + [t for t in self.imported.overridable if t.name in fed]
        graph.outputs = list(self.imported.outputs) + [
            self._info_of(name) for name in self._extra_outputs
        ]
        return graph if self.optimizer is None else self.optimizer(graph, self.opsets)

    def _info_of(self, name: str) -> TensorInfo:
        info = self.imported.value_info.get(name)
        return info if info is not None else TensorInfo(name, None, None)

    @property
    def inputs(self) -> list[TensorInfo]:
        """The inputs a caller must (or may, for those with defaults) feed."""
        return list(self.graph.inputs)

    @property
    def overridable(self) -> list[TensorInfo]:
        """Initializers a run may feed to override (graph inputs with a default; IR version 4 and later)."""
        return list(self.imported.overridable)

    def feeding(self, names: frozenset[str]) -> Graph:
        """The optimized graph of a run that feeds the overridable initializers ``names``: they are its inputs,
        so no pass folds them. (``graph`` is the runs' that feed none, their defaults folded.)"""
        known = {t.name for t in self.imported.overridable}
        unknown = sorted(set(names) - known)
        if unknown:
            from wgsentis.errors import InputError

            raise InputError(f"model '{self.name}': {unknown} are not overridable initializers; those are "
                             f"{sorted(known)}")
        return self._optimize(frozenset(names))

    @property
    def outputs(self) -> list[TensorInfo]:
        """The model outputs, including those added with ``add_output``."""
        return list(self.graph.outputs)

    @property
    def layers(self) -> list[Layer]:
        """The layers after optimization, in execution order."""
        return list(self.graph.layers)

    @property
    def constants(self) -> dict[str, np.ndarray]:
        """The constant tensors (weights and folded values) of the optimized graph."""
        return self.graph.constants

    def add_output(self, name: str) -> str:
        """Expose a tensor, or the first output of a layer, as a model output; returns the tensor name."""
        from wgsentis.errors import InputError

        producers = self.imported.producers()
        if name not in producers and name not in self.imported.constants and name not in {
            t.name for t in self.imported.inputs
        }:
            by_layer = {layer.name: layer for layer in self.imported.layers}
            if name not in by_layer:
                raise InputError(
                    f"model '{self.name}': add_output('{name}'): no tensor or layer of that name"
                )
            name = by_layer[name].outputs[0]
        if name not in {t.name for t in self.graph.outputs}:
            self._extra_outputs.append(name)
            self.graph = self._optimize()
        return name

    def __repr__(self) -> str:
        return (f"Model({self.name!r}, inputs={self.inputs}, outputs={self.outputs}, "
                f"layers={len(self.graph.layers)})")


__all__ = ["Dim", "Graph", "Layer", "Model", "Optimizer", "TensorInfo", "captured_names", "subgraphs"]
