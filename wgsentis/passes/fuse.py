"""Fusions: HardSwish spelled as x * Clip(x + 3, 0, 6) / 6 made one layer; BatchNormalization folded
into the preceding Conv's weights; per-channel constant Mul/Add/Sub/Div folded into the Conv or
BatchNormalization before them, or else into an unpadded Conv after them; activations folded into
the layer that produces their input (the kernel applies them on its output); a residual Add folded
into the Conv that produces one of its inputs (FusedConv)."""

from __future__ import annotations

import numpy as np

from wgsentis.ir import Graph, Layer
from wgsentis.ops.activations import ELEMENTWISE_OPS, FUSABLE

# Layers whose kernels (CPU and GPU) apply a fused activation to their output: the products, the
# residual Add/Sum (ResNet's Add + Relu), and BatchNormalization (DenseNet's pre-activation BN + Relu).
# Which activations they apply: the records marked `fusable` (ops/activations.py FUSABLE).
_ACTIVATION_HOSTS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul", "Add", "Sum", "BatchNormalization"})


def _graph_maps(graph: Graph) -> tuple[set[str], dict[str, Layer], dict[str, list[Layer]], dict[int, int]]:
    """The graph output names, each tensor's producer and readers, and each layer's index (by id)."""
    return ({o.name for o in graph.outputs}, graph.producers(), graph.consumers(),
            {id(layer): i for i, layer in enumerate(graph.layers)})


def _drop(graph: Graph, removed: set[int]) -> None:
    """Remove the layers whose ids are in ``removed`` (the ones a pass folded into others)."""
    if removed:
        graph.layers = [layer for layer in graph.layers if id(layer) not in removed]


def _conv_bias64(consts: dict[str, np.ndarray], conv: Layer) -> np.ndarray:
    """``conv``'s bias in float64 (zeros where it has none)."""
    b_name = conv.inputs[2] if len(conv.inputs) > 2 else ""
    return consts[b_name].astype(np.float64) if b_name else np.zeros(consts[conv.inputs[1]].shape[0])


def _set_conv_params(consts: dict[str, np.ndarray], conv: Layer, w64: np.ndarray, bias64: np.ndarray,
                     base: str) -> None:
    """Store new float64 weights and bias for ``conv`` in its weights' dtype, as ``base``/W and ``base``/B."""
    dtype = consts[conv.inputs[1]].dtype
    consts[base + "/W"] = w64.astype(dtype)
    consts[base + "/B"] = bias64.astype(dtype)
    conv.inputs = [conv.inputs[0], base + "/W", base + "/B"]


def _rescale_conv(consts: dict[str, np.ndarray], conv: Layer, scale: np.ndarray, shift, base: str,
                  center=0.0) -> None:
    """Give ``conv`` new weights W * scale and bias (B - center) * scale + shift per output channel (all in
    float64, stored in W's dtype as ``base``/W and ``base``/B): a per-channel affine after it, folded."""
    w = consts[conv.inputs[1]]
    bias = _conv_bias64(consts, conv)
    _set_conv_params(consts, conv, w.astype(np.float64) * scale.reshape((-1,) + (1,) * (w.ndim - 1)),
                     (bias - center) * scale + shift, base)


def single_consumer(consumers: dict[str, list[Layer]], name: str) -> Layer | None:
    """The one layer that reads tensor ``name``, once; None where several read it (or one reads it twice)."""
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
            bn = single_consumer(consumers, y)
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
            _rescale_conv(consts, conv, factor, beta, f"{conv.name}/bn_folded", center=mean)
            conv.outputs = [bn.outputs[0]]
            removed.add(id(bn))
        _drop(graph, removed)


def _channel_vector(c: np.ndarray, rank: int, channels: int) -> np.ndarray | None:
    """``c`` as a (channels,) vector when it broadcasts along axis 1 of a rank-``rank`` (N, C, ...)
    tensor without growing it (a scalar, (C,), (C, 1, 1), (1, C, 1, 1), ...); None otherwise."""
    if c.ndim > rank or c.dtype.kind != "f":
        return None
    if c.size == 1:
        return np.full(channels, c.reshape(()), dtype=np.float64)
    shape = (1,) * (rank - c.ndim) + c.shape  # right-aligned with (N, C, *spatial)
    if rank < 2 or shape[1] != channels or any(d != 1 for i, d in enumerate(shape) if i != 1):
        return None
    return c.reshape(channels).astype(np.float64)


