"""The GPU programs of ONNX Runtime's quantized com.microsoft operators (contrib_quant_gpu.py) on gpu-compute
and gpu-pixel: each op with no fallback layer, bit for bit equal to the cpu backend where the CPU kernel does
elementwise float32 arithmetic and exact integer sums, within one quantization step in rare elements where a
float32 sum may be reassociated (softmax, window averages), within float32 rounding for the float products
(MatMulNBits, QAttention's attention); and against ONNX Runtime as the CPU kernels are checked in
test_contrib_ops.py. Then models written by ONNX Runtime's quantization tools, whole on each GPU backend."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import gpu_check
import wgsentis as ws

ort = pytest.importorskip("onnxruntime")
pytestmark = gpu_check.requires_gpu

MS = "com.microsoft"
BACKENDS = gpu_check.GPU_BACKENDS
# Codes ORT's MLAS kernels may round the other way than the float32 reference (a sum in another order, or in
# fixed point, moves a value within an ulp of a rounding midpoint across it): test_contrib_ops.py's allowance.
ORT_QUANTA = 1


def _model(nodes: list, inputs: dict[str, np.ndarray], outputs: list[str], constants: dict | None = None,
           opset: int = 17) -> onnx.ModelProto:
    graph = h.make_graph(
        nodes, "contrib_quant",
        [h.make_tensor_value_info(k, h.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in inputs.items()],
        [h.make_empty_tensor_value_info(o) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (constants or {}).items()])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset), h.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model


def _node(op: str, inputs: list[str], outputs: list[str], **attrs) -> onnx.NodeProto:
    return h.make_node(op, inputs, outputs, domain=MS, name=f"{op.lower()}_{outputs[0]}", **attrs)


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the nodes as written
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray], backend: str) -> tuple[dict, list[str]]:
    with ws.Worker(ws.load_model(model), backend) as worker:
        outputs = worker.run(feeds)
        fallbacks = worker.stats().get("fallback_layers", [])
        again = worker.run(feeds)  # the replayed plan gives the same answer
    for name, value in outputs.items():
        np.testing.assert_array_equal(again[name], value, err_msg=f"{backend} {name}: replay")
    return outputs, fallbacks


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray], *, exact: bool = True, rtol: float = 1e-5,
           atol: float = 1e-6, ort_rtol: float = 1e-5, ort_atol: float = 1e-5,
           fallbacks: int = 0) -> dict[str, dict[str, np.ndarray]]:
    """Every output of ``model`` on each GPU backend against the cpu backend's and ONNX Runtime's: with no fallback
    layer (or ``fallbacks`` of them); integer outputs equal to the cpu's where ``exact``, else at most one step
    apart in at most 1% of the elements, and within ORT_QUANTA of ORT's; float outputs equal to the cpu's where
    ``exact``, else within rtol/atol, and within ort_rtol/ort_atol of ORT's. Returns the outputs per backend."""
    names = [o.name for o in model.graph.output]
    expected = dict(zip(names, _ort(model, feeds), strict=True))
    cpu, _ = _run(model, feeds, "cpu")
    results = {"cpu": cpu}
    for backend in BACKENDS:
        got, fell_back = _run(model, feeds, backend)
        assert len(fell_back) == fallbacks, (backend, fell_back)
        results[backend] = got
        for name in names:
            g, want, e = got[name], cpu[name], expected[name]
            assert g.dtype == want.dtype == e.dtype and g.shape == want.shape == e.shape, \
                (backend, name, g.dtype, want.dtype, e.dtype, g.shape, e.shape)
            if g.dtype.kind in "iu":
                diff = np.abs(g.astype(np.int64) - want.astype(np.int64))
                if exact:
                    assert diff.max(initial=0) == 0, (backend, name, np.mean(diff > 0))
                else:
                    assert diff.max(initial=0) <= 1 and np.mean(diff > 0) <= 0.01, (backend, name, diff.max(),
                                                                                   np.mean(diff > 0))
                assert np.abs(g.astype(np.int64) - e.astype(np.int64)).max(initial=0) <= ORT_QUANTA, (backend, name)
            else:
                if exact:
                    np.testing.assert_array_equal(g, want, err_msg=f"{backend} {name} vs cpu")
                else:
                    np.testing.assert_allclose(g, want, rtol=rtol, atol=atol, err_msg=f"{backend} {name} vs cpu")
                np.testing.assert_allclose(g, e, rtol=ort_rtol, atol=ort_atol, err_msg=f"{backend} {name} vs ORT")
    return results


