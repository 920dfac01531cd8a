"""``prune()``: write a pruned copy of an ONNX model, from a sparsity plan (Sparsify-style recipes).

A plan is one level for every prunable layer, a dict ``{layer or node name: level}``, or a level with a
sensitivity budget from a loss profile (``{"level": 0.8, "loss_profile": ..., "keep_dense": 0.2}``: the
most sensitive ``keep_dense`` fraction of the prunable layers stays dense). Prunable layers are Conv,
ConvTranspose, Gemm and MatMul with a constant float weight (``flops.prunable_weight``).

Unstructured pruning zeroes the smallest-magnitude weight entries (``pruning.prune``); every shape stays.
Structured pruning removes whole output channels (the filters of lowest L2 norm) and follows each channel
to every reader (``prune_channels``); whatever cannot be traced safely stays dense, so the written model
always has the original graph outputs' shapes. Result: ``PruneResult`` (``prune_result``).

This module reads the plan and runs the steps; the model comes in and goes out through ``prune_export``,
its constants are read, folded and written through ``prune_constants``.
"""
from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
from onnx import ModelProto

from wgsentis.errors import InputError
from wgsentis.ir import Layer
from wgsentis.profiler.flops import prunable_weight
from wgsentis.profiler.prune_channels import prune_channels
from wgsentis.profiler.prune_constants import Constants, fold_constants
from wgsentis.profiler.prune_export import check_pruned, proto_of, write_pruned
from wgsentis.profiler.prune_result import LayerPruning, PruneResult
from wgsentis.profiler.pruning import prune as magnitude_prune


def _node_names(proto: ModelProto) -> list[str]:
    """The layer name of each top-level node, as the importer gives it (what profiles report)."""
    used: set[str] = set()
    fresh = 0
    names = []
    for i, node in enumerate(proto.graph.node):
        name = node.name or f"{node.op_type}_{i}"
        if name in used:
            fresh += 1
            name = f"{name}__{fresh}"
        used.add(name)
        names.append(name)
    return names


# -- the plan ---------------------------------------------------------------------------------------------
def _check_level(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating) \
            or not math.isfinite(float(value)) or not 0.0 <= float(value) < 1.0:
        raise InputError(f"prune(plan=...): {where} is {value!r}; a sparsity level must be a number in [0, 1)")
    return float(value)


def _loss_layers(profile: Any) -> list[dict[str, Any]]:
    data = profile
    for attr in ("to_dict", "data"):  # a LossProfile object: its JSON document
        if not isinstance(data, dict) and hasattr(data, attr):
            data = getattr(data, attr)
            data = data() if callable(data) else data
    layers = data.get("layers") if isinstance(data, dict) else None
    if not isinstance(layers, list):
        raise InputError("prune(plan={'loss_profile': ...}): expected a loss profile (or its dict) with a "
                         f"'layers' list, got {type(profile).__name__}")
    return [e for e in layers if isinstance(e, dict)]


def _levels(plan: Any, prunable: dict[str, tuple[int, str]], names: list[str],
            proto: ModelProto) -> dict[str, float]:
    """Level per prunable layer name (a dict with 'level', 'loss_profile' or 'keep_dense' keys, none of them a
    layer name, is the loss-profile plan)."""
    if isinstance(plan, dict) and ("loss_profile" in plan or "keep_dense" in plan or "level" in plan) \
            and not set(plan) & set(names):
        unknown = set(plan) - {"level", "loss_profile", "keep_dense"}
        if unknown:
            raise InputError(f"prune(plan=...): unknown key(s) {sorted(unknown)} in a loss-profile plan "
                             "(keys: level, loss_profile, keep_dense)")
        if "level" not in plan:
            raise InputError("prune(plan=...): a loss-profile plan needs plan['level']")
        level = _check_level(plan["level"], "plan['level']")
        keep = plan.get("keep_dense", 0.0)
        if isinstance(keep, bool) or not isinstance(keep, int | float) or not 0.0 <= float(keep) <= 1.0:
            raise InputError(f"prune(plan=...): plan['keep_dense'] is {keep!r}; it must be a fraction in [0, 1]")
        if "loss_profile" not in plan:
            raise InputError("prune(plan=...): plan['keep_dense'] needs plan['loss_profile'] to rank the layers")
        by_weight = {w: n for n, (_, w) in prunable.items()}
        scores: dict[str, float] = {}
        for e in _loss_layers(plan["loss_profile"]):
            s = e.get("sensitivity")
            if not isinstance(s, int | float) or isinstance(s, bool) or not math.isfinite(float(s)):
                continue
            name = e.get("name") if e.get("name") in prunable else next(
                (by_weight[w] for w in e.get("weight_names") or [] if w in by_weight), None)
            if name is not None:
                scores[name] = max(scores.get(name, -math.inf), float(s))
        # The most sensitive fraction of all prunable layers stays dense; layers the loss profile did not
        # score are pruned at the level (it measured nothing against them).
        n_keep = min(round(float(keep) * len(prunable)), len(scores))
        dense = set(sorted(scores, key=lambda n: -scores[n])[:n_keep])
        return {n: 0.0 if n in dense else level for n in prunable}
    if isinstance(plan, dict):
        levels = dict.fromkeys(prunable, 0.0)
        by_output = {o: names[i] for i, node in enumerate(proto.graph.node) for o in node.output}
        ops = {names[i]: node.op_type for i, node in enumerate(proto.graph.node)}
        for key, value in plan.items():
            if not isinstance(key, str):
                raise InputError(f"prune(plan=...): layer names must be strings, got {key!r}")
            name = key if key in ops else by_output.get(key, key)
            if name not in ops:
                hint = ", ".join(list(prunable)[:6])
                raise InputError(f"prune(plan=...): no layer or node named '{key}' in the model "
                                 f"(prunable layers include: {hint})")
            if name not in prunable:
                raise InputError(f"prune(plan=...): layer '{key}' ({ops[name]}) has no prunable weight (only Conv, "
                                 "ConvTranspose, Gemm and MatMul with a constant float weight can be pruned)")
            levels[name] = _check_level(value, f"the level of layer '{key}'")
        return levels
    return dict.fromkeys(prunable, _check_level(plan, "the level"))


