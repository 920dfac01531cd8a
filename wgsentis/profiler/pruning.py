"""Pruning sensitivity: how much the model output moves when one layer's weights are pruned.

For each layer with a weight (Conv, ConvTranspose, Gemm, MatMul) among the top layers by time,
the smallest-magnitude fraction of its weight tensor is set to zero (magnitude pruning, ties
broken by position) and the model is run on the CPU backend with the profile's inputs. The
sensitivity is the relative L2 change of the outputs, ``||y_pruned - y|| / ||y||`` over all float
outputs together. The speedup is an *estimate*, not a measurement: a compute-bound layer is
assumed to save ``time_ms * sparsity`` (a sparse kernel skipping the zeros perfectly); a
memory-bound layer is assumed to save nothing (its time goes to moving activations).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from wgsentis.backends.cpu import GraphProgram
from wgsentis.model import Model
from wgsentis.profiler.flops import prunable_weight

SPARSITIES = (0.5, 0.7, 0.9)


def prune(weight: np.ndarray, sparsity: float) -> np.ndarray:
    """A copy of ``weight`` with its ``sparsity`` fraction of smallest-magnitude entries zeroed."""
    flat = weight.reshape(-1)
    k = round(sparsity * flat.size)
    out = flat.copy()
    if k > 0:
        order = np.argsort(np.abs(flat), kind="stable")
        out[order[:k]] = 0
    return out.reshape(weight.shape)


def flat_outputs(values: list[Any]) -> np.ndarray:
    parts = [np.asarray(v, dtype=np.float64).reshape(-1) for v in values
             if isinstance(v, np.ndarray) and v.dtype.kind == "f"]
    return np.concatenate(parts) if parts else np.zeros(0)


def sensitivity(model: Model, feeds: dict[str, Any], layer_indices: list[int], threads: int = 1,
                sparsities: tuple[float, ...] = SPARSITIES) -> dict[int, dict[str, Any]]:
    """Relative output change per sparsity for each given layer that has a prunable weight."""
    graph = copy.copy(model.graph)
    graph.constants = dict(model.graph.constants)
    program = GraphProgram(graph, threads, branch_parallel=False)
    results: dict[int, dict[str, Any]] = {}
    try:
        reference = flat_outputs(program.run(feeds))
        norm = float(np.linalg.norm(reference)) or 1.0
        for i in layer_indices:
            layer = graph.layers[i]
            name = prunable_weight(layer, graph.constants)
            if name is None:
                continue
            original = graph.constants[name]
            changes = []
            try:
                for s in sparsities:
                    graph.constants[name] = prune(original, s)
                    out = flat_outputs(program.run(feeds))
                    changes.append(float(np.linalg.norm(out - reference)) / norm)
            finally:
                graph.constants[name] = original
            results[i] = {"weight": name, "sparsities": list(sparsities), "relative_l2_change": changes}
    finally:
        program.close()
    return results


def add_speedups(entry: dict[str, Any], time_ms: float, bound: str) -> dict[str, Any]:
    """Attach the estimated time saved (ms) per sparsity: ``time_ms * s`` when compute-bound, else 0."""
    saved = [round(time_ms * s, 4) if bound == "compute" else 0.0 for s in entry["sparsities"]]
    return {**entry, "estimated_saved_ms": saved,
            "estimate": "compute-bound layers: time_ms * sparsity; memory-bound: 0 (an estimate, not measured)"}


# -- the loss profile ---------------------------------------------------------------------------------------------
# Sparsify's "loss profile": how much each prunable layer, pruned alone, moves the model's outputs. Every layer
# with a constant weight (Conv, FusedConv, ConvTranspose, Gemm, MatMul) is magnitude-pruned at each level in
# turn and the model run on the CPU oracle (numpy, deterministic) with the sample inputs; the metrics compare
# its outputs with the dense model's:
#   rel_l2          ||y_pruned - y|| / ||y|| over all float outputs together;
#   kl              for classifier-like outputs (one probability or logit vector per item: float, (N, C) once
#                   trailing size-1 dims are dropped, C >= 2; logits go through a softmax): KL(p_dense || p_pruned)
#                   in nats, the mean over items (and outputs); null when no output is classifier-like;
#   top1_agreement  the fraction of items whose arg-max class is unchanged; null likewise.
# A layer's sensitivity is the mean of its rel_l2 over the profiled levels: one number that grows with how much
# the layer's pruning moves the outputs at every level (the levels' spread weighs them alike).
