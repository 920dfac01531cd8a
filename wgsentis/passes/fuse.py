"""Fusions: BatchNormalization folded into the preceding Conv's weights; activations folded into
the layer that produces their input (the kernel applies them on its output)."""

from __future__ import annotations

import numpy as np

from wgsentis.model import Graph, Layer

FUSABLE_ACTIVATIONS = frozenset({
    "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip", "HardSigmoid", "HardSwish", "Elu", "Selu",
    "Softplus", "Gelu", "Mish",
})
# Layers whose kernels (CPU and GPU) apply a fused activation to their output: the products, and the
# residual Add/Sum (ResNet's Add + Relu).
_ACTIVATION_HOSTS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul", "Add", "Sum"})


def _single_consumer(consumers: dict[str, list[Layer]], name: str) -> Layer | None:
    users = consumers.get(name, [])
    return users[0] if len(users) == 1 and users[0].inputs.count(name) == 1 else None


class FuseConvBatchNorm:
    """Conv -> BatchNormalization (inference, constant statistics) becomes one Conv."""

    def run(self, graph: Graph, opsets: dict[str, int]) -> None:
        outputs = {o.name for o in graph.outputs}
        consts = graph.constants
        removed: set[int] = set()
        consumers = graph.consumers()  # stays valid: a fold only renames the Conv's output to BN's
        for conv in graph.layers:
            if conv.op_type != "Conv" or conv.domain or conv.fused_activation or len(conv.inputs) < 2:
                continue
            y = conv.outputs[0]
            bn = _single_consumer(consumers, y)
            if (bn is None or bn.op_type != "BatchNormalization" or bn.domain or y in outputs
                    or bn.inputs[0] != y or len(bn.inputs) != 5
                    or any(o for o in bn.outputs[1:]) or bn.attrs.get("training_mode", 0)
                    or not all(n in consts for n in bn.inputs[1:])):
                continue
            w_name = conv.inputs[1]
            b_name = conv.inputs[2] if len(conv.inputs) > 2 else ""
            if w_name not in consts or (b_name and b_name not in consts):
                continue
            w = consts[w_name]
            if w.dtype.kind != "f":
                continue
            scale, beta, mean, var = (consts[n].astype(np.float64) for n in bn.inputs[1:])
            eps = float(bn.attrs.get("epsilon", 1e-5))
            factor = scale / np.sqrt(var + eps)  # (C_out,)
            bias = consts[b_name].astype(np.float64) if b_name else np.zeros_like(mean)
            new_w = (w.astype(np.float64) * factor.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
            new_b = ((bias - mean) * factor + beta).astype(w.dtype)
            base = f"{conv.name}/bn_folded"
            consts[base + "/W"] = new_w
            consts[base + "/B"] = new_b
            conv.inputs = [conv.inputs[0], base + "/W", base + "/B"]
            conv.outputs = [bn.outputs[0]]
            removed.add(id(bn))
        if removed:
            graph.layers = [layer for layer in graph.layers if id(layer) not in removed]


class FuseActivation:
    """Conv/ConvTranspose/Gemm/MatMul/Add/Sum followed by an elementwise activation becomes one layer."""

    def run(self, graph: Graph, opsets: dict[str, int]) -> None:
        outputs = {o.name for o in graph.outputs}
        removed: set[int] = set()
        consumers = graph.consumers()
        for host in graph.layers:
            if host.op_type not in _ACTIVATION_HOSTS or host.domain or host.fused_activation:
                continue
            if len(host.outputs) != 1 or host.outputs[0] in outputs:
                continue
            act = _single_consumer(consumers, host.outputs[0])
            if act is None or act.op_type not in FUSABLE_ACTIVATIONS or act.domain:
                continue
            attrs = dict(act.attrs)
            if act.op_type == "Clip" and len(act.inputs) > 1:
                bounds = act.inputs[1:]
                if not all((not n) or n in graph.constants for n in bounds):
                    continue
                for key, n in zip(("min", "max"), bounds, strict=False):
                    if n:
                        attrs[key] = graph.constants[n]
            host.fused_activation = (act.op_type, attrs)
            host.outputs = list(act.outputs)
            removed.add(id(act))
        if removed:
            graph.layers = [layer for layer in graph.layers if id(layer) not in removed]