def _codes(rng: np.random.Generator, dtype, *shape: int) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def _rand(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# -- one node at a time -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16])
def test_quantize_dequantize_linear(dtype) -> None:
    rng = np.random.default_rng(70)
    info = np.iinfo(dtype)
    feeds = {"x": _rand(rng, 3, 4, 5, scale=40.0)}  # past the range: saturates
    consts = {"s": np.array(0.05, np.float32), "zp": np.array(info.min + (info.max - info.min) // 3, dtype),
              "sa": rng.uniform(0.02, 0.3, 4).astype(np.float32),
              "za": rng.integers(info.min, info.max, 4).astype(dtype)}
    nodes = [_node("QuantizeLinear", ["x", "s", "zp"], ["q"]), _node("DequantizeLinear", ["q", "s", "zp"], ["y"]),
             _node("QuantizeLinear", ["x", "sa", "za"], ["qa"], axis=1),
             _node("DequantizeLinear", ["qa", "sa", "za"], ["ya"], axis=1)]
    _check(_model(nodes, feeds, ["q", "y", "qa", "ya"], consts), feeds)


def test_quantize_to_int4_stays_on_the_cpu() -> None:
    import ml_dtypes

    feeds = {"x": _rand(np.random.default_rng(71), 2, 6, scale=4.0)}
    consts = {"s": np.array(0.5, np.float32), "zp": np.array(1, ml_dtypes.int4)}
    nodes = [_node("QuantizeLinear", ["x", "s", "zp"], ["q"]), _node("DequantizeLinear", ["q", "s", "zp"], ["y"])]
    # The QuantizeLinear falls back; the DequantizeLinear after it reads that host value and runs on the host.
    _check(_model(nodes, feeds, ["y"], consts), feeds, fallbacks=1)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_add_mul(dtype) -> None:
    rng = np.random.default_rng(72)
    feeds = {"a": _codes(rng, dtype, 2, 3, 8), "b": _codes(rng, dtype, 3, 1)}
    zero = 128 if dtype == np.uint8 else 0
    consts = {"as": np.array(0.05, np.float32), "az": np.array(zero + 3, dtype), "bs": np.array(0.02, np.float32),
              "bz": np.array(zero - 5, dtype), "cs": np.array(0.07, np.float32), "cz": np.array(zero + 1, dtype),
              "k": _codes(rng, dtype, 8)}
    nodes = [_node("QLinearAdd", ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], ["add"]),
             _node("QLinearMul", ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], ["mul"]),
             _node("QLinearAdd", ["k", "bs", "bz", "a", "as", "az", "cs", "cz"], ["add_const"]),
             _node("QLinearMul", ["a", "as", "az", "a", "as", "az", "cs", "cz"], ["square"])]
    _check(_model(nodes, feeds, ["add", "mul", "add_const", "square"], consts), feeds)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_sigmoid_leaky_relu_softmax(dtype) -> None:
    rng = np.random.default_rng(73)
    feeds = {"x": _codes(rng, dtype, 2, 5, 7)}
    zero = 128 if dtype == np.uint8 else 0
    consts = {"xs": np.array(0.06, np.float32), "xz": np.array(zero + 2, dtype), "ys": np.array(1 / 256, np.float32),
              "yz": np.array(0 if dtype == np.uint8 else -128, dtype), "ls": np.array(0.04, np.float32),
              "lz": np.array(zero - 10, dtype)}
    nodes = [_node("QLinearSigmoid", ["x", "xs", "xz", "ys", "yz"], ["sig"]),
             _node("QLinearLeakyRelu", ["x", "xs", "xz", "ls", "lz"], ["leaky"], alpha=0.2)]
    _check(_model(nodes, feeds, ["sig", "leaky"], consts), feeds)
    nodes = [_node("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], [f"sm{k}"], **attrs)
             for k, attrs in enumerate(({"axis": -1, "opset": 13}, {"axis": 1, "opset": 13}, {"axis": 1, "opset": 12}))]
    _check(_model(nodes, feeds, ["sm0", "sm1", "sm2"], consts), feeds, exact=False)


def test_qlinear_concat() -> None:
    rng = np.random.default_rng(74)
    feeds = {"a": _codes(rng, np.uint8, 2, 3, 4), "b": _codes(rng, np.uint8, 2, 5, 4)}
    consts = {"ys": np.array(0.05, np.float32), "yz": np.array(128, np.uint8), "as": np.array(0.05, np.float32),
              "az": np.array(128, np.uint8), "bs": np.array(0.031, np.float32), "bz": np.array(100, np.uint8),
              "k": _codes(rng, np.uint8, 2, 2, 4), "ks": np.array(0.11, np.float32), "kz": np.array(90, np.uint8)}
    node = _node("QLinearConcat", ["ys", "yz", "a", "as", "az", "b", "bs", "bz", "k", "ks", "kz"], ["y"], axis=1)
    _check(_model([node], feeds, ["y"], consts), feeds)


@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_pools(channels_last: int, dtype) -> None:
    rng = np.random.default_rng(75)
    shape = (2, 6, 7, 3) if channels_last else (2, 3, 6, 7)
    feeds = {"x": _codes(rng, dtype, *shape)}
    zero = 128 if dtype == np.uint8 else 0
    # Scales of no simple ratio: with 0.05 and 0.03, one window sum in 18 would sit exactly on a rounding tie,
    # which the float32 rounding of the average then decides (the cpu pool multiplies by a rounded reciprocal
    # of the count, the GPU pools divide by it).
    consts = {"xs": np.array(0.0517, np.float32), "xz": np.array(zero + 4, dtype),
              "ys": np.array(0.0291, np.float32), "yz": np.array(zero - 6, dtype)}
    names = ["x", "xs", "xz", "ys", "yz"]
    _check(_model([_node("QLinearGlobalAveragePool", names, ["y"], channels_last=channels_last)], feeds, ["y"],
                  consts), feeds)
    nodes = [_node("QLinearAveragePool", names, [f"y{k}"], channels_last=channels_last, **attrs)
             for k, attrs in enumerate(({"kernel_shape": [3, 3], "strides": [2, 2]},
                                        {"kernel_shape": [2, 3], "pads": [1, 1, 0, 1], "count_include_pad": 1},
                                        {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1], "ceil_mode": 1,
                                         "strides": [2, 2]}))]
    _check(_model(nodes, feeds, ["y0", "y1", "y2"], consts), feeds, exact=False)


