"""The IR: graphs of layers over named tensors, independent of ONNX protobufs, of passes and of backends.

Everything that transforms or runs a graph imports this module; it imports nothing of wgsentis."""

from __future__ import annotations

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


def constant_array_ids(graph: Graph) -> frozenset[int]:
    """The ids of the constant arrays of ``graph`` and of its subgraphs (they live as long as the graph)."""
    ids: set[int] = set()
    stack = [graph]
    while stack:
        g = stack.pop()
        ids.update(id(v) for v in g.constants.values() if isinstance(v, np.ndarray))
        for layer in g.layers:
            stack.extend(subgraphs(layer))
    return frozenset(ids)


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
