"""Quantized and float16 tensors on the GPU backends: the narrow types held widened (float16 rounded, 8/16-bit
integers wrapped at each output), the quantization family's GPU programs (quant_gpu.py) bit-exact against the
CPU kernels and ONNX Runtime, the ONNX Runtime evaluation orders the quantized models chain (BatchNormalization,
GlobalAveragePool), and models quantized by ONNX Runtime's own tools running with no fallback layer."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import gpu_check
import wgsentis as ws

ort = pytest.importorskip("onnxruntime")
pytestmark = gpu_check.requires_gpu

BACKENDS = ("cpu", *gpu_check.GPU_BACKENDS)
RNG = np.random.default_rng(22)


def _graph_model(nodes, inputs: dict[str, np.ndarray], outputs: list[str], constants: dict[str, np.ndarray],
                 opset: int = 17) -> onnx.ModelProto:
    graph = h.make_graph(
        nodes, "quant",
        [h.make_tensor_value_info(k, gpu_check.NUMPY_TO_ONNX[v.dtype], v.shape) for k, v in inputs.items()],
        [h.make_tensor_value_info(o, T.UNDEFINED, None) for o in outputs],
        [nh.from_array(v, k) for k, v in constants.items()])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    # ORT's graph optimizations fuse Q/DQ pairs into integer kernels that round differently: compare without.
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _every_backend(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, tuple[dict, dict]]:
    results = {}
    for backend in BACKENDS:
        with ws.Worker(ws.load_model(model), backend) as worker:
            results[backend] = (worker.run(feeds), worker.stats())
    return results


def _assert_exact_everywhere(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    """Every output equal, bit for bit and in dtype, to ONNX Runtime's on every backend, with no GPU fallback."""
    names = [o.name for o in model.graph.output]
    expected = dict(zip(names, _ort(model, feeds), strict=True))
    for backend, (outputs, stats) in _every_backend(model, feeds).items():
        assert stats.get("fallback_layers", []) == [], (backend, stats.get("fallback_layers"))
        for name in names:
            got, want = np.asarray(outputs[name]), expected[name]
            assert got.dtype == want.dtype and got.shape == want.shape, (backend, name, got.dtype, want.dtype)
            assert np.array_equal(got, want, equal_nan=True), (backend, name, np.mean(got != want))


# -- the quantization family, node by node ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16])
def test_quantize_dequantize_per_tensor_and_per_axis(dtype):
    info = np.iinfo(dtype)
    x = (RNG.standard_normal((2, 4, 5, 6)) * 40).astype(np.float32)  # past the range: saturates
    constants = {
        "s": np.array(0.37, np.float32), "z": np.array(info.min + (info.max - info.min) // 3, dtype),
        "sa": RNG.uniform(0.1, 0.5, 4).astype(np.float32),
        "za": RNG.integers(info.min, info.max, 4).astype(dtype),
    }
    nodes = [h.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             h.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
             h.make_node("QuantizeLinear", ["x", "sa", "za"], ["qa"], axis=1),
             h.make_node("DequantizeLinear", ["qa", "sa", "za"], ["da"], axis=1)]
    _assert_exact_everywhere(_graph_model(nodes, {"x": x}, ["q", "d", "qa", "da"], constants, 21), {"x": x})


def test_quantize_rounds_half_to_even_and_blocked_scales():
    # Exact halves after the division: 0.5, 1.5, 2.5, -0.5, -1.5 round to 0, 2, 2, 0, -2.
    x = np.array([[0.5, 1.5, 2.5, -0.5, -1.5, 3.5, 100.0, -100.0]], np.float32)
    blocked = RNG.uniform(0.5, 2.0, (1, 2)).astype(np.float32)
    nodes = [h.make_node("QuantizeLinear", ["x", "one", "zero"], ["q"]),
             h.make_node("QuantizeLinear", ["x", "blocked", "bz"], ["qb"], axis=1, block_size=4),
             h.make_node("DequantizeLinear", ["qb", "blocked", "bz"], ["db"], axis=1, block_size=4)]
    constants = {"one": np.array(1.0, np.float32), "zero": np.array(0, np.int8), "blocked": blocked,
                 "bz": np.array([[3, -3]], np.int8)}
    model = _graph_model(nodes, {"x": x}, ["q", "qb", "db"], constants, 21)
    _assert_exact_everywhere(model, {"x": x})
    with ws.Worker(ws.load_model(model), "gpu-compute") as worker:
        assert worker.run({"x": x})["q"].tolist() == [[0, 2, 2, 0, -2, 4, 100, -100]]


@pytest.mark.parametrize("shape", [(1, 3, 8, 8), (2, 16, 5, 7), (1, 1, 1, 1)])
def test_dynamic_quantize_linear_on_the_device(shape):
    x = (RNG.standard_normal(shape) * 3 + 0.7).astype(np.float32)
    model = _graph_model([h.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])], {"x": x}, ["y", "s", "z"],
                         {}, 13)
    _assert_exact_everywhere(model, {"x": x})


