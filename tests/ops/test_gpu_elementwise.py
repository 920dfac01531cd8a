"""Elementwise programs on gpu-compute against the numpy backend: the vec4 path (float32, element
count a multiple of 4) and the scalar path (anything else) give the same answers."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_check import compare, node_model, requires_gpu


pytestmark = requires_gpu



@pytest.mark.parametrize("size,vec4", [(4096, True), (4097, False), (6, False), (4, True)])
@pytest.mark.parametrize("op,attrs", [("Relu", {}), ("Sigmoid", {}), ("HardSwish", {}), ("LeakyRelu", {"alpha": 0.3}),
                                      ("Mish", {}), ("Erf", {})])
def test_unary_paths(op, attrs, size, vec4, shaders):
    x = np.random.default_rng(size).standard_normal(size).astype(np.float32) * 4
    compare(node_model(op, {"x": x}, opset=18, **attrs), {"x": x}, rtol=1e-5, atol=1e-6)
    assert ("compute/unary4.wgsl" in shaders) == vec4


@pytest.mark.parametrize("shape,vec4", [((2, 3, 8), True), ((3, 5, 7), False)])
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Pow"])
def test_same_shape_binary_paths(op, shape, vec4, shaders):
    rng = np.random.default_rng(len(shape))
    a = rng.random(shape, dtype=np.float32) + 0.5
    b = rng.random(shape, dtype=np.float32) + 0.5
    compare(node_model(op, {"a": a, "b": b}), {"a": a, "b": b}, rtol=1e-5, atol=1e-6)
    assert ("compute/binary4.wgsl" in shaders) == vec4


@pytest.mark.parametrize("a_shape,b_shape,vec4", [
    ((2, 3, 8), (1,), True),  # a scalar tensor, splat
    ((1,), (2, 3, 8), True),  # the scalar first (PP-OCR's Mul(3, x))
    ((2, 6, 4, 4), (), True),  # 0-d
    ((2, 6, 4, 4), (1, 6, 1, 1), True),  # per channel: each group of four shares one element
    ((6, 1, 1), (2, 6, 4, 4), True),  # per channel, fewer dims, first
    ((2, 6, 4, 4), (2, 1, 1, 1), True),  # per image
    ((2, 3, 8), (3, 1), True),  # one axis with an inner extent of 8
    ((2, 3, 6), (3, 1), False),  # inner extent 6: groups of four straddle two elements
    ((2, 3, 8), (1, 8), False),  # the last axis varies within a group
    ((2, 6, 4, 4), (2, 6, 1, 1), False),  # two non-unit axes
])
@pytest.mark.parametrize("op", ["Add", "Mul", "Div", "Sub"])
def test_broadcast_binary_paths(a_shape, b_shape, vec4, op, shaders):
    rng = np.random.default_rng(len(a_shape) + len(b_shape))
    a = (rng.random(a_shape) + 0.5).astype(np.float32)
    b = (rng.random(b_shape) + 0.5).astype(np.float32)
    compare(node_model(op, {"a": a, "b": b}), {"a": a, "b": b}, rtol=1e-5, atol=1e-6)
    assert ("compute/binary4.wgsl" in shaders) == vec4
    assert ("compute/binary.wgsl" in shaders) != vec4


def test_broadcast_scalar_constant_with_fused_relu(shaders):
    """A constant scalar operand (an initializer) and the fused activation on the vec4 path."""
    from onnx import helper

    a = np.random.default_rng(3).standard_normal((1, 8, 6, 6)).astype(np.float32)
    model = node_model("Add", {"a": a}, constants={"c": np.array([0.25], np.float32)})
    model.graph.node[0].output[0] = "t"
    model.graph.node.append(helper.make_node("Relu", ["t"], ["y0"]))
    compare(model, {"a": a}, rtol=1e-6, atol=1e-6)
    assert "compute/binary4.wgsl" in shaders


@pytest.mark.parametrize("size", [4096, 4097])  # the vec4 and the scalar path
@pytest.mark.parametrize("function", ["probed", "div_rounded"])
def test_div_and_reciprocal_are_correctly_rounded(size, function, monkeypatch):
    # As the CPU divides, bit for bit: quantization graphs round quotients to integers, where one ulp
    # moves a value across a tie (DynamicQuantizeLinear's 5 / 255 on NVIDIA). "probed": the function
    # the device probe chose; div_rounded is also checked where the probe needs no correction.
    import wgsentis as ws
    from wgsentis.backends.gpu.device import get_context

    if function != "probed":
        monkeypatch.setattr(get_context(), "division_function", function)

    rng = np.random.default_rng(size)
    # Normal quotients (within 1e+-30): whether a driver keeps subnormals is not division's precision.
    a = (rng.standard_normal(size) * 10.0 ** rng.integers(-15, 15, size)).astype(np.float32)
    b = (rng.standard_normal(size) * 10.0 ** rng.integers(-15, 15, size)).astype(np.float32)
    a[:8] = [5.0, 1.0, 0.0, -0.0, np.inf, np.nan, 3.0, -np.inf]
    b[:8] = [255.0, 3.0, 2.0, 0.0, 2.0, 1.0, np.inf, -np.inf]
    with np.errstate(all="ignore"):
        expected = {"Div": a / b, "Reciprocal": np.float32(1.0) / b}
    for op, feeds in (("Div", {"a": a, "b": b}), ("Reciprocal", {"x": b})):
        with ws.Worker(ws.load_model(node_model(op, feeds)), "gpu-compute") as worker:
            got = worker.run(feeds)["y0"]
        np.testing.assert_array_equal(got, expected[op], err_msg=op)


def test_the_division_probe_picks_a_function_math_wgsl_defines():
    from wgsentis.backends.gpu.device import get_context, wgsl_source

    chosen = get_context().division_function
    assert chosen in ("div_plain", "div_rounded")
    assert f"fn {chosen}(zero: u32, a: f32, b: f32) -> f32" in wgsl_source("common/math.wgsl")


def test_only_a_dividing_expression_asks_for_the_division_probe(monkeypatch):
    import wgsentis as ws
    from wgsentis.backends.gpu.device import GPUContext

    def probe(self):
        raise AssertionError("the division probe was consulted")

    # A property on the class wins over a value the probe already cached on the context.
    monkeypatch.setattr(GPUContext, "division_function", property(probe))
    x = np.linspace(-2, 2, 64, dtype=np.float32)
    for op in ("Relu", "Sigmoid"):
        with ws.Worker(ws.load_model(node_model(op, {"x": x})), "gpu-compute") as worker:
            worker.run({"x": x})
    with pytest.raises(ws.errors.LayerError, match="probe was consulted"), \
            ws.Worker(ws.load_model(node_model("Reciprocal", {"x": x})), "gpu-compute") as worker:
        worker.run({"x": x})