# Ops whose output has the rank of their first input (the activations: every one elementwise).
_RANK_KEEPING = frozenset({
    "BatchNormalization", "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "LRN",
    "Concat", "Identity", "Dropout", "InstanceNormalization", "FusedConv", "Pad", "Resize", "Upsample",
}) | ELEMENTWISE_OPS


def _rank_of(graph: Graph, name: str, producers: dict[str, Layer], depth: int = 0) -> int | None:
    """The rank of tensor ``name`` from shape inference, or followed back through convolutions and
    rank-keeping ops to one whose rank is known (None if that fails)."""
    info = graph.value_info.get(name)
    if info is not None and info.shape is not None:
        return len(info.shape)
    for inp in graph.inputs:
        if inp.name == name and inp.shape is not None:
            return len(inp.shape)
    if name in graph.constants:
        return graph.constants[name].ndim
    layer = producers.get(name)
    if layer is None or depth > 64 or layer.domain or not layer.inputs:
        return None
    if layer.op_type in ("Conv", "ConvTranspose") and len(layer.inputs) > 1 and layer.inputs[1] in graph.constants:
        return graph.constants[layer.inputs[1]].ndim
    if layer.op_type in _RANK_KEEPING and layer.outputs[0] == name:
        return _rank_of(graph, layer.inputs[0], producers, depth + 1)
    return None


def _constant_scalar(graph: Graph, name: str) -> float | None:
    value = graph.constants.get(name)
    if value is None or value.size != 1 or value.dtype.kind != "f":
        return None
    return float(value.reshape(()))


class FuseHardSwishPattern:
    """x * Clip(x + 3, 0, 6) / 6 (or * 1/6), as exporters without HardSwish spell it (PaddleOCR's PP-OCR
    models: four full-tensor layers per activation), becomes one HardSwish layer, which FuseActivation
    then folds into the Conv before it. HardSwish is an opset-14 op: the new layer carries opset 14
    whatever the model's."""

    def run(self, graph: Graph, opsets: dict[str, int]) -> None:
        outputs, producers, consumers, position = _graph_maps(graph)
        removed: set[int] = set()

        def only_reader(name: str, layer: Layer) -> bool:
            return name not in outputs and single_consumer(consumers, name) is layer

        for last in graph.layers:
            if last.domain or len(last.inputs) != 2 or len(last.outputs) != 1 or last.attrs:
                continue
            scale = _constant_scalar(graph, last.inputs[1])
            if not ((last.op_type == "Div" and scale == 6.0)
                    or (last.op_type == "Mul" and scale is not None and abs(scale - 1 / 6) < 1e-7)):
                continue
            mul = producers.get(last.inputs[0])
            if mul is None or mul.op_type != "Mul" or mul.domain or not only_reader(last.inputs[0], last):
                continue
            for k in (0, 1):
                x, gate = mul.inputs[k], mul.inputs[1 - k]
                clip = producers.get(gate)
                if clip is None or clip.op_type != "Clip" or clip.domain or not only_reader(gate, mul):
                    continue
                if self._bounds(graph, clip) != (0.0, 6.0):
                    continue
                add = producers.get(clip.inputs[0])
                if (add is None or add.op_type != "Add" or add.domain or add.attrs
                        or not only_reader(clip.inputs[0], clip)):
                    continue
                shift = [i for i, n in enumerate(add.inputs) if n != x]
                if len(shift) != 1 or x not in add.inputs or _constant_scalar(graph, add.inputs[shift[0]]) != 3.0:
                    continue
                graph.layers[position[id(last)]] = Layer(
                    name=mul.name or last.name, op_type="HardSwish", inputs=[x], outputs=list(last.outputs),
                    attrs={}, domain="", opset=max(14, last.opset))
                removed.update((id(add), id(clip), id(mul)))
                break
        _drop(graph, removed)

    @staticmethod
    def _bounds(graph: Graph, clip: Layer) -> tuple[float | None, float | None]:
        if len(clip.inputs) > 1:  # opset 11+: bounds are inputs
            names = [*clip.inputs[1:3], "", ""][:2]
            return tuple(_constant_scalar(graph, n) if n else None for n in names)  # type: ignore[return-value]
        lo, hi = clip.attrs.get("min"), clip.attrs.get("max")
        return (None if lo is None else float(lo), None if hi is None else float(hi))


_AFFINE_OPS = frozenset({"Mul", "Add", "Sub", "Div"})


