"""gpu-pixel at the device's edges: on a device that grants only WebGPU's default limits (wgpu-py asks for all
the adapter has, so lavapipe's generous limits would hide code that needs more), and on a device whose textures
are too small for a tensor (the layer runs on the host, or the input is refused by name, never a wrong answer)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers import F, make_model, requires_gpu
from onnx import helper

import wgsentis as ws
from wgsentis.backends.gpu.device import GPUContext
from wgsentis.backends.gpu_pixel import PixelProgram

pytestmark = requires_gpu

# WebGPU's default limits (https://www.w3.org/TR/webgpu/#limit-default) that a pixel program can run into.
WEBGPU_DEFAULTS = {
    "max-texture-dimension-2d": 8192,
    "max-color-attachments": 8,
    "max-color-attachment-bytes-per-sample": 32,
    "max-sampled-textures-per-shader-stage": 16,
    "max-uniform-buffer-binding-size": 65536,
    "max-bind-groups": 4,
    "max-bindings-per-bind-group": 1000,
    "max-inter-stage-shader-variables": 16,
}


@pytest.fixture(scope="module")
def default_limits() -> GPUContext:
    ctx = GPUContext(limits=WEBGPU_DEFAULTS)
    assert int(ctx.limits["max-color-attachment-bytes-per-sample"]) == 32  # granted as asked, not more
    return ctx


@pytest.fixture(scope="module")
def small_textures() -> GPUContext:
    return GPUContext(limits={"max-texture-dimension-2d": 64})


def _run(ctx: GPUContext, model: ws.Model, feeds: dict[str, np.ndarray]) -> tuple[dict[str, Any], dict]:
    program = PixelProgram(model.graph, ctx=ctx)
    try:
        first = program.execute(feeds).wait()
        again = program.execute(feeds).wait()
        for name, value in first.items():
            np.testing.assert_array_equal(again[name], value, err_msg=f"{name}: the replay differs")
        return first, program.stats()
    finally:
        program.close()


def _cpu(model: ws.Model, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    with ws.Worker(model, "cpu") as worker:
        return worker.run(feeds)


def _small_net(rng: np.random.Generator) -> tuple[ws.Model, dict[str, np.ndarray]]:
    """Conv, pools, concat, normalization, a product and a softmax: the model-path programs."""
    x = rng.standard_normal((1, 3, 20, 20)).astype(np.float32)
    inits = {"w1": rng.standard_normal((8, 3, 3, 3)).astype(np.float32),
             "b1": rng.standard_normal(8).astype(np.float32),
             "w2": rng.standard_normal((4, 8, 1, 1)).astype(np.float32),
             "s": rng.random(12).astype(np.float32) + 0.5, "o": rng.standard_normal(12).astype(np.float32),
             "m": rng.standard_normal(12).astype(np.float32), "v": rng.random(12).astype(np.float32) + 0.5,
             "fc": rng.standard_normal((12, 10)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2"], ["c2"]),
             helper.make_node("Concat", ["p1", "c2"], ["cat"], axis=1),
             helper.make_node("BatchNormalization", ["cat", "s", "o", "m", "v"], ["bn"]),
             helper.make_node("GlobalAveragePool", ["bn"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("MatMul", ["f", "fc"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["y"], axis=-1)]
    model = ws.load_model(make_model(nodes, [("x", F, list(x.shape))], [("y", F, None)], inits))
    return model, {"x": x}


def test_a_network_runs_without_fallback_at_webgpus_default_limits(default_limits):
    model, feeds = _small_net(np.random.default_rng(0))
    got, stats = _run(default_limits, model, feeds)
    assert stats["fallback_layers"] == []
    np.testing.assert_allclose(got["y"], _cpu(model, feeds)["y"], rtol=1e-4, atol=1e-6)


def test_a_product_wider_than_two_targets_runs_at_webgpus_default_limits(default_limits):
    """At the defaults a fragment may write only two rgba32float targets: the products that tile their output
    over several targets must degrade, not fail to make their pipeline."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((37, 70)).astype(np.float32)
    w = rng.standard_normal((70, 29)).astype(np.float32)
    model = ws.load_model(make_model([helper.make_node("MatMul", ["a", "w"], ["y"])], [("a", F, [37, 70])],
                                     [("y", F, None)], {"w": w}))
    got, stats = _run(default_limits, model, {"a": a})
    assert stats["fallback_layers"] == []
    np.testing.assert_allclose(got["y"], a @ w, rtol=1e-4, atol=1e-4)


def test_a_tensor_past_the_texture_limit_runs_its_layers_on_the_host(small_textures):
    """64 x 64 texels of four lanes hold 16384 elements: a (200, 100) tensor does not fit, so the layers that
    make or read it run on the host with their reasons, and the answer is the CPU's."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((20, 10)).astype(np.float32)
    big = rng.standard_normal((1, 10, 200)).astype(np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Unsqueeze", ["r", "ax"], ["u"]),
             helper.make_node("Add", ["u", "big"], ["wide"]),  # (20, 10, 200): 40000 elements
             helper.make_node("ReduceSum", ["wide", "ax"], ["y"], keepdims=0)]
    model = ws.load_model(make_model(nodes, [("x", F, [20, 10])], [("y", F, None)],
                                     {"big": big, "ax": np.array([2])}))
    feeds = {"x": x}
    got, stats = _run(small_textures, model, feeds)
    np.testing.assert_allclose(got["y"], _cpu(model, feeds)["y"], rtol=1e-4, atol=1e-4)
    reasons = {p["layer"]: p for p in stats["placements"]}
    assert reasons["Add_2"]["device"] == "fallback" and "maxTextureDimension2D" in reasons["Add_2"]["reason"]
    assert reasons["Relu_0"]["device"] == "gpu"


def test_an_input_past_the_texture_limit_stays_on_the_host(small_textures):
    x = np.random.default_rng(3).standard_normal((300, 300)).astype(np.float32)  # 22500 texels > 64 x 64
    model = ws.load_model(make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [300, 300])],
                                     [("y", F, None)], {}))
    got, stats = _run(small_textures, model, {"x": x})
    np.testing.assert_array_equal(got["y"], np.maximum(x, 0))
    assert stats["cpu_layers"] == ["Relu_0"] and stats["gpu_layers"] == []
