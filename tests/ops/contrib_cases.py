"""The com.microsoft test cases that test_contrib_ops.py (the cpu kernels against ONNX Runtime, the float ops' GPU
programs against the cpu backend) and test_contrib_quant_gpu.py (the quantized ops' GPU programs against the cpu
backend and ONNX Runtime) share: the model and node builders, random inputs and masks, each shared case's model and
feeds, and the float models handed to ONNX Runtime's tools. A builder draws from the caller's generator in a fixed
order, so a test's seed names its case; each test file keeps its own check."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

if TYPE_CHECKING:
    import onnxruntime

MS = "com.microsoft"
Arrays = dict[str, np.ndarray]
Case = tuple[onnx.ModelProto, Arrays]


def make_model(nodes: list[onnx.NodeProto], inputs: Arrays, outputs: list[str], constants: dict | None = None,
               opset: int = 17) -> onnx.ModelProto:
    """A model of ``nodes``; ``inputs`` become graph inputs (their arrays give type and shape), ``constants``
    initializers; outputs untyped (shape inference and the runtimes tell)."""
    graph = h.make_graph(
        nodes, "contrib",
        [h.make_tensor_value_info(k, h.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in inputs.items()],
        [h.make_empty_tensor_value_info(o) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (constants or {}).items()],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset), h.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model


def ms_node(op: str, inputs: list[str], outputs: list[str], **attrs: Any) -> onnx.NodeProto:
    """A com.microsoft node, named after its op and first output (unique where a model has several of one op);
    an attribute given as None is left out."""
    return h.make_node(op, inputs, outputs, domain=MS, name=f"{op.lower()}_{outputs[0]}", **attrs)


def rand(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    """float32 normal values times ``scale``."""
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def codes(rng: np.random.Generator, dtype: Any, *shape: int) -> np.ndarray:
    """Integer codes over the whole range of ``dtype``."""
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def mask_feed(form: str, batch: int, total: int, seq: int, short: int = 2) -> np.ndarray | None:
    """An attention mask feed in ``form`` ("lengths", "end_start", "2d", "3d"; None for "none"): the first
    sequence of ``total`` tokens, the second ``short`` tokens shorter."""
    lengths = np.array([total, total - short][:batch], dtype=np.int32)
    if form == "lengths":
        return lengths
    if form == "end_start":
        return np.concatenate([lengths, np.array([0, 1][:batch], dtype=np.int32)])
    if form == "2d":
        return (np.arange(total)[None, :] < lengths[:, None]).astype(np.int32)
    if form == "3d":
        return np.broadcast_to((np.arange(total)[None, :] < lengths[:, None])[:, None, :],
                               (batch, seq, total)).astype(np.int32)
    return None


# -- float ops (test_contrib_ops.py: the cpu kernels and their GPU programs) ----------------------------------


def skip_layer_norm_inputs(rng: np.random.Generator, skip_shape: tuple[int, ...] = (2, 5, 32)) -> tuple[Arrays, Arrays]:
    """(feeds x and skip, constants gamma, beta and bias) for SkipLayerNormalization over 32 channels."""
    feeds = {"x": rand(rng, 2, 5, 32, scale=2.0), "skip": rand(rng, *skip_shape)}
    return feeds, {"gamma": rand(rng, 32), "beta": rand(rng, 32), "bias": rand(rng, 32)}


def fused_conv_case(rng: np.random.Generator, activation: str | None, params: list | None, residual: bool,
                    stride: int = 1) -> Case:
    """FusedConv of two groups, padded by one, at ``stride``, with ``activation`` (and its ``params``) and a residual
    input where ``residual``."""
    feeds = {"x": rand(rng, 1, 4, 7, 7)}
    if residual:
        side = (7 + 2 - 3) // stride + 1
        feeds["z"] = rand(rng, 1, 6, side, side)
    consts = {"w": rand(rng, 6, 2, 3, 3), "b": rand(rng, 6)}
    node = ms_node("FusedConv", ["x", "w", "b", "z" if residual else ""], ["y"], group=2, pads=[1, 1, 1, 1],
                   strides=[stride, stride] if stride != 1 else None, activation=activation,
                   activation_params=params)
    return make_model([node], feeds, ["y"], consts), feeds


def rotary_embedding_case(rng: np.random.Generator, interleaved: int, form: str) -> Case:
    """RotaryEmbedding with positions from a start ("start"), per token ("ids"), on 4-d input ("4d"), or over
    half of each head ("partial")."""
    batch, seq, heads, head = 2, 5, 3, 8
    rot = 4 if form == "partial" else head
    angles = np.arange(20)[:, None] * (1.0 / 10000 ** (np.arange(rot // 2) / (rot // 2)))[None, :]
    consts = {"cos": np.cos(angles).astype(np.float32), "sin": np.sin(angles).astype(np.float32)}
    attrs: dict = {"interleaved": interleaved}
    feeds = {"x": rand(rng, batch, heads, seq, head) if form == "4d" else rand(rng, batch, seq, heads * head)}
    if form == "partial":
        attrs.update(num_heads=heads, rotary_embedding_dim=rot)
    if form == "ids":
        feeds["pos"] = rng.integers(0, 20, (batch, seq)).astype(np.int64)
    else:
        consts["pos"] = np.array([3], dtype=np.int64)
    return make_model([ms_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], **attrs)], feeds, ["y"],
                      consts), feeds


def attention_case(rng: np.random.Generator, mask: str, unidirectional: int) -> Case:
    """Attention over packed QKV weights, four heads, with a mask feed in ``mask``'s form (mask_feed)."""
    batch, seq, hidden, heads = 2, 5, 16, 4
    feeds = {"x": rand(rng, batch, seq, hidden)}
    m = mask_feed(mask, batch, seq, seq)
    if m is not None:
        feeds["mask"] = m
    consts = {"w": rand(rng, hidden, 3 * hidden, scale=0.5), "b": rand(rng, 3 * hidden)}
    node = ms_node("Attention", ["x", "w", "b", "mask" if m is not None else ""], ["y"], num_heads=heads,
                   unidirectional=unidirectional)
    return make_model([node], feeds, ["y"], consts), feeds