@pytest.mark.parametrize("quantized_out", [False, True])
@pytest.mark.parametrize("per_column,trans_a", [(False, 0), (True, 0), (True, 1)])
def test_qgemm(quantized_out: bool, per_column: bool, trans_a: int) -> None:
    rng = np.random.default_rng(76)
    feeds = {"a": _codes(rng, np.uint8, *((6, 4) if trans_a else (4, 6)))}
    consts = {"as": np.array(0.04, np.float32), "az": np.array(120, np.uint8), "b": _codes(rng, np.int8, 5, 6),
              "bs": (rng.random(5 if per_column else ()) * 0.02 + 0.01).astype(np.float32),
              "bz": np.zeros(5 if per_column else (), np.int8), "c": rng.integers(-500, 500, 5).astype(np.int32),
              "ys": np.array(0.5, np.float32), "yz": np.array(128, np.uint8)}
    names = ["a", "as", "az", "b", "bs", "bz", "c"] + (["ys", "yz"] if quantized_out else [])
    node = _node("QGemm", names, ["y"], transA=trans_a, transB=1, alpha=0.8)
    _check(_model([node], feeds, ["y"], consts), feeds, ort_rtol=1e-5, ort_atol=1e-4)


@pytest.mark.parametrize("b_type,per_column,bias", [(np.int8, False, True), (np.uint8, True, False),
                                                    (np.int8, True, True)])
