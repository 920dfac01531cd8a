"""What nodes promise each other that ONNX's checker leaves to run time, checked on the imported graph before
any pass runs: an If's branches give each output one element type; the com.microsoft QLinear elementwise ops
take scalar scales and zero points; a DictVectorizer's vocabulary has its map input's key type. ONNX Runtime
refuses such models when it builds its session; wgsentis refuses them at load with a ModelLoadError naming the
node, so no backend runs one (each would have given its own answer).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from wgsentis.errors import ModelLoadError
from wgsentis.ir import Graph, Layer, TensorInfo, subgraphs

MS_DOMAIN = "com.microsoft"
ML_DOMAIN = "ai.onnx.ml"
# Inputs that must hold one element (scales and zero points), by op type: ORT's QLinear kernels read them as
# scalars ("Scale and Zero-point must be a scalar").
_SCALAR_INPUTS = {
    "QLinearAdd": (1, 2, 4, 5, 6, 7),
    "QLinearMul": (1, 2, 4, 5, 6, 7),
    "QLinearSigmoid": (1, 2, 3, 4),
    "QLinearLeakyRelu": (1, 2, 3, 4),
}


def check_contracts(graph: Graph, model: str) -> None:
    """Raise ModelLoadError naming the node whose inputs or branches break its op's contract."""
    for scope, layer in _layers(graph):
        if layer.op_type == "If" and not layer.domain:
            _check_if(scope, layer, model)
        elif layer.domain == MS_DOMAIN and layer.op_type in _SCALAR_INPUTS:
            _check_scalars(scope, layer, model)
        elif layer.domain == ML_DOMAIN and layer.op_type == "DictVectorizer":
            _check_dict_vectorizer(scope, layer, model)


def _layers(graph: Graph) -> Iterator[tuple[list[Graph], Layer]]:
    """Every layer with the scopes it sees (its own graph first, then the enclosing ones), subgraphs included."""
    stack: list[list[Graph]] = [[graph]]
    while stack:
        scopes = stack.pop()
        for layer in scopes[0].layers:
            yield scopes, layer
            stack.extend([sub, *scopes] for sub in subgraphs(layer))


def _info(scopes: list[Graph], name: str) -> TensorInfo | None:
    """What the scopes declare of ``name``: its constant, input or value_info, innermost first."""
    for graph in scopes:
        if name in graph.constants:
            value = np.asarray(graph.constants[name])
            return TensorInfo(name, value.dtype, value.shape)
        for info in (*graph.inputs, *graph.outputs):
            if info.name == name and (info.dtype is not None or info.shape is not None):
                return info
        if name in graph.value_info:
            return graph.value_info[name]
    return None


def _branch_dtype(branch: Graph, out: TensorInfo) -> np.dtype | None:
    if out.dtype is not None:
        return out.dtype
    found = _info([branch], out.name)
    return found.dtype if found is not None else None


def _check_if(scopes: list[Graph], layer: Layer, model: str) -> None:
    then_g, else_g = layer.attrs.get("then_branch"), layer.attrs.get("else_branch")
    if not isinstance(then_g, Graph) or not isinstance(else_g, Graph):
        return
    for index, (a, b) in enumerate(zip(then_g.outputs, else_g.outputs, strict=False)):
        then_t, else_t = _branch_dtype(then_g, a), _branch_dtype(else_g, b)
        if then_t is not None and else_t is not None and then_t != else_t and a.kind == b.kind:
            name = layer.outputs[index] if index < len(layer.outputs) else f"#{index}"
            raise ModelLoadError(
                f"model '{model}': node '{layer.name}' (If): output {index} ('{name}') is {then_t.name} from "
                f"then_branch ('{a.name}') but {else_t.name} from else_branch ('{b.name}'); both branches must "
                "give one element type"
            )


def _check_scalars(scopes: list[Graph], layer: Layer, model: str) -> None:
    for position in _SCALAR_INPUTS[layer.op_type]:
        if position >= len(layer.inputs) or not layer.inputs[position]:
            continue
        name = layer.inputs[position]
        info = _info(scopes, name)
        if info is None or info.shape is None or not all(isinstance(d, int) for d in info.shape):
            continue  # unknown until a run: the kernel reads what it is given
        count = math.prod(info.shape)  # type: ignore[arg-type]
        if count != 1:
            raise ModelLoadError(
                f"model '{model}': node '{layer.name}' ({layer.op_type}, {MS_DOMAIN}): input {position} ('{name}') "
                f"has shape {list(info.shape)}, but its scales and zero points must be scalars (one element)"
            )


def _check_dict_vectorizer(scopes: list[Graph], layer: Layer, model: str) -> None:
    info = _info(scopes, layer.inputs[0]) if layer.inputs else None
    if info is None or info.kind != "map" or info.key_dtype is None:
        return
    key = info.key_dtype
    strings = bool(layer.attrs.get("string_vocabulary"))
    if strings != (key == np.dtype(object)):
        vocabulary = "string_vocabulary" if strings else "int64_vocabulary"
        raise ModelLoadError(
            f"model '{model}': node '{layer.name}' (DictVectorizer): its input '{info.name}' is a map with "
            f"{'string' if key == np.dtype(object) else key.name} keys, but the node has a {vocabulary}"
        )