def _affine_operand(op: Layer, consts: dict[str, np.ndarray]) -> int | None:
    """The index of the tensor input of ``op`` when it is x * c, c * x, x + c, c + x, x - c or x / c with
    ``c`` a constant (NumPy broadcasting: not opset < 7's broadcast/axis form); None otherwise."""
    if op.op_type not in _AFFINE_OPS or op.domain or len(op.inputs) != 2 or len(op.outputs) != 1:
        return None
    if op.attrs.get("broadcast") or op.attrs.get("axis") is not None:
        return None
    const_sides = [i for i in (0, 1) if op.inputs[i] in consts]
    if len(const_sides) != 1 or (op.op_type in ("Sub", "Div") and const_sides != [1]):
        return None
    return 1 - const_sides[0]


class FoldChannelAffine:
    """Conv or inference BatchNormalization, then Mul/Add/Sub/Div by a per-channel (or scalar) constant,
    becomes one layer with rescaled weights and biases. Caffe2-exported DenseNet puts a Mul and an Add
    after every BatchNormalization: 242 full-tensor passes that fold to nothing. Runs before
    FuseActivation, so the Relu that follows fuses into the host."""

    def run(self, graph: Graph, opsets: dict[str, int]) -> None:
        outputs, producers, consumers, _ = _graph_maps(graph)
        consts = graph.constants
        removed: set[int] = set()
        for op in graph.layers:
            k = _affine_operand(op, consts)
            if k is None:
                continue
            x, c_name = op.inputs[k], op.inputs[1 - k]
            host = producers.get(x)
            if (host is None or id(host) in removed or x in outputs
                    or single_consumer(consumers, x) is not op or host.fused_activation or host.domain):
                continue
            if self._fold(graph, host, op, consts[c_name], producers):
                host.outputs = list(op.outputs)
                producers[op.outputs[0]] = host
                removed.add(id(op))
        _drop(graph, removed)

    @staticmethod
    def _fold(graph: Graph, host: Layer, op: Layer, c: np.ndarray, producers: dict[str, Layer]) -> bool:
        consts = graph.constants
        if host.op_type == "Conv" and len(host.inputs) >= 2 and host.inputs[1] in consts:
            w = consts[host.inputs[1]]
            b_name = host.inputs[2] if len(host.inputs) > 2 else ""
            if w.dtype.kind != "f" or c.dtype != w.dtype or (b_name and b_name not in consts):
                return False
            vec = _channel_vector(c, w.ndim, w.shape[0])
            if vec is None:
                return False
            scale = np.ones(w.shape[0]) if op.op_type in ("Add", "Sub") else vec
            if op.op_type == "Div":
                scale = 1.0 / vec
            shift = {"Add": vec, "Sub": -vec}.get(op.op_type, 0.0)
            _rescale_conv(consts, host, scale, shift, f"{host.name}/{op.name or op.op_type}_folded")
            return True
        if (host.op_type == "BatchNormalization" and len(host.inputs) == 5 and not any(host.outputs[1:])
                and not host.attrs.get("training_mode", 0) and all(n in consts for n in host.inputs[1:])):
            gamma, beta = consts[host.inputs[1]], consts[host.inputs[2]]
            if gamma.ndim != 1 or c.dtype != gamma.dtype or gamma.dtype.kind != "f":
                return False
            rank = _rank_of(graph, host.inputs[0], producers)
            if rank is None:
                return False  # without the rank, where the channel axis of c lies is unknown
            vec = _channel_vector(c, rank, gamma.shape[0])
            if vec is None:
                return False
            g64, b64 = gamma.astype(np.float64), beta.astype(np.float64)
            if op.op_type == "Mul":
                g64, b64 = g64 * vec, b64 * vec
            elif op.op_type == "Div":
                g64, b64 = g64 / vec, b64 / vec
            else:
                b64 = b64 + (vec if op.op_type == "Add" else -vec)
            base = f"{host.name}/{op.name or op.op_type}_folded"
            consts[base + "/scale"] = g64.astype(gamma.dtype)
            consts[base + "/B"] = b64.astype(beta.dtype)
            host.inputs = [host.inputs[0], base + "/scale", base + "/B", *host.inputs[3:]]
            return True
        return False