@pytest.mark.parametrize("backend", ["cpu", *gpu_check.GPU_BACKENDS])
def test_dynamic_quantize_linear_of_all_zeros_has_onnxruntimes_scale(backend):
    """No range to divide: ONNX Runtime's scale is 1 (onnx.reference's 1/255 quantizes the same zeros)."""
    x = np.zeros((2, 3), np.float32)
    model = _graph_model([h.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])], {"x": x}, ["y", "s", "z"],
                         {}, 13)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    with ws.Worker(ws.load_model(model), backend) as worker:
        got = worker.run({"x": x})
    assert float(got["s"]) == float(want[1]) == 1.0
    assert got["y"].tolist() == want[0].tolist() and int(got["z"]) == int(want[2]) == 0


@pytest.mark.parametrize("group,strides,pads", [(1, 1, 1), (2, 2, 0), (8, 1, 1)])
def test_qlinear_conv_and_conv_integer(group, strides, pads):
    c, m = 8, 16
    x = RNG.integers(0, 256, (2, c, 9, 11)).astype(np.uint8)
    w = RNG.integers(-127, 128, (m, c // group, 3, 3)).astype(np.int8)
    constants = {
        "xs": np.array(0.02, np.float32), "xz": np.array(131, np.uint8), "w": w,
        "ws": RNG.uniform(0.001, 0.01, m).astype(np.float32), "wz": np.zeros(m, np.int8),
        "ys": np.array(0.15, np.float32), "yz": np.array(118, np.uint8),
        "b": RNG.integers(-3000, 3000, m).astype(np.int32), "wz1": np.array(0, np.int8),
    }
    attrs = {"group": group, "strides": [strides] * 2, "pads": [pads] * 4}
    nodes = [h.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["q"], **attrs),
             h.make_node("ConvInteger", ["x", "w", "xz", "wz1"], ["i"], **attrs)]
    _assert_exact_everywhere(_graph_model(nodes, {"x": x}, ["q", "i"], constants, 13), {"x": x})


@pytest.mark.parametrize("a_dtype,b_dtype", [(np.uint8, np.int8), (np.uint8, np.uint8)])
def test_qlinear_matmul_and_matmul_integer(a_dtype, b_dtype):
    a = RNG.integers(np.iinfo(a_dtype).min, np.iinfo(a_dtype).max, (2, 5, 37)).astype(a_dtype)
    b = RNG.integers(np.iinfo(b_dtype).min, np.iinfo(b_dtype).max, (37, 12)).astype(b_dtype)
    constants = {
        "b": b, "as": np.array(0.03, np.float32), "az": np.array(7, a_dtype), "bs": np.array(0.004, np.float32),
        "bz": np.array(3, b_dtype), "ys": np.array(0.4, np.float32), "yz": np.array(100, np.uint8),
        "bzc": RNG.integers(0, 20, 12).astype(b_dtype),
    }
    nodes = [h.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["q"]),
             h.make_node("MatMulInteger", ["a", "b", "az", "bzc"], ["i"])]
    _assert_exact_everywhere(_graph_model(nodes, {"a": a}, ["q", "i"], constants, 21), {"a": a})


# -- narrow types on the device -------------------------------------------------------------------------------


