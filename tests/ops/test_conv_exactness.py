"""A GPU convolution is as exact as a direct float32 sum (issue 29): relative L2 error against a float64 reference
within 1.5x of a float32 accumulation tap by tap, on the 3x3 layers where Winograd applies, on both GPU backends.
F(4x4, 3x3) (4-7x a direct sum's error) is taken only with Worker(fast_winograd=True)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import BACKENDS, F, make_model, requires_gpu
from onnx import helper

import wgsentis as ws



def _conv_case(c: int, m: int, side: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, c, side, side)).astype(np.float32)
    w = (rng.standard_normal((m, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    model = make_model([helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])],
                       [("x", F, list(x.shape))], [("y", F, None)], {"w": w, "b": b})
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    exact = np.zeros((1, m, side, side))
    direct = np.zeros((1, m, side, side), np.float32)
    for i in range(3):
        for j in range(3):
            window = padded[:, :, i:i + side, j:j + side]
            exact += np.einsum("nchw,mc->nmhw", window.astype(np.float64), w[:, :, i, j].astype(np.float64))
            for k in range(c):  # a float32 sum, one term at a time
                direct += window[:, k:k + 1] * w[None, :, k, i, j, None, None]
    return model, {"x": x}, exact + b[None, :, None, None], direct + b[None, :, None, None]


def _relative_l2(got: np.ndarray, exact: np.ndarray) -> float:
    return float(np.linalg.norm(got - exact) / np.linalg.norm(exact))


@requires_gpu
@pytest.mark.parametrize("backend", ["gpu-compute", "gpu-pixel"])
@pytest.mark.parametrize("c,m,side", [(64, 64, 24), (128, 64, 12)])
def test_gpu_3x3_convolution_is_within_1_5x_of_a_direct_float32_sum(backend, c, m, side):
    model, feeds, exact, direct = _conv_case(c, m, side)
    bound = 1.5 * _relative_l2(direct, exact)
    loaded = ws.load_model(model)
    with ws.Worker(loaded, backend) as worker:
        default = _relative_l2(worker.run(feeds)["y"], exact)
    with ws.Worker(loaded, backend, fast_winograd=True) as worker:
        fast = _relative_l2(worker.run(feeds)["y"], exact)
    assert default <= bound, f"{backend}: {default:.2e} > 1.5 x direct ({bound / 1.5:.2e})"
    # The opt-in F(4x4) is the less exact transform this bound keeps out of the default (so the test can fail).
    assert fast > bound, f"{backend}: F(4x4) {fast:.2e} within the bound {bound:.2e}: is it still taken?"


def test_fast_winograd_must_be_a_bool():
    model, _, _, _ = _conv_case(8, 8, 4)
    with pytest.raises(ws.errors.InputError, match="fast_winograd"):
        ws.Worker(ws.load_model(model), "cpu", fast_winograd="yes")


def _qdq_resnet_blocks(tmp_path, channels: int = 64, side: int = 16, layers: int = 8):
    """A static-QDQ chain of 3x3 convolutions with residual blocks (onnxruntime.quantization's own QDQ
    rewrite of a float model), and one input."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    rng = np.random.default_rng(1)
    nodes, inits, prev = [], {}, "x"
    for i in range(layers):
        inits[f"w{i}"] = (rng.standard_normal((channels, channels, 3, 3)) / np.sqrt(9 * channels) * 1.4
                          ).astype(np.float32)
        inits[f"b{i}"] = (rng.standard_normal(channels) * 0.1).astype(np.float32)
        nodes.append(helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1]))
        if i % 2:
            nodes.append(helper.make_node("Add", [f"c{i}", f"r{i - 1}"], [f"a{i}"]))
            nodes.append(helper.make_node("Relu", [f"a{i}"], [f"r{i}"]))
        else:
            nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        prev = f"r{i}"
    nodes.append(helper.make_node("GlobalAveragePool", [prev], ["y"]))
    shape = [1, channels, side, side]
    onnx.save(make_model(nodes, [("x", F, shape)], [("y", F, None)], inits, opset=13), tmp_path / "float.onnx")

    class Calibration(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter([{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(8)])

        def get_next(self):
            return next(self.batches, None)

    quantize_static(str(tmp_path / "float.onnx"), str(tmp_path / "qdq.onnx"), Calibration(),
                    quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return onnx.load(tmp_path / "qdq.onnx"), {"x": rng.standard_normal(shape).astype(np.float32)}


@pytest.fixture(scope="module")
def qdq_case(tmp_path_factory):
    """The QDQ chain, its input and ONNX Runtime's output (graph optimizations off: each node its own kernel)."""
    from helpers import ort_outputs

    model, feeds = _qdq_resnet_blocks(tmp_path_factory.mktemp("qdq"))
    return model, feeds, ort_outputs(model, feeds, optimize=False)[0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_static_qdq_convolution_chain_matches_onnx_runtime_on_every_backend(qdq_case, backend):
    # With F(4x4) a code flipped at one layer re-quantized through the rest (gpu-compute: 1.7e-3 from ORT here).
    model, feeds, expected = qdq_case
    with ws.Worker(ws.load_model(model), backend) as worker:
        got = worker.run(feeds)["y"]
    assert _relative_l2(got, expected) <= 1e-6, _relative_l2(got, expected)


def test_kernel_options_must_be_kernel_options():
    model, _, _, _ = _conv_case(8, 8, 4)
    with pytest.raises(ws.errors.InputError, match="kernels"):
        ws.Worker(ws.load_model(model), "cpu", kernels={"cpu_winograd": False})
    with pytest.raises(ws.errors.InputError, match="cpu_winograd"):
        ws.KernelOptions(cpu_winograd="no")