def test_dynamic_quantize_matmul_and_matmul_integer_to_float(b_type, per_column: bool, bias: bool) -> None:
    rng = np.random.default_rng(77)
    n = 6
    feeds = {"a": _rand(rng, 2, 3, 8)}
    consts = {"b": _codes(rng, b_type, 8, n),
              "bs": (rng.random(n if per_column else ()) * 0.05 + 0.01).astype(np.float32),
              "bz": (_codes(rng, b_type, n) if per_column else np.array(0 if b_type == np.int8 else 128, b_type)),
              "bias": _rand(rng, n)}
    if b_type == np.int8:  # ORT's int8 weights take a zero point of 0 only
        consts["bz"] = np.zeros_like(consts["bz"])
    names = ["a", "b", "bs", "bz", "bias" if bias else ""]
    _check(_model([_node("DynamicQuantizeMatMul", names, ["y"])], feeds, ["y"], consts), feeds)
    feeds = {"a": _codes(rng, np.uint8, 2, 3, 8)}
    consts.update({"az": np.array(120, np.uint8), "as": np.array(0.03, np.float32)})
    names = ["a", "b", "as", "bs", "az", "bz", "bias" if bias else ""]
    _check(_model([_node("MatMulIntegerToFloat", names, ["y"])], feeds, ["y"], consts), feeds)


@pytest.mark.parametrize("channels_last", [0, 1])
def test_qlinear_conv_nhwc(channels_last: int) -> None:
    rng = np.random.default_rng(78)
    feeds = {"x": _codes(rng, np.uint8, *((1, 6, 6, 4) if channels_last else (1, 4, 6, 6)))}
    consts = {"xs": np.array(0.02, np.float32), "xz": np.array(120, np.uint8), "w": _codes(rng, np.int8, 5, 4, 3, 3),
              "ws": (rng.random(5) * 0.01 + 0.005).astype(np.float32), "wz": np.zeros(5, np.int8),
              "ys": np.array(0.05, np.float32), "yz": np.array(128, np.uint8),
              "b": rng.integers(-300, 300, 5).astype(np.int32)}
    node = _node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"],
                 channels_last=channels_last, pads=[1, 1, 1, 1], strides=[2, 1])
    _check(_model([node], feeds, ["y"], consts), feeds)


@pytest.mark.parametrize("bits,k,zero_points,bias,accuracy", [(4, 64, "none", False, 0), (4, 80, "packed", True, 0),
                                                              (4, 48, "float", False, 0), (8, 64, "packed", False, 0),
                                                              (2, 64, "packed", True, 0), (4, 64, "packed", True, 4)])