def test_float16_layers_run_on_the_device_rounded_like_numpy():
    x = (RNG.standard_normal((1, 4, 6, 6)) * 2).astype(np.float32)
    w = RNG.standard_normal((8, 4, 3, 3)).astype(np.float16)
    nodes = [h.make_node("Cast", ["x"], ["xh"], to=T.FLOAT16),
             h.make_node("Conv", ["xh", "w"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c"], ["r"]),
             h.make_node("Mul", ["r", "r"], ["m"]),
             h.make_node("Softmax", ["m"], ["sm"], axis=-1),
             h.make_node("Cast", ["sm"], ["y"], to=T.FLOAT)]
    model = _graph_model(nodes, {"x": x}, ["y", "m"], {"w": w})
    results = _every_backend(model, {"x": x})
    cpu = results["cpu"][0]
    assert cpu["m"].dtype == np.float16
    for backend in gpu_check.GPU_BACKENDS:
        outputs, stats = results[backend]
        assert stats["fallback_layers"] == [], backend
        for name in ("y", "m"):  # float32 arithmetic rounded to float16 at each float16 output, as numpy does
            assert outputs[name].dtype == cpu[name].dtype
            assert np.array_equal(outputs[name], cpu[name]), (backend, name)
    expected = _ort(model, {"x": x})
    # ONNX Runtime's own float16 kernels accumulate differently: close, not equal.
    assert np.linalg.norm(cpu["m"].astype(np.float64) - expected[1]) / np.linalg.norm(expected[1]) < 2e-3


def test_float16_rounding_edges():
    edges = np.array([0.0, -0.0, 1e-8, 3e-8, 5.96e-8, -6.1e-5, 6.1e-5, 1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11,
                      65504.0, 65519.0, 65520.0, -70000.0, np.inf, -np.inf, 2049.0, 2051.0, 1e-3], np.float32)
    model = _graph_model([h.make_node("Cast", ["x"], ["y"], to=T.FLOAT16)], {"x": edges}, ["y"], {})
    for backend, (outputs, stats) in _every_backend(model, {"x": edges}).items():
        assert stats.get("fallback_layers", []) == []
        assert np.array_equal(outputs["y"], edges.astype(np.float16)), (backend, outputs["y"])


def test_narrow_integers_wrap_like_numpy():
    a = np.array([200, 100, 255, 0, 7], np.uint8)
    b = np.array([100, 200, 1, 0, 9], np.uint8)
    c = np.array([-128, 127, -1, 100, 0], np.int8)
    nodes = [h.make_node("Add", ["a", "b"], ["s"]), h.make_node("Mul", ["a", "b"], ["p"]),
             h.make_node("Sub", ["c", "c1"], ["d"]), h.make_node("Cast", ["a"], ["ai"], to=T.INT8),
             h.make_node("Neg", ["c"], ["n"]), h.make_node("Cast", ["c"], ["cf"], to=T.FLOAT16)]
    model = _graph_model(nodes, {"a": a, "b": b, "c": c}, ["s", "p", "d", "ai", "n", "cf"],
                         {"c1": np.array([1, -1, 1, -100, 5], np.int8)})
    feeds = {"a": a, "b": b, "c": c}
    cpu = _every_backend(model, feeds)
    for backend in gpu_check.GPU_BACKENDS:
        outputs, stats = cpu[backend]
        assert stats["fallback_layers"] == [], backend
        for name, want in cpu["cpu"][0].items():
            assert outputs[name].dtype == want.dtype and np.array_equal(outputs[name], want), (backend, name)


# -- ONNX Runtime's evaluation order where quantized models chain float layers ----------------------------------


@pytest.mark.parametrize("shape", [(1, 16, 7, 7), (2, 32, 14, 14), (1, 8, 3, 5), (1, 4, 1001)])
def test_global_average_pool_sums_in_onnxruntimes_order(shape):
    x = RNG.standard_normal(shape).astype(np.float32)
    model = _graph_model([h.make_node("GlobalAveragePool", ["x"], ["y"])], {"x": x}, ["y"], {})
    _assert_exact_everywhere(model, {"x": x})


def test_batch_normalization_folds_in_onnxruntimes_order():
    c = 24
    x = RNG.standard_normal((2, c, 9, 9)).astype(np.float32)
    constants = {"s": RNG.standard_normal(c).astype(np.float32), "b": RNG.standard_normal(c).astype(np.float32),
                 "m": RNG.standard_normal(c).astype(np.float32), "v": RNG.uniform(0.1, 2, c).astype(np.float32)}
    model = _graph_model([h.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])], {"x": x}, ["y"],
                         constants, 15)
    _assert_exact_everywhere(model, {"x": x})