def mha_bias_mask_inputs(rng: np.random.Generator, batch: int, heads: int, seq: int, kv_len: int,
                         head: int) -> Arrays:
    """MultiHeadAttention's optional inputs: the QKV bias, a 2-d key padding mask and an attention bias."""
    return {"bias": rand(rng, 3 * heads * head), "mask": mask_feed("2d", batch, kv_len, seq),
            "ab": rand(rng, 1, heads, seq, kv_len)}


# -- quantized ops (test_contrib_ops.py against ONNX Runtime, test_contrib_quant_gpu.py on the GPU) ------------

QLINEAR_SOFTMAX_ATTRS = ({"axis": -1, "opset": 13}, {"axis": 1, "opset": 13}, {"axis": 1, "opset": 12})
QLINEAR_AVERAGE_POOL_ATTRS = ({"kernel_shape": [3, 3], "strides": [2, 2]},
                              {"kernel_shape": [2, 3], "pads": [1, 1, 0, 1], "count_include_pad": 1},
                              {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1], "ceil_mode": 1, "strides": [2, 2]})


def quantize_dequantize(x: str, scale: str, zero_point: str, q: str, y: str, **attrs: Any) -> list[onnx.NodeProto]:
    """QuantizeLinear of ``x`` into ``q``, then DequantizeLinear of that into ``y``."""
    return [ms_node("QuantizeLinear", [x, scale, zero_point], [q], **attrs),
            ms_node("DequantizeLinear", [q, scale, zero_point], [y], **attrs)]


def _zero(dtype: Any) -> int:
    """The middle code of an 8-bit ``dtype``."""
    return 128 if dtype == np.uint8 else 0


def qlinear_binary_inputs(rng: np.random.Generator, dtype: Any) -> tuple[Arrays, Arrays]:
    """(feeds a and b, broadcast against each other; their scales and zero points and the output's) for
    QLinearAdd and QLinearMul, in the order a, as, az, b, bs, bz, cs, cz."""
    feeds = {"a": codes(rng, dtype, 2, 3, 8), "b": codes(rng, dtype, 3, 1)}
    zero = _zero(dtype)
    consts = {"as": np.array(0.05, np.float32), "az": np.array(zero + 3, dtype), "bs": np.array(0.02, np.float32),
              "bz": np.array(zero - 5, dtype), "cs": np.array(0.07, np.float32), "cz": np.array(zero + 1, dtype)}
    return feeds, consts


