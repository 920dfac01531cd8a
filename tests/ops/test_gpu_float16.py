"""gpu-compute with precision="float16": weights held in half precision (rgba16float textures or f16
storage buffers with shader-f16), products accumulated in float32."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_check
import wgsentis as ws
from wgsentis.errors import DeviceError, InputError

pytestmark = gpu_check.requires_gpu

RNG = np.random.default_rng(11)


def _rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _rel_l2(a, b):
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def _run(model, feeds, precision, textures=True):
    kernels = ws.KernelOptions(texture_operands=textures)
    with ws.Worker(ws.load_model(model), "gpu-compute", precision=precision, kernels=kernels) as worker:
        out = worker.run(feeds)["y0"]
        return out, worker.stats()


CASES = [
    ("Conv", {"x": _rand(1, 16, 12, 12)}, {"w": _rand(24, 16, 3, 3, scale=0.2), "b": _rand(24)},
     {"pads": [1, 1, 1, 1]}),  # Winograd
    ("Conv", {"x": _rand(2, 8, 8, 8)}, {"w": _rand(12, 8, 1, 1), "b": _rand(12)}, {}),  # 1x1 as a matmul
    ("Conv", {"x": _rand(1, 3, 15, 15)}, {"w": _rand(8, 3, 5, 5, scale=0.2)}, {"strides": [2, 2]}),  # implicit
    ("MatMul", {"a": _rand(9, 40)}, {"b": _rand(40, 20)}, {}),
    ("Gemm", {"a": _rand(7, 32)}, {"b": _rand(12, 32), "c": _rand(12)}, {"transB": 1}),
]


@pytest.mark.parametrize("textures", [True, False])
@pytest.mark.parametrize("op,feeds,constants,attrs", CASES)
def test_float16_weights_match_float32(op, feeds, constants, attrs, textures, shaders):
    model = gpu_check.node_model(op, feeds, constants=constants, **attrs)
    full, full_stats = _run(model, feeds, "float32", textures)
    shaders.clear()
    half, half_stats = _run(model, feeds, "float16", textures)
    assert half_stats["precision"] == "float16" and half_stats["fallback_layers"] == []
    assert half.dtype == np.float32
    err = _rel_l2(half, full)
    # float16 rounds each weight by at most 2^-11 relative: visible, but far below 1e-2.
    assert 1e-6 < err < 2e-3, err
    # The weight matrices take half the bytes (biases and small constants stay float32).
    assert half_stats["weight_bytes"] < 0.75 * full_stats["weight_bytes"]
    assert any(s.startswith("compute/matmul") for s in shaders)


def test_float16_buffer_path_enables_shader_f16(monkeypatch):
    # Every dispatch keys its pipeline by its substitutions, cached or not (the WGSL source itself is only
    # assembled on a cache miss, which an earlier test with the same shader leaves out).
    from wgsentis.backends import gpu_compute

    seen = []
    pipeline_key = gpu_compute.pipeline_key

    def spy(shader, subs, *args, **kwargs):
        seen.append(dict(subs or {}))
        return pipeline_key(shader, subs, *args, **kwargs)

    monkeypatch.setattr(gpu_compute, "pipeline_key", spy)
    feeds = {"a": _rand(5, 16)}
    _run(gpu_check.node_model("MatMul", feeds, constants={"b": _rand(16, 8)}), feeds, "float16", textures=False)
    assert any(s.get("ENABLE", "").endswith("enable f16;") and s.get("TB") == "vec4<f16>" for s in seen)


def test_float16_needs_shader_f16(monkeypatch):
    from wgsentis.backends.gpu.device import get_context

    monkeypatch.setattr(get_context(), "has_f16", False)
    feeds = {"a": _rand(2, 4)}
    model = ws.load_model(gpu_check.node_model("MatMul", feeds, constants={"b": _rand(4, 4)}))
    with pytest.raises(DeviceError, match="shader-f16"):
        ws.Worker(model, "gpu-compute", precision="float16")


def test_precision_argument_errors():
    feeds = {"a": _rand(2, 4)}
    model = ws.load_model(gpu_check.node_model("MatMul", feeds, constants={"b": _rand(4, 4)}))
    with pytest.raises(InputError, match="precision='bfloat16'"):
        ws.Worker(model, "gpu-compute", precision="bfloat16")
    with pytest.raises(InputError, match="gpu-compute"):
        ws.Worker(model, "cpu", precision="float16")