# -- models quantized by ONNX Runtime's own tools -------------------------------------------------------------


@pytest.mark.parametrize("kind", ["QDQ", "dynamic"])
def test_quantized_model_runs_on_the_gpu_and_matches_onnxruntime(orientation_models, kind):
    paths, feeds = orientation_models
    model = onnx.load(str(paths[kind]))
    ops = {n.op_type for n in model.graph.node}
    assert {"QDQ": {"QuantizeLinear", "DequantizeLinear"}, "dynamic": {"DynamicQuantizeLinear", "ConvInteger",
                                                                       "MatMulInteger"}}[kind] <= ops
    expected = _ort(model, feeds)[0].astype(np.float64)
    for backend, (outputs, stats) in _every_backend(model, feeds).items():
        assert stats.get("fallback_layers", []) == [], (backend, stats.get("fallback_layers"))
        got = next(iter(outputs.values())).astype(np.float64)
        if kind == "dynamic":
            # Integer products exact, BatchNormalization and GlobalAveragePool in ONNX Runtime's order: what is
            # left is the last Softmax's rounding (before those were matched, 1.8e-2 on cpu).
            assert np.linalg.norm(got - expected) / np.linalg.norm(expected) < 1e-6, backend
        else:
            # The QDQ model's float convolutions sum in each backend's own order (ORT's in MLAS's), so a value
            # on a rounding tie requantizes one step apart and the step travels on: a few of the four output
            # probabilities' 1/255 steps. Every quantized tensor on the way agrees almost everywhere (below).
            assert np.linalg.norm(got - expected) / np.linalg.norm(expected) < 5e-2, backend


def test_qdq_model_requantizes_alike_on_every_backend(orientation_models):
    """The static QDQ model's quantized tensors on the GPU agree with the cpu's (which equal ONNX Runtime's) but
    for rounding ties: a float32 convolution summing in the GPU's own order (Winograd's, or a shader's) lands on
    the other side of a tie in ~1e-5 of its outputs, and later layers spread each such step (a 1x1 convolution
    reads 64 inputs) until, twenty layers on, most elements of a late tensor sit a few steps off. So the first
    quantized tensors agree almost everywhere; a wrong kernel would disagree nearly everywhere at once."""
    paths, feeds = orientation_models
    proto = onnx.load(str(paths["QDQ"]))
    quantized = [n.output[0] for n in proto.graph.node if n.op_type == "QuantizeLinear"][:8]
    results = {}
    for backend in BACKENDS:
        model = ws.load_model(proto)
        for name in quantized:
            model.add_output(name)
        with ws.Worker(model, backend) as worker:
            results[backend] = worker.run(feeds)
    for backend in gpu_check.GPU_BACKENDS:
        for name in quantized:
            got, want = results[backend][name].astype(np.int32), results["cpu"][name].astype(np.int32)
            assert np.mean(got != want) < 1e-3 and np.abs(got - want).max() <= 2, (backend, name)


def test_a_float16_model_from_onnxruntimes_converter_runs_on_the_gpu():
    """The orientation model converted by ONNX Runtime's own float16 tool (weights and every layer float16, Casts
    at the inputs and outputs): no fallback layer anywhere, and as close to ORT's float16 run as ORT's float16
    run is to its float32 one."""
    zoo = pytest.importorskip("zoo")
    float16 = pytest.importorskip("onnxruntime.transformers.float16")
    proto = zoo.load_proto("orientation")
    feeds = zoo.input_feeds("orientation", proto)
    model = float16.convert_float_to_float16(proto, keep_io_types=True)
    assert sum(t.data_type == T.FLOAT16 for t in model.graph.initializer) > 10
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds)[0].astype(np.float64)
    for backend, (outputs, stats) in _every_backend(model, feeds).items():
        assert stats.get("fallback_layers", []) == [], (backend, stats.get("fallback_layers"))
        got = next(iter(outputs.values())).astype(np.float64)
        assert np.linalg.norm(got - expected) / np.linalg.norm(expected) < 1e-2, backend