def _sparsity_of(before: dict[str, int], proto: ModelProto, consts: Constants,
                 prunable: dict[str, tuple[int, str]], structured: bool, report: dict[str, LayerPruning]) -> None:
    for name, (i, _) in prunable.items():
        node = proto.graph.node[i]
        layer = Layer(name, node.op_type, list(node.input), list(node.output))
        weight = prunable_weight(layer, {n: consts.get(n) for n in node.input if consts.get(n) is not None})
        if weight is None:
            continue
        w = consts.get(weight)
        if structured:
            report[name].sparsity = round(1.0 - w.size / before[name], 6)
        else:
            report[name].sparsity = round(float(np.count_nonzero(w == 0)) / max(w.size, 1), 6)


# -- the entry point --------------------------------------------------------------------------------------
def prune(model_or_path: Any, plan: float | dict[str, Any], structured: bool = False,
          output: str | os.PathLike | None = None) -> PruneResult:
    """Prune a model (path, bytes, ModelProto or wgsentis Model) by ``plan``; returns a ``PruneResult``.

    ``plan``: a level in [0, 1) for every prunable layer; ``{layer or node name: level}``; or
    ``{"level": L, "loss_profile": <loss profile or its dict>, "keep_dense": F}`` (the most sensitive
    fraction F of the prunable layers, by the loss profile's ``sensitivity``, stays dense). ``structured``:
    remove the weakest output channels (and the inputs that read them) instead of zeroing entries.
    ``output``: also write the model there (inline; external data beside it when over 2 GiB).
    """
    if not isinstance(structured, bool):
        raise InputError(f"prune(structured={structured!r}): structured must be True or False")
    proto = proto_of(model_or_path)
    if proto.ir_version < 4:
        # Before IR 4 every initializer had to be a graph input too; from 4 on that is optional and means the
        # same (an overridable default), so the pruned copies' new initializers need no input entries.
        proto.ir_version = 4
    original = ModelProto()
    original.CopyFrom(proto)
    fold_constants(proto)
    names = _node_names(proto)
    consts = Constants(proto)
    arrays = consts.arrays()
    prunable: dict[str, tuple[int, str]] = {}
    for i, node in enumerate(proto.graph.node):
        layer = Layer(names[i], node.op_type, list(node.input), list(node.output))
        weight = prunable_weight(layer, arrays)
        if weight is not None:
            prunable[names[i]] = (i, weight)
    levels = _levels(plan, prunable, names, proto)
    report = {n: LayerPruning(n, proto.graph.node[i].op_type, w, levels[n], 0.0) for n, (i, w) in prunable.items()}
    if not any(levels.values()):  # nothing to prune: the model exactly as given (nothing folded either)
        path = write_pruned(original, output, check=False) if output else None
        return PruneResult(original, structured, report, path)
    before = {n: int(arrays[w].size) for n, (_, w) in prunable.items()}
    if structured:
        prune_channels(proto, consts, levels, names, prunable, report)
        # Intermediate shapes changed: stale annotations would contradict them (ORT checks them).
        del proto.graph.value_info[:]
    else:
        for name, (i, weight) in prunable.items():
            if levels[name] > 0:
                node = proto.graph.node[i]
                k = list(node.input).index(weight)
                consts.write(node, k, magnitude_prune(consts.get(weight), levels[name]))
    _sparsity_of(before, proto, consts, prunable, structured, report)
    consts.finish()  # last: it may remove Constant nodes, which renumbers the nodes
    path = write_pruned(proto, output) if output is not None else None
    if path is None:
        check_pruned(proto, None)
    return PruneResult(proto, structured, report, path)