def qlinear_unary_inputs(rng: np.random.Generator, dtype: Any) -> tuple[Arrays, Arrays]:
    """(feed x; x's scale and zero point, the 1/256 output of QLinearSigmoid and QLinearSoftmax as ys and yz, and
    QLinearLeakyRelu's output as ls and lz)."""
    feeds = {"x": codes(rng, dtype, 2, 5, 7)}
    zero = _zero(dtype)
    consts = {"xs": np.array(0.06, np.float32), "xz": np.array(zero + 2, dtype), "ys": np.array(1 / 256, np.float32),
              "yz": np.array(0 if dtype == np.uint8 else -128, dtype), "ls": np.array(0.04, np.float32),
              "lz": np.array(zero - 10, dtype)}
    return feeds, consts


def qlinear_concat_inputs(rng: np.random.Generator) -> tuple[Arrays, Arrays]:
    """(feeds a and b, to join on axis 1; the output's scale and zero point, then a's and b's) for QLinearConcat."""
    feeds = {"a": codes(rng, np.uint8, 2, 3, 4), "b": codes(rng, np.uint8, 2, 5, 4)}
    consts = {"ys": np.array(0.05, np.float32), "yz": np.array(128, np.uint8), "as": np.array(0.05, np.float32),
              "az": np.array(128, np.uint8), "bs": np.array(0.031, np.float32), "bz": np.array(100, np.uint8)}
    return feeds, consts


def qlinear_pool_inputs(rng: np.random.Generator, dtype: Any, channels_last: int, x_scale: float,
                        y_scale: float) -> tuple[Arrays, Arrays]:
    """(feed x, NHWC where ``channels_last``; its scale and zero point, the output's) for the QLinear pools."""
    feeds = {"x": codes(rng, dtype, *((2, 6, 7, 3) if channels_last else (2, 3, 6, 7)))}
    zero = _zero(dtype)
    consts = {"xs": np.array(x_scale, np.float32), "xz": np.array(zero + 4, dtype),
              "ys": np.array(y_scale, np.float32), "yz": np.array(zero - 6, dtype)}
    return feeds, consts


def qgemm_case(rng: np.random.Generator, quantized_out: bool, per_column: bool, trans_a: int | None = None) -> Case:
    """QGemm of uint8 A by a transposed int8 B (a scale per column where ``per_column``) plus an int32 C; a
    float output, or a uint8 one where ``quantized_out``. ``trans_a`` None leaves out the transA attribute."""
    feeds = {"a": codes(rng, np.uint8, *((6, 4) if trans_a else (4, 6)))}
    consts = {"as": np.array(0.04, np.float32), "az": np.array(120, np.uint8), "b": codes(rng, np.int8, 5, 6),
              "bs": (rng.random(5 if per_column else ()) * 0.02 + 0.01).astype(np.float32),
              "bz": np.zeros(5 if per_column else (), np.int8), "c": rng.integers(-500, 500, 5).astype(np.int32),
              "ys": np.array(0.5, np.float32), "yz": np.array(128, np.uint8)}
    names = ["a", "as", "az", "b", "bs", "bz", "c"] + (["ys", "yz"] if quantized_out else [])
    node = ms_node("QGemm", names, ["y"], transA=trans_a, transB=1, alpha=0.8)
    return make_model([node], feeds, ["y"], consts), feeds


def dynamic_quantize_matmul_cases(rng: np.random.Generator, b_type: Any, per_column: bool, bias: bool) -> list[Case]:
    """DynamicQuantizeMatMul of float A, then MatMulIntegerToFloat of uint8 A, by the same weight codes (a scale
    and zero point per column where ``per_column``) and bias."""
    n = 6
    feeds = {"a": rand(rng, 2, 3, 8)}
    consts = {"b": codes(rng, b_type, 8, n),
              "bs": (rng.random(n if per_column else ()) * 0.05 + 0.01).astype(np.float32),
              "bz": (codes(rng, b_type, n) if per_column else np.array(0 if b_type == np.int8 else 128, b_type)),
              "bias": rand(rng, n)}
    # ORT's int8 weights take a zero point of 0 only (its u8s8 kernels have no weight zero point per column).
    if b_type == np.int8:
        consts["bz"] = np.zeros_like(consts["bz"])
    names = ["a", "b", "bs", "bz", "bias" if bias else ""]
    dynamic = make_model([ms_node("DynamicQuantizeMatMul", names, ["y"])], feeds, ["y"], consts), feeds
    feeds = {"a": codes(rng, np.uint8, 2, 3, 8)}
    consts.update({"az": np.array(120, np.uint8), "as": np.array(0.03, np.float32)})
    names = ["a", "b", "as", "bs", "az", "bz", "bias" if bias else ""]
    return [dynamic, (make_model([ms_node("MatMulIntegerToFloat", names, ["y"])], feeds, ["y"], consts), feeds)]