class FoldAffineIntoNextConv:
    """Mul/Add/Sub/Div by a per-channel (or scalar) constant whose only reader is a Conv without padding
    is folded into that Conv: conv(x * a + b) is conv(x) with W * a per input channel and the bias plus
    W summed against b. PP-OCRv4's backbone scales and shifts each HardSwish output by two scalars
    (a learnable affine block) before its next convolution; where that is a 1x1 one, both layers and
    their two passes over the tensor go. With padding the border would see the affine's b instead of
    zeros, so padded convolutions are left alone. Runs after FoldChannelAffine, which folds into the
    producer where it can."""

    def run(self, graph: Graph, opsets: dict[str, int]) -> None:
        changed = True
        while changed:  # Mul -> Add -> Conv: the Add folds first, then the Mul is next to the Conv
            changed = False
            outputs, _, consumers, _ = _graph_maps(graph)
            removed: set[int] = set()
            for op in graph.layers:
                k = _affine_operand(op, graph.constants)
                conv = None if k is None else self._target(graph, op, outputs, consumers)
                if conv is None or id(conv) in removed:
                    continue
                if self._fold(graph, op, conv, graph.constants[op.inputs[1 - k]]):
                    conv.inputs = [op.inputs[k], *conv.inputs[1:]]
                    removed.add(id(op))
                    changed = True
            _drop(graph, removed)

    def _target(self, graph: Graph, op: Layer, outputs: set[str], consumers: dict[str, list[Layer]]
                ) -> Layer | None:
        """The Conv that the affine ``op`` can fold into, or None."""
        consts = graph.constants
        conv = single_consumer(consumers, op.outputs[0])
        if (conv is None or op.outputs[0] in outputs or conv.op_type != "Conv" or conv.domain
                or len(conv.inputs) < 2 or conv.inputs[0] != op.outputs[0] or conv.inputs[1] not in consts):
            return None
        if any(conv.attrs.get("pads", [])) or conv.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
            return None
        if len(conv.inputs) > 2 and conv.inputs[2] and conv.inputs[2] not in consts:
            return None
        return conv

    @staticmethod
    def _fold(graph: Graph, op: Layer, conv: Layer, c: np.ndarray) -> bool:
        consts = graph.constants
        w = consts[conv.inputs[1]]
        group = int(conv.attrs.get("group", 1))
        m, c_g = w.shape[:2]
        if w.dtype.kind != "f" or c.dtype != w.dtype or m % group:
            return False
        vec = _channel_vector(c, w.ndim, c_g * group)
        if vec is None:
            return False
        # (M, C_g): the constant for each weight's input channel (its group's slice of the channels)
        per_weight = np.repeat(vec.reshape(group, c_g), m // group, axis=0)
        per_weight = per_weight.reshape(m, c_g, *([1] * (w.ndim - 2)))
        bias = _conv_bias64(consts, conv)
        w64 = w.astype(np.float64)
        if op.op_type == "Mul":
            w64 = w64 * per_weight
        elif op.op_type == "Div":
            w64 = w64 / per_weight
        else:  # conv(x + v) = conv(x) + sum over input channels and taps of W * v
            shift = (w64 * per_weight).reshape(m, -1).sum(axis=1)
            bias = bias + (shift if op.op_type == "Add" else -shift)
        _set_conv_params(consts, conv, w64, bias, f"{conv.name}/{op.name or op.op_type}_folded_in")
        return True


class FuseActivation:
    """Conv/ConvTranspose/Gemm/MatMul/Add/Sum followed by an elementwise activation becomes one layer."""

    def run(self, graph: Graph, opsets: dict[str, int]) -> None:
        outputs = {o.name for o in graph.outputs}
        removed: set[int] = set()
        consumers = graph.consumers()
        for host in graph.layers:
            if host.op_type not in _ACTIVATION_HOSTS or host.domain or host.fused_activation:
                continue
            if len(host.outputs) != 1 or host.outputs[0] in outputs or host.attrs.get("training_mode"):
                continue
            act = single_consumer(consumers, host.outputs[0])
            if act is None or act.op_type not in FUSABLE or act.domain:
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
        _drop(graph, removed)


class FuseResidualAdd:
    """Conv -> Add (or a two-input Sum) with another tensor Z becomes one FusedConv layer computing
    act(Conv(X, W, B) + Z), the Add's fused activation included (ResNet's residual Add + Relu): the GPU
    adds Z in the convolution's epilogue instead of a pass of its own over three tensors. The fused
    layer takes the Conv's name and the Add's place in the order (Z is ready there), and inputs
    [X, W, B, Z]. Runs after FuseActivation, which fuses the activation into the Add first."""

    def run(self, graph: Graph, opsets: dict[str, int]) -> None:
        outputs, producers, consumers, position = _graph_maps(graph)
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
                        or single_consumer(consumers, name) is not add or len(conv.inputs) < 2):
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
        _drop(graph, removed)
