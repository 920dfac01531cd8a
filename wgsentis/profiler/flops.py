"""The theoretical profile: per-layer FLOPs, parameters and bytes moved, from one CPU run's shapes.

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
from wgsentis.model import Layer, Model
from wgsentis.ops.registry import flops_of

WEIGHT_INPUT = {"Conv": 1, "ConvTranspose": 1, "Gemm": 1, "MatMul": 1}  # ops whose weight can be pruned


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


def _nbytes(value: Any) -> int:
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, list):
        return sum(_nbytes(v) for v in value)
    return 0


def tensor_facts(model: Model, feeds: dict[str, Any], threads: int = 1) -> tuple[dict[str, Any], dict[str, int]]:
    """Run the model once on the CPU and record each tensor's shape and byte size; returns
    (name -> shape or None, name -> bytes)."""
    shapes: dict[str, Any] = {n: tuple(v.shape) for n, v in model.graph.constants.items()}
    sizes: dict[str, int] = {n: int(v.nbytes) for n, v in model.graph.constants.items()}
    for n, v in feeds.items():
        shapes[n] = tuple(np.asarray(v).shape) if not isinstance(v, list) else None
        sizes[n] = _nbytes(v if isinstance(v, list) else np.asarray(v))

    def record(layer: Layer, values: list[Any]) -> None:
        for name, value in zip(layer.outputs, values, strict=False):
            if name:
                shapes[name] = tuple(value.shape) if isinstance(value, np.ndarray) else None
                sizes[name] = _nbytes(value)

    program = GraphProgram(model.graph, threads, branch_parallel=False)
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
    if layer.op_type not in WEIGHT_INPUT:
        return None
    candidates = [layer.inputs[WEIGHT_INPUT[layer.op_type]]] if len(layer.inputs) > 1 else []
    if layer.op_type == "MatMul" and layer.inputs:
        candidates.append(layer.inputs[0])  # x @ W or W @ x
    for name in candidates:
        value = constants.get(name)
        if value is not None and value.dtype.kind == "f" and value.ndim >= 2:
            return name
    return None


def layer_costs(model: Model, shapes: dict[str, Any], sizes: dict[str, int]) -> list[LayerCost]:
    """FLOPs, params and bytes of every layer of ``model`` (shapes and sizes from ``tensor_facts``)."""
    consts = model.constants
    out: list[LayerCost] = []
    for i, layer in enumerate(model.layers):
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
        out.append(LayerCost(i, layer.name, layer.op_type, fused, names, int(flops), params, int(moved), outs))
    return out


def flops_profile(costs: list[LayerCost], constants: dict[str, np.ndarray]) -> dict[str, Any]:
    """The ``flops_profile`` section: per-layer FLOPs and params and the model totals (a weight shared
    by several layers counts once in ``total_params``)."""
    used = {n for c in costs for n in c.weight_names}
    return {
        "convention": "a multiply-add counts 2 FLOPs; bias adds, activations and elementwise ops 1 per output "
                      "element; params are the elements of a layer's constant inputs",
        "layers": [{"name": c.name, "op_type": c.op_type, "flops": c.flops, "params": c.params, "bytes": c.bytes}
                   for c in costs],
        "total_flops": sum(c.flops for c in costs),
        "total_params": sum(int(constants[n].size) for n in used if n in constants),
        "total_bytes": sum(c.bytes for c in costs),
    }
