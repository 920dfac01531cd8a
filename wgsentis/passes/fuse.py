"""Fusions: BatchNormalization folded into the preceding Conv's weights; activations folded into
the layer that produces their input (the kernel applies them on its output); a residual Add folded
into the Conv that produces one of its inputs (FusedConv)."""

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


class FuseResidualAdd:
    """Conv -> Add (or a two-input Sum) with another tensor Z becomes one FusedConv layer computing
    act(Conv(X, W, B) + Z), the Add's fused activation included (ResNet's residual Add + Relu): the GPU
    adds Z in the convolution's epilogue instead of a pass of its own over three tensors. The fused
    layer takes the Conv's name and the Add's place in the order (Z is ready there), and inputs
    [X, W, B, Z]. Runs after FuseActivation, which fuses the activation into the Add first."""

    def run(self, graph: Graph, opsets: dict[str, int]) -> None:
        outputs = {o.name for o in graph.outputs}
        producers = graph.producers()
        consumers = graph.consumers()
        position = {id(layer): i for i, layer in enumerate(graph.layers)}
        removed: set[int] = set()
        for add in graph.layers:
            if add.op_type not in ("Add", "Sum") or add.domain or len(add.inputs) != 2 or len(add.outputs) != 1:
                continue
            if add.attrs.get("broadcast") or add.attrs.get("axis") is not None or add.inputs[0] == add.inputs[1]:
                continue  # opset < 7 broadcasting, or x + x
            candidates = []
            for k, name in enumerate(add.inputs):
                conv = producers.get(name)
                if (conv is None or conv.op_type != "Conv" or conv.domain or conv.fused_activation
                        or id(conv) in removed or len(conv.outputs) != 1 or name in outputs
                        or _single_consumer(consumers, name) is not add or len(conv.inputs) < 2):
                    continue
                candidates.append((position[id(conv)], k, conv))
            if not candidates:
                continue
            _, k, conv = max(candidates, key=lambda c: c[0])  # the later Conv: the other input is ready
            bias = conv.inputs[2] if len(conv.inputs) > 2 else ""
            fused = Layer(name=conv.name, op_type="FusedConv", inputs=[conv.inputs[0], conv.inputs[1], bias,
                                                                       add.inputs[1 - k]],
                          outputs=list(add.outputs), attrs=dict(conv.attrs), domain="", opset=conv.opset,
                          fused_activation=add.fused_activation)
            graph.layers[position[id(add)]] = fused
            removed.add(id(conv))
        if removed:
            graph.layers = [layer for layer in graph.layers if id(layer) not in removed]
