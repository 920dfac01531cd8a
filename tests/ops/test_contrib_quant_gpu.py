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

import gpu_check
import wgsentis as ws
from contrib_cases import (MS, QLINEAR_AVERAGE_POOL_ATTRS, QLINEAR_SOFTMAX_ATTRS, bert_feeds, codes,
                           dynamic_quantize_lstm_case, dynamic_quantize_matmul_cases, lstm_model, make_model,
                           matmul_nbits_case, ms_node, optimized_bert, ort_save, qattention_case, qgemm_case,
                           qlinear_binary_inputs, qlinear_concat_inputs, qlinear_conv_case, qlinear_pool_inputs,
                           qlinear_unary_inputs, quantize_dequantize, rand, save_model)

ort = pytest.importorskip("onnxruntime")
pytestmark = gpu_check.requires_gpu

BACKENDS = gpu_check.GPU_BACKENDS
# Codes ORT's MLAS kernels may round the other way than the float32 reference (a sum in another order, or in
# fixed point, moves a value within an ulp of a rounding midpoint across it): test_contrib_ops.py's allowance.
ORT_QUANTA = 1


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


# -- one node at a time -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16])
def test_quantize_dequantize_linear(dtype) -> None:
    rng = np.random.default_rng(70)
    info = np.iinfo(dtype)
    feeds = {"x": rand(rng, 3, 4, 5, scale=40.0)}  # past the range: saturates
    consts = {"s": np.array(0.05, np.float32), "zp": np.array(info.min + (info.max - info.min) // 3, dtype),
              "sa": rng.uniform(0.02, 0.3, 4).astype(np.float32),
              "za": rng.integers(info.min, info.max, 4).astype(dtype)}
    nodes = quantize_dequantize("x", "s", "zp", "q", "y") + quantize_dequantize("x", "sa", "za", "qa", "ya", axis=1)
    _check(make_model(nodes, feeds, ["q", "y", "qa", "ya"], consts), feeds)


def test_quantize_to_int4_stays_on_the_cpu() -> None:
    import ml_dtypes

    feeds = {"x": rand(np.random.default_rng(71), 2, 6, scale=4.0)}
    consts = {"s": np.array(0.5, np.float32), "zp": np.array(1, ml_dtypes.int4)}
    nodes = quantize_dequantize("x", "s", "zp", "q", "y")
    # The QuantizeLinear falls back; the DequantizeLinear after it reads that host value and runs on the host.
    _check(make_model(nodes, feeds, ["y"], consts), feeds, fallbacks=1)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_add_mul(dtype) -> None:
    rng = np.random.default_rng(72)
    feeds, consts = qlinear_binary_inputs(rng, dtype)
    consts["k"] = codes(rng, dtype, 8)
    nodes = [ms_node("QLinearAdd", ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], ["add"]),
             ms_node("QLinearMul", ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], ["mul"]),
             ms_node("QLinearAdd", ["k", "bs", "bz", "a", "as", "az", "cs", "cz"], ["add_const"]),
             ms_node("QLinearMul", ["a", "as", "az", "a", "as", "az", "cs", "cz"], ["square"])]
    _check(make_model(nodes, feeds, ["add", "mul", "add_const", "square"], consts), feeds)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_sigmoid_leaky_relu_softmax(dtype) -> None:
    feeds, consts = qlinear_unary_inputs(np.random.default_rng(73), dtype)
    nodes = [ms_node("QLinearSigmoid", ["x", "xs", "xz", "ys", "yz"], ["sig"]),
             ms_node("QLinearLeakyRelu", ["x", "xs", "xz", "ls", "lz"], ["leaky"], alpha=0.2)]
    _check(make_model(nodes, feeds, ["sig", "leaky"], consts), feeds)
    nodes = [ms_node("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], [f"sm{k}"], **attrs)
             for k, attrs in enumerate(QLINEAR_SOFTMAX_ATTRS)]
    _check(make_model(nodes, feeds, ["sm0", "sm1", "sm2"], consts), feeds, exact=False)


def test_qlinear_concat() -> None:
    rng = np.random.default_rng(74)
    feeds, consts = qlinear_concat_inputs(rng)
    consts.update(k=codes(rng, np.uint8, 2, 2, 4), ks=np.array(0.11, np.float32), kz=np.array(90, np.uint8))
    node = ms_node("QLinearConcat", ["ys", "yz", "a", "as", "az", "b", "bs", "bz", "k", "ks", "kz"], ["y"], axis=1)
    _check(make_model([node], feeds, ["y"], consts), feeds)


@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_pools(channels_last: int, dtype) -> None:
    # Scales of no simple ratio: with 0.05 and 0.03, one window sum in 18 would sit exactly on a rounding tie,
    # which the float32 rounding of the average then decides (the cpu pool multiplies by a rounded reciprocal
    # of the count, the GPU pools divide by it).
    feeds, consts = qlinear_pool_inputs(np.random.default_rng(75), dtype, channels_last, 0.0517, 0.0291)
    names = ["x", "xs", "xz", "ys", "yz"]
    node = ms_node("QLinearGlobalAveragePool", names, ["y"], channels_last=channels_last)
    _check(make_model([node], feeds, ["y"], consts), feeds)
    nodes = [ms_node("QLinearAveragePool", names, [f"y{k}"], channels_last=channels_last, **attrs)
             for k, attrs in enumerate(QLINEAR_AVERAGE_POOL_ATTRS)]
    _check(make_model(nodes, feeds, ["y0", "y1", "y2"], consts), feeds, exact=False)


@pytest.mark.parametrize("quantized_out", [False, True])
@pytest.mark.parametrize("per_column,trans_a", [(False, 0), (True, 0), (True, 1)])
def test_qgemm(quantized_out: bool, per_column: bool, trans_a: int) -> None:
    _check(*qgemm_case(np.random.default_rng(76), quantized_out, per_column, trans_a), ort_rtol=1e-5, ort_atol=1e-4)


@pytest.mark.parametrize("b_type,per_column,bias", [(np.int8, False, True), (np.uint8, True, False),
                                                    (np.int8, True, True)])
def test_dynamic_quantize_matmul_and_matmul_integer_to_float(b_type, per_column: bool, bias: bool) -> None:
    for model, feeds in dynamic_quantize_matmul_cases(np.random.default_rng(77), b_type, per_column, bias):
        _check(model, feeds)


@pytest.mark.parametrize("channels_last", [0, 1])
def test_qlinear_conv_nhwc(channels_last: int) -> None:
    _check(*qlinear_conv_case(np.random.default_rng(78), channels_last))


@pytest.mark.parametrize("bits,k,zero_points,bias,accuracy", [(4, 64, "none", False, 0), (4, 80, "packed", True, 0),
                                                              (4, 48, "float", False, 0), (8, 64, "packed", False, 0),
                                                              (2, 64, "packed", True, 0), (4, 64, "packed", True, 4)])
def test_matmul_nbits(bits: int, k: int, zero_points: str, bias: bool, accuracy: int) -> None:
    """The weight dequantized on the host, the float32 MatMul on the device (its own summation order);
    accuracy_level 4 (ORT's int8 compute) stays on the CPU."""
    _check(*matmul_nbits_case(np.random.default_rng(79), bits, k, zero_points, bias, accuracy), exact=accuracy == 4,
           rtol=1e-5, atol=1e-5, fallbacks=int(accuracy == 4))


@pytest.mark.parametrize("mask", ["none", "lengths", "2d"])
def test_qattention(mask: str) -> None:
    """The projection bit for bit; Attention's float steps as the Attention program (test_contrib_ops.py)."""
    # The 2-d mask hides one token of the second sequence, the lengths two.
    model, feeds = qattention_case(np.random.default_rng(80), mask, short=1 if mask == "2d" else 2)
    _check(model, feeds, exact=False, rtol=1e-4, atol=1e-5, ort_rtol=1e-4)


@pytest.mark.parametrize("direction,per_column", [("forward", False), ("bidirectional", True), ("reverse", False)])
def test_dynamic_quantize_lstm(direction: str, per_column: bool) -> None:
    """Unrolled on the device: the integer products and elementwise steps as the CPU kernel's, the activations
    the backend's (within an ulp, which could move one code of a later step's quantized hidden state)."""
    _check(*dynamic_quantize_lstm_case(np.random.default_rng(83), direction, per_column), exact=False, rtol=1e-5,
           atol=1e-5)


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
    consts = {"w1": rand(rng, 24, 32, scale=0.3), "b1": rand(rng, 32), "w2": rand(rng, 16, 32, scale=0.3),
              "b2": rand(rng, 16), "w3": rand(rng, 16, 8, scale=0.3), "b3": rand(rng, 8)}
    return save_model(path, nodes, [h.make_tensor_value_info("x", T.FLOAT, [5, 24])], ["y"], consts)


@pytest.mark.parametrize("per_channel", [False, True])
def test_dynamically_quantized_matmul_gemm_model(tmp_path, per_channel: bool) -> None:
    """quantize_dynamic's MatMulInteger/DynamicQuantizeLinear graph, and ORT's saved fusion of it into
    DynamicQuantizeMatMul and MatMulIntegerToFloat: whole on the GPU, bit for bit as the cpu backend."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantized = str(tmp_path / "dense_q.onnx")
    quantize_dynamic(_dense_model(tmp_path / "dense.onnx"), quantized, per_channel=per_channel,
                     weight_type=QuantType.QInt8)
    feeds = {"x": rand(np.random.default_rng(82), 5, 24)}
    for path in (quantized, ort_save(quantized, str(tmp_path / "dense_q_ort.onnx"))):
        model = onnx.load(path)
        wanted = {(MS, "DynamicQuantizeMatMul")} if path != quantized else {("", "MatMulInteger")}
        _check_model(model, feeds, wanted, rtol=1e-5, atol=1e-5)
        results = {backend: _run(model, feeds, backend)[0] for backend in ("cpu", *BACKENDS)}
        for backend in BACKENDS:  # integer products exact, float32 steps in the CPU kernels' order
            np.testing.assert_array_equal(results[backend]["y"], results["cpu"]["y"], err_msg=backend)


@pytest.fixture(scope="module")
def bert_quantized(tmp_path_factory) -> str:
    """The BERT-like encoder (test_contrib_ops.py's) after the transformer optimizer, quantized by quantize_dynamic
    (QAttention, QEmbedLayerNormalization, MatMulInteger), and ORT's saved fusion of that (DynamicQuantizeMatMul)."""
    pytest.importorskip("sympy", reason="onnxruntime.transformers.optimizer needs sympy")
    from onnxruntime.quantization import QuantType, quantize_dynamic

    folder = tmp_path_factory.mktemp("bert_q")
    source = optimized_bert(folder)
    quantized = str(folder / "bert_q.onnx")
    quantize_dynamic(source, quantized, weight_type=QuantType.QInt8, extra_options={"DefaultTensorType": T.FLOAT})
    return quantized


def test_dynamically_quantized_bert(bert_quantized: str) -> None:
    """QAttention, QEmbedLayerNormalization and the standard integer ops; then ORT's fusion of the rest into
    DynamicQuantizeMatMul: both whole on each GPU backend."""
    _check_model(onnx.load(bert_quantized), bert_feeds(), {(MS, "QAttention"), (MS, "QEmbedLayerNormalization")},
                 rtol=1e-4, atol=1e-4)
    fused = ort_save(bert_quantized, bert_quantized.replace(".onnx", "_ort.onnx"))
    _check_model(onnx.load(fused), bert_feeds(), {(MS, "QAttention"), (MS, "DynamicQuantizeMatMul")}, rtol=1e-4,
                 atol=1e-4)


def test_dynamically_quantized_lstm(tmp_path) -> None:
    """quantize_dynamic's DynamicQuantizeLSTM (and a MatMulInteger after it), whole on each GPU backend."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(84)
    source, quantized = lstm_model(tmp_path / "lstm.onnx", rng), str(tmp_path / "lstm_q.onnx")
    quantize_dynamic(source, quantized, weight_type=QuantType.QInt8)
    feeds = {"x": rand(rng, 5, 3, 6)}
    _check_model(onnx.load(quantized), feeds, {(MS, "DynamicQuantizeLSTM")}, rtol=1e-5, atol=1e-5)
    fused = ort_save(quantized, str(tmp_path / "lstm_q_ort.onnx"))
    _check_model(onnx.load(fused), feeds, {(MS, "DynamicQuantizeLSTM"), (MS, "DynamicQuantizeMatMul")}, rtol=1e-5,
                 atol=1e-5)