def test_matmul_nbits(bits: int, k: int, zero_points: str, bias: bool, accuracy: int) -> None:
    """The weight dequantized on the host, the float32 MatMul on the device (its own summation order);
    accuracy_level 4 (ORT's int8 compute) stays on the CPU."""
    rng = np.random.default_rng(79)
    n, block = 6, 32
    blocks = -(-k // block)
    feeds = {"a": _rand(rng, 2, 3, k)}
    consts = {"b": rng.integers(0, 256, (n, blocks, block * bits // 8)).astype(np.uint8),
              "s": (rng.random(n * blocks) * 0.1 + 0.01).astype(np.float32), "bias": _rand(rng, n)}
    if zero_points == "packed":
        consts["zp"] = rng.integers(0, 256, (n, -(-blocks * bits // 8))).astype(np.uint8)
    elif zero_points == "float":
        consts["zp"] = (rng.random(n * blocks) * 15).astype(np.float32)
    names = ["a", "b", "s", "zp" if "zp" in consts else "", "", "bias" if bias else ""]
    node = _node("MatMulNBits", names, ["y"], K=k, N=n, bits=bits, block_size=block, accuracy_level=accuracy)
    _check(_model([node], feeds, ["y"], consts), feeds, exact=accuracy == 4, rtol=1e-5, atol=1e-5,
           fallbacks=int(accuracy == 4))


def _mask(form: str, batch: int, seq: int) -> np.ndarray | None:
    if form == "lengths":
        return np.array([seq, seq - 2][:batch], np.int32)
    if form == "2d":
        mask = np.ones((batch, seq), np.int32)
        mask[-1, -1:] = 0
        return mask
    return None


@pytest.mark.parametrize("mask", ["none", "lengths", "2d"])
def test_qattention(mask: str) -> None:
    """The projection bit for bit; Attention's float steps as the Attention program (test_contrib_ops.py)."""
    rng = np.random.default_rng(80)
    batch, seq, hidden, heads = 2, 4, 16, 2
    feeds = {"x": _codes(rng, np.uint8, batch, seq, hidden)}
    m = _mask(mask, batch, seq)
    if m is not None:
        feeds["mask"] = m
    consts = {"w": _codes(rng, np.int8, hidden, 3 * hidden), "b": _rand(rng, 3 * hidden),
              "xs": np.array(0.01, np.float32), "ws": np.array(0.01, np.float32), "xz": np.array(128, np.uint8),
              "wz": np.array(0, np.int8)}
    node = _node("QAttention", ["x", "w", "b", "xs", "ws", "mask" if m is not None else "", "xz", "wz"], ["y"],
                 num_heads=heads)
    _check(_model([node], feeds, ["y"], consts), feeds, exact=False, rtol=1e-4, atol=1e-5, ort_rtol=1e-4)


@pytest.mark.parametrize("direction,per_column", [("forward", False), ("bidirectional", True), ("reverse", False)])
def test_dynamic_quantize_lstm(direction: str, per_column: bool) -> None:
    """Unrolled on the device: the integer products and elementwise steps as the CPU kernel's, the activations
    the backend's (within an ulp, which could move one code of a later step's quantized hidden state)."""
    rng = np.random.default_rng(83)
    seq, batch, inputs, hidden = 5, 3, 6, 4
    dirs = 2 if direction == "bidirectional" else 1
    cols = (dirs, 4 * hidden) if per_column else (dirs,)
    feeds = {"x": _rand(rng, seq, batch, inputs)}
    consts = {"w": _codes(rng, np.int8, dirs, inputs, 4 * hidden), "r": _codes(rng, np.int8, dirs, hidden, 4 * hidden),
              "b": _rand(rng, dirs, 8 * hidden), "ws": (rng.random(cols) * 0.01 + 0.002).astype(np.float32),
              "wz": np.zeros(cols, np.int8), "rs": (rng.random(cols) * 0.01 + 0.002).astype(np.float32),
              "rz": np.zeros(cols, np.int8), "h0": _rand(rng, dirs, batch, hidden),
              "c0": _rand(rng, dirs, batch, hidden)}
    names = ["x", "w", "r", "b", "", "h0", "c0", "", "ws", "wz", "rs", "rz"]
    node = _node("DynamicQuantizeLSTM", names, ["y", "yh", "yc"], hidden_size=hidden, direction=direction)
    _check(_model([node], feeds, ["y", "yh", "yc"], consts), feeds, exact=False, rtol=1e-5, atol=1e-5)


# -- models written by ONNX Runtime's quantization tools -------------------------------------------------------


def _check_model(model: onnx.ModelProto, feeds: dict[str, np.ndarray], quantized_ops: set[tuple[str, str]],
                 rtol: float, atol: float) -> None:
    """The model runs whole on each GPU backend (no fallback layer; ``quantized_ops`` among its ops) and matches
    ORT within rtol/atol (and the cpu backend within the same)."""
    ops = {(n.domain, n.op_type) for n in model.graph.node}
    assert quantized_ops <= ops, sorted(ops)
    expected = _ort(model, feeds)
    names = [o.name for o in model.graph.output]
    cpu, _ = _run(model, feeds, "cpu")
    for backend in BACKENDS:
        got, fell_back = _run(model, feeds, backend)
        assert fell_back == [], (backend, fell_back)
        for name, e in zip(names, expected, strict=True):
            np.testing.assert_allclose(got[name], e, rtol=rtol, atol=atol, err_msg=f"{backend} {name} vs ORT")
            np.testing.assert_allclose(got[name], cpu[name], rtol=rtol, atol=atol, err_msg=f"{backend} {name}")


@pytest.fixture(scope="module")
def orientation_qoperator(orientation_models):
    """The orientation reference model quantized statically in the QOperator format (conftest's)."""
    paths, feeds = orientation_models
    return onnx.load(str(paths["QOperator"])), feeds


def test_orientation_qoperator_runs_whole_on_the_gpu(orientation_qoperator) -> None:
    """QLinearAdd, QLinearMul and QLinearSoftmax (com.microsoft) among ONNX's QLinearConv and Q/DQ: no fallback.
    The output is the dequantized softmax; float32 convolutions sum in each backend's own order (test_quant_gpu.py's
    QDQ model), which moves rare rounding ties: a few of the 1/256 steps of the four probabilities."""
    model, feeds = orientation_qoperator
    _check_model(model, feeds, {(MS, "QLinearAdd"), (MS, "QLinearMul"), (MS, "QLinearSoftmax")}, rtol=0,
                 atol=4.01 / 256)


def _dense_model(path) -> str:
    rng = np.random.default_rng(81)
    nodes = [h.make_node("MatMul", ["x", "w1"], ["m1"]), h.make_node("Add", ["m1", "b1"], ["a1"]),
             h.make_node("Relu", ["a1"], ["r1"]), h.make_node("Gemm", ["r1", "w2", "b2"], ["g2"], transB=1),
             h.make_node("Relu", ["g2"], ["r2"]), h.make_node("Gemm", ["r2", "w3", "b3"], ["y"])]
    consts = {"w1": _rand(rng, 24, 32, scale=0.3), "b1": _rand(rng, 32), "w2": _rand(rng, 16, 32, scale=0.3),
              "b2": _rand(rng, 16), "w3": _rand(rng, 16, 8, scale=0.3), "b3": _rand(rng, 8)}
    graph = h.make_graph(nodes, "dense", [h.make_tensor_value_info("x", T.FLOAT, [5, 24])],
                         [h.make_empty_tensor_value_info("y")],
                         [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return str(path)


@pytest.mark.parametrize("per_channel", [False, True])
def test_dynamically_quantized_matmul_gemm_model(tmp_path, per_channel: bool) -> None:
    """quantize_dynamic's MatMulInteger/DynamicQuantizeLinear graph, and ORT's saved fusion of it into
    DynamicQuantizeMatMul and MatMulIntegerToFloat: whole on the GPU, bit for bit as the cpu backend."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantized = str(tmp_path / "dense_q.onnx")
    quantize_dynamic(_dense_model(tmp_path / "dense.onnx"), quantized, per_channel=per_channel,
                     weight_type=QuantType.QInt8)
    feeds = {"x": _rand(np.random.default_rng(82), 5, 24)}
    for path in (quantized, _ort_fused(quantized, str(tmp_path / "dense_q_ort.onnx"))):
        model = onnx.load(path)
        wanted = {(MS, "DynamicQuantizeMatMul")} if path != quantized else {("", "MatMulInteger")}
        _check_model(model, feeds, wanted, rtol=1e-5, atol=1e-5)
        results = {backend: _run(model, feeds, backend)[0] for backend in ("cpu", *BACKENDS)}
        for backend in BACKENDS:  # integer products exact, float32 steps in the CPU kernels' order
            np.testing.assert_array_equal(results[backend]["y"], results["cpu"]["y"], err_msg=backend)


@pytest.fixture(scope="module")
def bert_quantized(tmp_path_factory) -> str:
    """test_contrib_ops.py's BERT-like encoder after the transformer optimizer, quantized by quantize_dynamic
    (QAttention, QEmbedLayerNormalization, MatMulInteger), and ORT's saved fusion of that (DynamicQuantizeMatMul)."""
    pytest.importorskip("sympy", reason="onnxruntime.transformers.optimizer needs sympy")
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers.optimizer import optimize_model
    from test_contrib_ops import _bert_like

    folder = tmp_path_factory.mktemp("bert_q")
    optimized = optimize_model(_bert_like(folder / "bert.onnx"), model_type="bert", num_heads=4, hidden_size=32,
                               opt_level=0)
    source = str(folder / "bert_optimized.onnx")
    optimized.save_model_to_file(source)
    quantized = str(folder / "bert_q.onnx")
    quantize_dynamic(source, quantized, weight_type=QuantType.QInt8, extra_options={"DefaultTensorType": T.FLOAT})
    return quantized


def _ort_fused(source: str, target: str) -> str:
    """The model as ORT's extended graph optimizations rewrite it (DynamicQuantizeMatMul, MatMulIntegerToFloat),
    saved by ORT."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = target
    ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    return target


def test_dynamically_quantized_bert(bert_quantized: str) -> None:
    """QAttention, QEmbedLayerNormalization and the standard integer ops; then ORT's fusion of the rest into
    DynamicQuantizeMatMul: both whole on each GPU backend."""
    from test_contrib_ops import _bert_feeds

    _check_model(onnx.load(bert_quantized), _bert_feeds(), {(MS, "QAttention"), (MS, "QEmbedLayerNormalization")},
                 rtol=1e-4, atol=1e-4)
    fused = _ort_fused(bert_quantized, bert_quantized.replace(".onnx", "_ort.onnx"))
    _check_model(onnx.load(fused), _bert_feeds(), {(MS, "QAttention"), (MS, "DynamicQuantizeMatMul")}, rtol=1e-4,
                 atol=1e-4)


def test_dynamically_quantized_lstm(tmp_path) -> None:
    """quantize_dynamic's DynamicQuantizeLSTM (and a MatMulInteger after it), whole on each GPU backend."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(84)
    nodes = [h.make_node("LSTM", ["x", "W", "R", "B"], ["y", "yh"], hidden_size=8),
             h.make_node("Squeeze", ["yh", "axis0"], ["last"]), h.make_node("MatMul", ["last", "W2"], ["out"])]
    consts = {"W": _rand(rng, 1, 32, 6, scale=0.3), "R": _rand(rng, 1, 32, 8, scale=0.3), "B": _rand(rng, 1, 64),
              "axis0": np.array([0]), "W2": _rand(rng, 8, 4)}
    graph = h.make_graph(nodes, "lstm", [h.make_tensor_value_info("x", T.FLOAT, [5, 3, 6])],
                         [h.make_empty_tensor_value_info("y"), h.make_empty_tensor_value_info("out")],
                         [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    source, quantized = str(tmp_path / "lstm.onnx"), str(tmp_path / "lstm_q.onnx")
    onnx.save(model, source)
    quantize_dynamic(source, quantized, weight_type=QuantType.QInt8)
    feeds = {"x": _rand(rng, 5, 3, 6)}
    _check_model(onnx.load(quantized), feeds, {(MS, "DynamicQuantizeLSTM")}, rtol=1e-5, atol=1e-5)
    fused = _ort_fused(quantized, str(tmp_path / "lstm_q_ort.onnx"))
    _check_model(onnx.load(fused), feeds, {(MS, "DynamicQuantizeLSTM"), (MS, "DynamicQuantizeMatMul")}, rtol=1e-5,
                 atol=1e-5)
