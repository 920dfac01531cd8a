"""The theoretical profile: per-layer FLOPs, parameters and bytes moved, from one CPU run's shapes;
of the executed graph (after the graph passes) and, for totals comparable with other tools, of the
model as imported (before them).

Convention (``docs/flops.md``): a multiply-add counts 2 FLOPs; a bias add, an activation, a
comparison or one elementwise operation counts 1 per output element; a fused activation adds 1
per output element of its layer. ``params`` are the elements of a layer's constant inputs
(weights and biases). ``bytes`` are read + written: every input tensor (weights included) read
once and every output written once, at the tensor's element size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from wgsentis.backends.cpu import GraphProgram
from wgsentis.ir import Graph, Layer, subgraphs
from wgsentis.model import Model
from wgsentis.ops.spec import spec_of
from wgsentis.ops.registry import flops_of

# Ops whose weight can be pruned (a FusedConv is a Conv with the residual Add after it folded in).


@dataclass
class LayerCost:
    """FLOPs, params and bytes of one layer for concrete input shapes."""

    index: int
    name: str
    op_type: str
    fused: str | None
    weight_names: list[str]
    flops: int
    params: int
    bytes: int
    out_shapes: list[tuple[int, ...] | None] = field(default_factory=list)
    prunable_weight: str | None = None  # the weight magnitude pruning would thin (``prunable_weight``)


def _nbytes(value: Any) -> int:
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, list):
        return sum(_nbytes(v) for v in value)
    return 0


def _graph_of(model: Model | Graph) -> Graph:
    return model.graph if isinstance(model, Model) else model


def tensor_facts(model: Model | Graph, feeds: dict[str, Any],
                 threads: int = 1) -> tuple[dict[str, Any], dict[str, int]]:
    """Run the model (or a graph: ``model.imported``) once on the CPU and record each tensor's shape and
    byte size; returns (name -> shape or None, name -> bytes)."""
    graph = _graph_of(model)
    shapes: dict[str, Any] = {n: tuple(v.shape) for n, v in graph.constants.items()}
    sizes: dict[str, int] = {n: int(v.nbytes) for n, v in graph.constants.items()}
    for n, v in feeds.items():
        shapes[n] = tuple(np.asarray(v).shape) if not isinstance(v, list) else None
        sizes[n] = _nbytes(v if isinstance(v, list) else np.asarray(v))

    def record(layer: Layer, values: list[Any]) -> None:
        for name, value in zip(layer.outputs, values, strict=False):
            if name:
                shapes[name] = tuple(value.shape) if isinstance(value, np.ndarray) else None
                sizes[name] = _nbytes(value)

    program = GraphProgram(graph, threads, branch_parallel=False)
    try:
        program.run(feeds, on_layer=record)
    finally:
        program.close()
    return shapes, sizes


def weight_names(layer: Layer, constants: dict[str, np.ndarray]) -> list[str]:
    """The constant inputs of a layer (weights, biases), in input order."""
    return [n for n in layer.inputs if n and n in constants]


def prunable_weight(layer: Layer, constants: dict[str, np.ndarray]) -> str | None:
    """The weight tensor whose smallest entries pruning would zero (None: the layer has none)."""
    weight = spec_of(layer.op_type).weight_input  # (by op type: a fused layer's domain aside)
    if weight is None:
        return None
    candidates = [layer.inputs[weight]] if len(layer.inputs) > 1 else []
    if layer.op_type == "MatMul" and layer.inputs:
        candidates.append(layer.inputs[0])  # x @ W or W @ x
    for name in candidates:
        value = constants.get(name)
        if value is not None and value.dtype.kind == "f" and value.ndim >= 2:
            return name
    return None


def layer_costs(model: Model | Graph, shapes: dict[str, Any], sizes: dict[str, int]) -> list[LayerCost]:
    """FLOPs, params and bytes of every layer of ``model`` (or of a graph), shapes and sizes from
    ``tensor_facts``."""
    graph = _graph_of(model)
    consts = graph.constants
    out: list[LayerCost] = []
    for i, layer in enumerate(graph.layers):
        ins = [shapes.get(n) if n else None for n in layer.inputs]
        outs = [shapes.get(n) if n else None for n in layer.outputs]
        try:
            flops = flops_of(layer, ins, outs)
        except Exception:  # a rule that cannot handle unusual shapes counts nothing rather than fail
            flops = 0
        if layer.fused_activation is not None and outs and outs[0] is not None:
            flops += math.prod(outs[0])
        names = weight_names(layer, consts)
        params = sum(int(consts[n].size) for n in names)
        moved = sum(sizes.get(n, 0) for n in set(layer.inputs) if n) + sum(sizes.get(n, 0) for n in layer.outputs if n)
        fused = layer.fused_activation[0] if layer.fused_activation else None
        out.append(LayerCost(i, layer.name, layer.op_type, fused, names, int(flops), params, int(moved), outs,
                             prunable_weight(layer, consts)))
    return out


def _total_params(costs: list[LayerCost], constants: dict[str, np.ndarray]) -> int:
    used = {n for c in costs for n in c.weight_names}
    return sum(int(constants[n].size) for n in used if n in constants)


def _constant_layers(graph: Graph) -> tuple[set[int], set[str]]:
    """The layers of ``graph`` that compute constants (ONNX Constant nodes, and any layer whose inputs are
    all constant: the weights of an export that builds them with ConstantOfShape, Reshape or Cast), and
    every constant tensor's name. Tools fold these once at load, so they count no FLOPs, and what they
    produce counts as parameters where a layer reads it."""
    const = set(graph.constants)
    folded: set[int] = set()
    for i, layer in enumerate(graph.layers):
        ins = [n for n in layer.inputs if n]
        if subgraphs(layer) or layer.op_type.startswith("Random"):
            continue  # control flow, or a fresh value each run: not a constant
        if (ins and all(n in const for n in ins)) or (not ins and layer.op_type == "Constant"):
            folded.add(i)
            const.update(o for o in layer.outputs if o)
    return folded, const


def model_totals(model: Model, feeds: dict[str, Any], threads: int = 1) -> dict[str, Any]:
    """FLOPs, params and layers of the model as imported, before the graph passes (``model.imported``):
    what other tools count, BatchNormalization and activations still layers of their own, the layers that
    only compute constants folded (no FLOPs; their outputs are parameters). Runs the imported graph once on
    the CPU for its shapes; where it cannot run as imported, the totals are None and ``error`` says why."""
    graph = model.imported
    names = {t.name for t in graph.inputs}
    try:
        # counted for the profile's inputs (its batch size included): the imported graph's own input shapes
        # may still say batch 1 where the profile set a symbolic batch on the optimized graph
        shapes, sizes = tensor_facts(graph, {n: v for n, v in feeds.items() if n in names}, threads)
    except Exception as exc:  # the totals are an extra: a graph that runs only once optimized still profiles
        return {"flops": None, "params": None, "layers": None, "error": f"{type(exc).__name__}: {exc}"}
    folded, const = _constant_layers(graph)
    costs = [c for c in layer_costs(graph, shapes, sizes) if c.index not in folded]
    params: dict[str, int] = {}
    for i in (c.index for c in costs):
        for n in graph.layers[i].inputs:
            shape = shapes.get(n) if n in const else None
            if shape is not None:  # each constant tensor once, however many layers read it
                params[n] = math.prod(shape)
    return {"flops": sum(c.flops for c in costs), "params": sum(params.values()), "layers": len(costs), "error": None}


def flops_profile(costs: list[LayerCost], constants: dict[str, np.ndarray],
                  imported: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``flops_profile`` section: per-layer FLOPs and params of the executed layers and their totals (a
    weight shared by several layers counts once in ``total_params``), and ``model_total_flops`` /
    ``model_total_params`` / ``model_layers`` of the model as imported (``model_totals``; None where they
    could not be counted, ``model_totals_error`` says why)."""
    used = {n for c in costs for n in c.weight_names}
    imported = imported or {}
    out = {
        "convention": "a multiply-add counts 2 FLOPs; bias adds, activations and elementwise ops 1 per output "
                      "element; params are the elements of a layer's constant inputs",
        "layers": [{"name": c.name, "op_type": c.op_type, "flops": c.flops, "params": c.params, "bytes": c.bytes}
                   for c in costs],
        "total_flops": sum(c.flops for c in costs),
        "total_params": sum(int(constants[n].size) for n in used if n in constants),
        "total_bytes": sum(c.bytes for c in costs),
        "model_total_flops": imported.get("flops"),
        "model_total_params": imported.get("params"),
        "model_layers": imported.get("layers"),
        "model_totals": "counted on the model as imported, before wgsentis's graph passes (BatchNormalization "
                        "folding, activation fusion), layers that only compute constants folded: comparable with "
                        "other tools; total_flops and total_params count the layers that execute",
    }
    if imported.get("error"):
        out["model_totals_error"] = imported["error"]
    return out


def flops_text(flops: float | None) -> str:
    """FLOPs with the unit that fits: '290.2 kFLOPs', '8.207 GFLOPs' (four significant digits)."""
    if flops is None:
        return "-"
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(flops) >= scale:
            return f"{flops / scale:.4g} {unit}FLOPs"
    return f"{flops:.0f} FLOPs"
