"""Model IR: graphs of layers over named tensors, independent of ONNX protobufs and of backends."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Dim = int | str | None  # concrete size, symbolic name, or unknown


@dataclass
class TensorInfo:
    """Name, element type and (possibly symbolic) shape of a tensor; shape None means unknown rank."""

    name: str
    dtype: np.dtype | None
    shape: tuple[Dim, ...] | None
    kind: str = "tensor"  # "tensor", "sequence", "optional", "map"
    key_dtype: np.dtype | None = None  # a map's keys: int64, or object for strings (None: not a map, or unknown)

    def __repr__(self) -> str:
        dt = self.dtype.name if self.dtype is not None else "?"
        shp = "?" if self.shape is None else "(" + ", ".join("?" if d is None else str(d) for d in self.shape) + ")"
        prefix = "" if self.kind == "tensor" else f"{self.kind} of "
        return f"TensorInfo({self.name!r}, {prefix}{dt}, {shp})"


@dataclass
class Layer:
    """One node of the graph: an op applied to named inputs ("" for an omitted optional input)."""

    name: str
    op_type: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    domain: str = ""
    opset: int = 0  # the model's opset for this layer's domain
    fused_activation: tuple[str, dict[str, Any]] | None = None  # activation folded into this layer

    def __repr__(self) -> str:
        return f"Layer({self.name!r}, {self.op_type}, in={self.inputs}, out={self.outputs})"


@dataclass
class Graph:
    """A (sub)graph: inputs, outputs, constant tensors and layers in topological order."""

    name: str
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    constants: dict[str, np.ndarray]
    layers: list[Layer]
    value_info: dict[str, TensorInfo] = field(default_factory=dict)
    # Inputs an initializer gives a default (in ``constants``, which a run may override by feeding them; top
    # level only). Runs that do not feed them run this graph, their defaults folded; see Model.feeding.
    overridable: list[TensorInfo] = field(default_factory=list)

    def producers(self) -> dict[str, Layer]:
        """Map each tensor name to the layer that writes it."""
        return {o: layer for layer in self.layers for o in layer.outputs if o}

    def consumers(self) -> dict[str, list[Layer]]:
        """Map each tensor name to the layers that read it (subgraph captures included)."""
        users: dict[str, list[Layer]] = {}
        for layer in self.layers:
            for name in set(layer.inputs) | captured_names(layer):
                if name:
                    users.setdefault(name, []).append(layer)
        return users


def subgraphs(layer: Layer) -> list[Graph]:
    """The subgraphs held in a layer's attributes (If branches, Loop and Scan bodies)."""
    found: list[Graph] = []
    for value in layer.attrs.values():
        if isinstance(value, Graph):
            found.append(value)
        elif isinstance(value, list):
            found.extend(v for v in value if isinstance(v, Graph))
    return found


def captured_names(layer: Layer) -> set[str]:
    """Names from the enclosing scope that a layer's subgraphs read (outer-scope captures)."""
    names: set[str] = set()
    for graph in subgraphs(layer):
        local = {t.name for t in graph.inputs} | set(graph.constants)
        local |= {o for inner in graph.layers for o in inner.outputs}
        for inner in graph.layers:
            for name in list(inner.inputs) + sorted(captured_names(inner)):
                if name and name not in local:
                    names.add(name)
        for out in graph.outputs:
            if out.name not in local:
                names.add(out.name)
    return names


class Model:
    """An imported model: the graph as imported, and the optimized graph that workers run.

    ``add_output`` re-optimizes from the imported graph, so any intermediate tensor can be
    exposed even where a fusion would otherwise have removed it.
    """

    def __init__(self, graph: Graph, opsets: dict[str, int], name: str = "model", source: str = "",
                 metadata: dict[str, str] | None = None) -> None:
        self.imported = graph
        self.opsets = opsets
        self.name = name
        self.source = source
        self.metadata = metadata or {}
        self._extra_outputs: list[str] = []
        self.graph = self._optimize()

    def _optimize(self, fed: frozenset[str] = frozenset()) -> Graph:
        """The optimized graph; ``fed``: overridable initializers it takes as inputs instead of constants."""
        from wgsentis.passes import optimize  # passes depend on the IR, not the other way round

        graph = copy.copy(self.imported)
        graph.layers = [copy.copy(layer) for layer in self.imported.layers]
        graph.constants = {k: v for k, v in self.imported.constants.items() if k not in fed}
        graph.inputs = list(self.imported.inputs) + [t for t in self.imported.overridable if t.name in fed]
        graph.outputs = list(self.imported.outputs) + [
            self._info_of(name) for name in self._extra_outputs
        ]
        return optimize(graph, self.opsets)

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
