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


def test_broadcast_binary_stays_scalar(shaders):
    a = np.random.default_rng(1).random((2, 3, 8), dtype=np.float32)
    b = np.random.default_rng(2).random((3, 1), dtype=np.float32)
    compare(node_model("Add", {"a": a, "b": b}), {"a": a, "b": b})
    assert "compute/binary.wgsl" in shaders and "compute/binary4.wgsl" not in shaders
