"""Fusions: HardSwish spelled as x * Clip(x + 3, 0, 6) / 6 and Gelu spelled out in its tanh or erf form made one
layer each; BatchNormalization folded
into the preceding Conv's weights; per-channel constant Mul/Add/Sub/Div folded into the Conv or
BatchNormalization before them, or else into an unpadded Conv after them; activations folded into
the layer that produces their input (the kernel applies them on its output); a residual Add folded
into the Conv that produces one of its inputs (FusedConv)."""

from __future__ import annotations

import math

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


def _near(value: float | None, target: float, rel: float = 1e-4) -> bool:
    return value is not None and abs(value - target) <= rel * abs(target)


class FuseGeluPattern:
    """Gelu spelled out in elementwise layers, as torch.onnx writes it for exporters' own activations, becomes
    one ONNX Gelu layer (opset 20, whatever the model's opset, as FuseHardSwishPattern does for HardSwish):

    - the tanh form, GPT-2's ``gelu_new``: 0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * Pow(x, 3)))), eight
      full-tensor layers per activation -> ``Gelu(approximate="tanh")``;
    - the erf form, BERT's: x * 0.5 * (1 + Erf(x / sqrt(2))), five or six layers -> ``Gelu(approximate="none")``.

    The 0.5 may scale x, the product, or the (1 + ...) factor; operands of Add and Mul in either order. Every
    tensor inside the pattern must have one reader and not be a graph output (``add_output`` of one keeps the
    layers). The Gelu kernels compute the same expression in the same precision (float32 constants within
    1e-4 of the formula's), so results move by a few ulps, not more; ONNX Runtime's optimizer makes the same
    fusion (GeluFusion, FastGeluFusion)."""

    def run(self, graph: Graph, opsets: dict[str, int]) -> None:
        outputs, producers, consumers, position = _graph_maps(graph)
        removed: set[int] = set()

        def inner(name: str, reader: Layer) -> Layer | None:
            """The single-reader, default-domain producer of ``name``."""
            layer = producers.get(name)
            if (layer is None or layer.domain or len(layer.outputs) != 1 or name in outputs
                    or single_consumer(consumers, name) is not reader or id(layer) in removed):
                return None
            return layer

        def split(layer: Layer) -> tuple[str, float] | None:
            """A binary layer's (tensor operand, constant scalar operand), either order."""
            if len(layer.inputs) != 2 or layer.attrs:
                return None
            for k in (0, 1):
                value = _constant_scalar(graph, layer.inputs[k])
                if value is not None and layer.inputs[1 - k] not in graph.constants:
                    return layer.inputs[1 - k], value
            return None

        def tanh_argument(act: Layer) -> tuple[str, list[Layer]] | None:
            """x and the layers of sqrt(2/pi) * (x + 0.044715 * x^3) under ``act``, a Tanh."""
            scaled = inner(act.inputs[0], act)
            operand = split(scaled) if scaled is not None and scaled.op_type == "Mul" else None
            if operand is None or not _near(operand[1], math.sqrt(2 / math.pi)):
                return None
            add = inner(operand[0], scaled)
            if add is None or add.op_type != "Add" or len(add.inputs) != 2 or add.attrs:
                return None
            for k in (0, 1):
                x, cubic_name = add.inputs[k], add.inputs[1 - k]
                cubic = inner(cubic_name, add)
                term = split(cubic) if cubic is not None and cubic.op_type == "Mul" else None
                if term is None or not _near(term[1], 0.044715):
                    continue
                power = inner(term[0], cubic)
                base = split(power) if power is not None and power.op_type == "Pow" else None
                if base is not None and base[0] == x and power.inputs[0] == x and base[1] == 3.0:
                    return x, [power, cubic, add, scaled]
            return None

        def erf_argument(act: Layer) -> tuple[str, list[Layer]] | None:
            """x and the layer of x / sqrt(2) (or x * (1/sqrt(2))) under ``act``, an Erf."""
            scaled = inner(act.inputs[0], act)
            operand = split(scaled) if scaled is not None else None
            if operand is None or (scaled.op_type == "Div" and scaled.inputs[0] != operand[0]):
                return None
            if ((scaled.op_type == "Div" and _near(operand[1], math.sqrt(2)))
                    or (scaled.op_type == "Mul" and _near(operand[1], 1 / math.sqrt(2)))):
                return operand[0], [scaled]
            return None

        def one_plus(name: str, reader: Layer) -> tuple[str, str, list[Layer]] | None:
            """(x, approximate, layers) where ``name`` is 1 + Tanh(...) or 1 + Erf(...)."""
            add = inner(name, reader)
            operand = split(add) if add is not None and add.op_type == "Add" else None
            if operand is None or operand[1] != 1.0:
                return None
            act = inner(operand[0], add)
            if act is None or act.op_type not in ("Tanh", "Erf") or act.attrs:
                return None
            found = tanh_argument(act) if act.op_type == "Tanh" else erf_argument(act)
            if found is None:
                return None
            return found[0], "tanh" if act.op_type == "Tanh" else "none", [*found[1], act, add]

        def half_of(name: str, reader: Layer, x: str | None) -> tuple[str, Layer] | None:
            """(t, layer) where ``name`` is 0.5 * t (t == x where x is given)."""
            half = inner(name, reader)
            operand = split(half) if half is not None and half.op_type == "Mul" else None
            if operand is None or operand[1] != 0.5 or (x is not None and operand[0] != x):
                return None
            return operand[0], half

        for last in graph.layers:
            if last.op_type != "Mul" or last.domain or len(last.inputs) != 2 or last.attrs or id(last) in removed:
                continue
            fused: tuple[str, str, list[Layer]] | None = None
            for k in (0, 1):
                left, right = last.inputs[k], last.inputs[1 - k]
                factor = one_plus(right, last)
                if factor is not None:  # (0.5 * x) * (1 + f(x))
                    x, approximate, layers = factor
                    half = half_of(left, last, x)
                    if half is not None:
                        fused = (x, approximate, [*layers, half[1]])
                    break
                half = half_of(right, last, None)
                if half is not None:
                    factor = one_plus(half[0], half[1])
                    if factor is not None and left == factor[0]:  # x * (0.5 * (1 + f(x)))
                        fused = (left, factor[1], [*factor[2], half[1]])
                        break
            if fused is None:
                operand = split(last)
                if operand is not None and operand[1] == 0.5:  # (x * (1 + f(x))) * 0.5
                    product = inner(operand[0], last)
                    if product is not None and product.op_type == "Mul" and len(product.inputs) == 2 \
                            and not product.attrs:
                        for k in (0, 1):
                            factor = one_plus(product.inputs[1 - k], product)
                            if factor is not None and product.inputs[k] == factor[0]:
                                fused = (factor[0], factor[1], [*factor[2], product])
                                break
            if fused is None:
                continue
            x, approximate, layers = fused
            graph.layers[position[id(last)]] = Layer(
                name=last.name, op_type="Gelu", inputs=[x], outputs=list(last.outputs),
                attrs={"approximate": approximate}, domain="", opset=max(20, last.opset))
            removed.update(id(layer) for layer in layers)
        _drop(graph, removed)


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