def qlinear_conv_case(rng: np.random.Generator, channels_last: int) -> Case:
    """QLinearConv (com.microsoft, NHWC where ``channels_last``) of uint8 by int8 weights scaled per channel."""
    feeds = {"x": codes(rng, np.uint8, *((1, 6, 6, 4) if channels_last else (1, 4, 6, 6)))}
    consts = {"xs": np.array(0.02, np.float32), "xz": np.array(120, np.uint8), "w": codes(rng, np.int8, 5, 4, 3, 3),
              "ws": (rng.random(5) * 0.01 + 0.005).astype(np.float32), "wz": np.zeros(5, np.int8),
              "ys": np.array(0.05, np.float32), "yz": np.array(128, np.uint8),
              "b": rng.integers(-300, 300, 5).astype(np.int32)}
    node = ms_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"],
                   channels_last=channels_last, pads=[1, 1, 1, 1], strides=[2, 1])
    return make_model([node], feeds, ["y"], consts), feeds


def matmul_nbits_case(rng: np.random.Generator, bits: int, k: int, zero_points: str, bias: bool,
                      accuracy: int) -> Case:
    """MatMulNBits of float A by ``bits``-bit weights in blocks of 32, with zero points "none", "packed" (codes) or
    "float", a bias where ``bias``, at ``accuracy`` (accuracy_level)."""
    n, block = 6, 32
    blocks = -(-k // block)
    feeds = {"a": rand(rng, 2, 3, k)}
    consts = {"b": rng.integers(0, 256, (n, blocks, block * bits // 8)).astype(np.uint8),
              "s": (rng.random(n * blocks) * 0.1 + 0.01).astype(np.float32), "bias": rand(rng, n)}
    if zero_points == "packed":
        consts["zp"] = rng.integers(0, 256, (n, -(-blocks * bits // 8))).astype(np.uint8)
    elif zero_points == "float":
        consts["zp"] = (rng.random(n * blocks) * 15).astype(np.float32)
    names = ["a", "b", "s", "zp" if "zp" in consts else "", "", "bias" if bias else ""]
    node = ms_node("MatMulNBits", names, ["y"], K=k, N=n, bits=bits, block_size=block, accuracy_level=accuracy)
    return make_model([node], feeds, ["y"], consts), feeds


def qattention_case(rng: np.random.Generator, mask: str, short: int = 2) -> Case:
    """QAttention of uint8 input by int8 weights, two heads, with a mask feed in ``mask``'s form (mask_feed, the
    second sequence ``short`` tokens shorter)."""
    batch, seq, hidden, heads = 2, 4, 16, 2
    feeds = {"x": codes(rng, np.uint8, batch, seq, hidden)}
    m = mask_feed(mask, batch, seq, seq, short)
    if m is not None:
        feeds["mask"] = m
    consts = {"w": codes(rng, np.int8, hidden, 3 * hidden), "b": rand(rng, 3 * hidden),
              "xs": np.array(0.01, np.float32), "ws": np.array(0.01, np.float32), "xz": np.array(128, np.uint8),
              "wz": np.array(0, np.int8)}
    node = ms_node("QAttention", ["x", "w", "b", "xs", "ws", "mask" if m is not None else "", "xz", "wz"], ["y"],
                   num_heads=heads)
    return make_model([node], feeds, ["y"], consts), feeds


def dynamic_quantize_lstm_case(rng: np.random.Generator, direction: str, per_column: bool) -> Case:
    """DynamicQuantizeLSTM with int8 weights (scales per gate column where ``per_column``) and initial states."""
    seq, batch, inputs, hidden = 5, 3, 6, 4
    dirs = 2 if direction == "bidirectional" else 1
    cols = (dirs, 4 * hidden) if per_column else (dirs,)
    feeds = {"x": rand(rng, seq, batch, inputs)}
    consts = {"w": codes(rng, np.int8, dirs, inputs, 4 * hidden), "r": codes(rng, np.int8, dirs, hidden, 4 * hidden),
              "b": rand(rng, dirs, 8 * hidden), "ws": (rng.random(cols) * 0.01 + 0.002).astype(np.float32),
              "wz": np.zeros(cols, np.int8), "rs": (rng.random(cols) * 0.01 + 0.002).astype(np.float32),
              "rz": np.zeros(cols, np.int8), "h0": rand(rng, dirs, batch, hidden),
              "c0": rand(rng, dirs, batch, hidden)}
    names = ["x", "w", "r", "b", "", "h0", "c0", "", "ws", "wz", "rs", "rz"]
    node = ms_node("DynamicQuantizeLSTM", names, ["y", "yh", "yc"], hidden_size=hidden, direction=direction)
    return make_model([node], feeds, ["y", "yh", "yc"], consts), feeds


# -- float models for ONNX Runtime's tools (the transformer optimizer, the quantizers, an optimized-model save) --


def save_model(path: str | Path, nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[str],
               constants: dict, opset: int = 17) -> str:
    """A model of standard ``nodes`` saved at ``path``; returns the path."""
    graph = h.make_graph(nodes, "tool_input", inputs, [h.make_empty_tensor_value_info(o) for o in outputs],
                         [numpy_helper.from_array(np.asarray(v), k) for k, v in constants.items()])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return str(path)


def ort_save(source: str, target: str, level: onnxruntime.GraphOptimizationLevel | None = None) -> str:
    """The model as ONNX Runtime optimizes it at ``level`` (by default ORT_ENABLE_EXTENDED, which fuses
    DynamicQuantizeMatMul and MatMulIntegerToFloat), saved by ORT at ``target``."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED if level is None else level
    options.optimized_model_filepath = target
    ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    return target


def lstm_model(path: str | Path, rng: np.random.Generator) -> str:
    """A float LSTM whose last hidden state goes through a MatMul, for quantize_dynamic (DynamicQuantizeLSTM)."""
    nodes = [h.make_node("LSTM", ["x", "W", "R", "B"], ["y", "yh"], hidden_size=8),
             h.make_node("Squeeze", ["yh", "axis0"], ["last"]), h.make_node("MatMul", ["last", "W2"], ["out"])]
    consts = {"W": rand(rng, 1, 32, 6, scale=0.3), "R": rand(rng, 1, 32, 8, scale=0.3), "B": rand(rng, 1, 64),
              "axis0": np.array([0]), "W2": rand(rng, 8, 4)}
    return save_model(path, nodes, [h.make_tensor_value_info("x", T.FLOAT, [5, 3, 6])], ["y", "out"], consts)


def bert_like(path: str | Path, layers: int = 2, batch: int = 2, seq: int = 8, hidden: int = 32, heads: int = 4,
              vocab: int = 50, ffn: int = 64) -> str:
    """A BERT encoder in the op patterns a PyTorch export gives (opset 13, layer norms spelled out, attention as
    MatMul/Reshape/Transpose/Softmax, erf Gelu in the first layer and tanh Gelu in the second), which the
    transformer optimizer fuses."""
    rng = np.random.default_rng(50)
    nodes: list = []
    consts: dict[str, np.ndarray] = {}

    def const(name: str, value: Any) -> str:
        consts[name] = np.asarray(value)
        return name

    def node(op: str, inputs: list[str], **attrs: Any) -> str:
        out = f"{op}_{len(nodes)}"
        nodes.append(h.make_node(op, inputs, [out], name=f"{op}_{len(nodes)}", **attrs))
        return out

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    def layer_norm(x: str, tag: str) -> str:
        mean = node("ReduceMean", [x], axes=[-1])
        diff = node("Sub", [x, mean])
        var = node("ReduceMean", [node("Pow", [diff, const(f"{tag}_2", np.float32(2))])], axes=[-1])
        std = node("Sqrt", [node("Add", [var, const(f"{tag}_eps", np.float32(1e-12))])])
        scaled = node("Mul", [node("Div", [diff, std]), const(f"{tag}_g", 1 + weight(hidden))])
        return node("Add", [scaled, const(f"{tag}_b", weight(hidden))])

    def gelu(x: str, tag: str, tanh: bool) -> str:
        if tanh:
            cube = node("Mul", [node("Pow", [x, const(f"{tag}_3", np.float32(3))]),
                                const(f"{tag}_k", np.float32(0.044715))])
            inner = node("Mul", [node("Add", [x, cube]), const(f"{tag}_s", np.float32(np.sqrt(2 / np.pi)))])
            one_plus = node("Add", [node("Tanh", [inner]), const(f"{tag}_1", np.float32(1))])
            return node("Mul", [node("Mul", [x, const(f"{tag}_h", np.float32(0.5))]), one_plus])
        erf = node("Erf", [node("Div", [x, const(f"{tag}_r2", np.float32(np.sqrt(2)))])])
        one_plus = node("Add", [erf, const(f"{tag}_1", np.float32(1))])
        return node("Mul", [node("Mul", [x, one_plus]), const(f"{tag}_h", np.float32(0.5))])

    words = node("Gather", [const("word_emb", weight(vocab, hidden)), "input_ids"])
    positions = node("Gather", [const("pos_emb", weight(seq, hidden)),
                                const("position_ids", np.arange(seq, dtype=np.int64)[None, :])])
    segments = node("Gather", [const("seg_emb", weight(2, hidden)), "token_type_ids"])
    x = layer_norm(node("Add", [node("Add", [words, positions]), segments]), "emb")
    mask = node("Unsqueeze", [node("Unsqueeze", ["attention_mask", const("axis1", np.array([1]))]),
                              const("axis2", np.array([2]))])
    mask = node("Mul", [node("Sub", [const("one", np.float32(1)), mask]), const("big", np.float32(-10000))])
    head = hidden // heads
    split = const("split_shape", np.array([0, 0, heads, head]))
    merge = const("merge_shape", np.array([0, 0, hidden]))
    for k in range(layers):
        def project(tag: str, x: str = x, k: int = k) -> str:
            return node("Add", [node("MatMul", [x, const(f"l{k}_{tag}_w", weight(hidden, hidden))]),
                                const(f"l{k}_{tag}_b", weight(hidden))])

        q = node("Transpose", [node("Reshape", [project("q"), split])], perm=[0, 2, 1, 3])
        key = node("Transpose", [node("Reshape", [project("k"), split])], perm=[0, 2, 3, 1])
        v = node("Transpose", [node("Reshape", [project("v"), split])], perm=[0, 2, 1, 3])
        scores = node("Add", [node("Div", [node("MatMul", [q, key]), const(f"l{k}_d", np.float32(np.sqrt(head)))]),
                              mask])
        context = node("MatMul", [node("Softmax", [scores], axis=-1), v])
        context = node("Reshape", [node("Transpose", [context], perm=[0, 2, 1, 3]), merge])
        attended = node("Add", [node("MatMul", [context, const(f"l{k}_o_w", weight(hidden, hidden))]),
                                const(f"l{k}_o_b", weight(hidden))])
        x = layer_norm(node("Add", [attended, x]), f"l{k}_ln1")
        inner = node("Add", [node("MatMul", [x, const(f"l{k}_f1_w", weight(hidden, ffn))]),
                             const(f"l{k}_f1_b", weight(ffn))])
        inner = gelu(inner, f"l{k}_gelu", tanh=k % 2 == 1)
        out = node("Add", [node("MatMul", [inner, const(f"l{k}_f2_w", weight(ffn, hidden))]),
                           const(f"l{k}_f2_b", weight(hidden))])
        x = layer_norm(node("Add", [out, x]), f"l{k}_ln2")
    nodes.append(h.make_node("Identity", [x], ["last_hidden_state"]))
    inputs = [h.make_tensor_value_info("input_ids", T.INT64, ["batch", "seq"]),
              h.make_tensor_value_info("token_type_ids", T.INT64, ["batch", "seq"]),
              h.make_tensor_value_info("attention_mask", T.FLOAT, ["batch", "seq"])]
    return save_model(path, nodes, inputs, ["last_hidden_state"], consts, opset=13)


def bert_feeds(batch: int = 2, seq: int = 8) -> Arrays:
    """Arrays for bert_like's model: the second sequence padded by three tokens."""
    rng = np.random.default_rng(51)
    return {"input_ids": rng.integers(0, 50, (batch, seq)), "token_type_ids": rng.integers(0, 2, (batch, seq)),
            "attention_mask": np.array([[1] * seq, [1] * (seq - 3) + [0] * 3], dtype=np.float32)}


def optimized_bert(folder: Path) -> str:
    """bert_like's model after onnxruntime.transformers.optimizer (which needs sympy), saved in ``folder``."""
    from onnxruntime.transformers.optimizer import optimize_model

    optimized = optimize_model(bert_like(folder / "bert.onnx"), model_type="bert", num_heads=4, hidden_size=32,
                               opt_level=0)
    path = str(folder / "bert_optimized.onnx")
    optimized.save_model_to_file(path)
    return path
