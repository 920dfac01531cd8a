"""Shader loops and the driver's per-invocation loop limit (GPUContext.max_loop_iterations).

lavapipe ends every loop of an invocation once the invocation has made 65535 loop passes in all, silently.
Each kernel family's builder counts its loop passes (gpu_compute.loop_passes) and asks Recorder.loops_fit:
just over the limit a layer splits its work (reductions, norms) or falls back to the CPU; just under it stays
on the GPU. The shapes sit on either side of the limit, computed from each kernel's loop structure."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from helpers import F, gpu_adapter, make_model
from onnx import helper

import wgsentis as ws
from wgsentis.backends.gpu.device import get_context
from wgsentis.backends.gpu.steps import Dispatch
from wgsentis.backends.gpu.tensors import LOOP_ALLOWANCE, loop_passes
from wgsentis.backends.gpu_compute import ComputeProgram as GPUProgram

GPU_OK, NO_GPU = gpu_adapter()
if not GPU_OK:  # the module reads the device's limit as it loads: helpers.requires_gpu would come too late
    pytest.skip(NO_GPU, allow_module_level=True)

LIMIT = get_context().max_loop_iterations
needs_limit = pytest.mark.skipif(LIMIT is None, reason="this adapter's driver sets no shader loop limit")


def _is_lavapipe() -> bool:
    info = get_context().info
    return info.adapter_type.lower() == "cpu" and "llvmpipe" in f"{info.name} {info.vendor}".lower()


# -- the limit itself ------------------------------------------------------------------------------------------
def test_the_context_knows_the_loop_limit_of_its_driver():
    assert LIMIT == (65535 if _is_lavapipe() else None)


PROBE = """
@group(0) @binding(0) var<storage, read> P: array<u32>;
@group(0) @binding(1) var<storage, read_write> O: array<u32>;
@compute @workgroup_size(1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let b = gid.x * 4u;
    var nested = 0u;
    for (var i = 0u; i < P[b]; i++) { for (var j = 0u; j < P[b + 1u]; j++) { nested += 1u; } }
    if (P[b + 3u] != 0u) {
        for (var j = 0u; j < P[b + 3u]; j++) { nested += 1u; }
    }
    var rest = 0u;
    for (var k = 0u; k < P[b + 2u]; k++) { rest += 1u; }
    O[gid.x * 2u] = nested;
    O[gid.x * 2u + 1u] = rest;
}
"""


def _probe(rows: list[tuple[int, int, int, int]]) -> np.ndarray:
    """Per row (outer, inner, then, branch): the trips of a nested outer x inner loop and of a loop taken when
    ``branch`` is not 0 (``branch`` trips), then those of a following loop of ``then`` trips."""
    ctx = get_context()
    usage = ctx.wgpu.BufferUsage
    pipeline = ctx.device.create_compute_pipeline(
        layout="auto", compute={"module": ctx.device.create_shader_module(code=PROBE), "entry_point": "main"})
    params = ctx.device.create_buffer_with_data(data=np.array(rows, np.uint32).tobytes(), usage=usage.STORAGE)
    out = ctx.device.create_buffer(size=8 * len(rows), usage=usage.STORAGE | usage.COPY_SRC)
    group = ctx.device.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=[
        {"binding": 0, "resource": {"buffer": params}}, {"binding": 1, "resource": {"buffer": out}}])
    encoder = ctx.device.create_command_encoder()
    cpass = encoder.begin_compute_pass()
    cpass.set_pipeline(pipeline)
    cpass.set_bind_group(0, group)
    cpass.dispatch_workgroups(len(rows))
    cpass.end()
    ctx.queue.submit([encoder.finish()])
    return np.frombuffer(ctx.queue.read_buffer(out), np.uint32).reshape(len(rows), 2)


@pytest.mark.skipif(not _is_lavapipe(), reason="the measured limit is lavapipe's")
def test_lavapipe_counts_loop_passes_per_invocation_across_all_loops():
    assert _probe([(1, 70_000, 0, 0)])[0, 0] == 65535  # one loop: cut at the limit, without an error
    shapes = [(1, 40_000, 0), (10, 10, 0), (100, 100, 0), (0, 5, 0), (10, 10, 7)]
    got = _probe([(o, i, 100_000, br) for o, i, br in shapes])
    for (outer, inner, branch), (nested, rest) in zip(shapes, got, strict=True):
        assert nested == outer * inner + branch
        used = 65535 - int(rest)  # the following loop runs what the loops before it left of the count
        # the branch's loop makes its passes when taken, and one pass (masked off) when not
        assert used <= loop_passes(outer, inner) + loop_passes(branch) <= used + 2, (outer, inner, branch, used)


# -- each family on either side of the limit ---------------------------------------------------------------------
def _model(nodes: list[onnx.NodeProto], feeds: dict[str, np.ndarray], inits: dict) -> ws.Model:
    out = onnx.TensorProto.INT64 if nodes[-1].op_type == "ArgMax" else F
    return ws.load_model(make_model(nodes, [(k, F, list(v.shape)) for k, v in feeds.items()], [("y", out, None)],
                                    inits))


def _run(model: ws.Model, feeds: dict[str, np.ndarray]) -> tuple[dict[str, Any], list[str], int]:
    """The GPU worker's outputs, its fallback layers and the dispatches of layer 'op' in its plan."""
    with ws.Worker(model, "gpu-compute") as worker:
        got = worker.run(feeds)
        fallbacks = list(worker.stats()["fallback_layers"])
    program = GPUProgram(model.graph)
    try:
        program.run(feeds).wait()
        index = [layer.name for layer in model.graph.layers].index("op")
        dispatches = sum(1 for s in program.last_plan.steps if isinstance(s, Dispatch) and s.layer == index)
    finally:
        program.close()
    return got, fallbacks, dispatches


def _check(model: ws.Model, feeds: dict[str, np.ndarray], got: dict[str, Any], rtol: float, atol: float) -> None:
    with ws.Worker(model, "cpu") as worker:
        want = worker.run(feeds)["y"]
    if want.dtype.kind in "iu":
        np.testing.assert_array_equal(got["y"], want)
    else:
        np.testing.assert_allclose(got["y"], want, rtol=rtol, atol=atol * max(1.0, float(np.abs(want).max())))


def _rng() -> np.random.Generator:
    return np.random.default_rng(7)


def _argmax(r: int):
    x = _rng().standard_normal((2, r)).astype(np.float32)
    x[:, -3] = 10.0  # the answer lies past the limit
    return [helper.make_node("ArgMax", ["x"], ["y"], name="op", axis=1)], {"x": x}, {}


def _softmax(r: int):
    x = _rng().standard_normal((2, r)).astype(np.float32)
    x[:, -5:] = 12.0  # most of the mass lies past the limit
    return [helper.make_node("Softmax", ["x"], ["y"], name="op", axis=-1)], {"x": x}, {}


def _cumsum(r: int):
    return [helper.make_node("CumSum", ["x", "ax"], ["y"], name="op")], \
        {"x": _rng().standard_normal((2, r)).astype(np.float32)}, {"ax": np.array(1, np.int64)}


def _matmul(k: int):
    rng = _rng()
    return [helper.make_node("MatMul", ["x", "w"], ["y"], name="op")], \
        {"x": rng.standard_normal((1, k)).astype(np.float32)}, {"w": rng.standard_normal((k, 4)).astype(np.float32)}


def _conv(kw: int):
    rng = _rng()
    return [helper.make_node("Conv", ["x", "w"], ["y"], name="op")], \
        {"x": rng.standard_normal((1, 1, kw + 3)).astype(np.float32)}, \
        {"w": rng.standard_normal((1, 1, kw)).astype(np.float32)}


def _maxpool(k: int):
    x = _rng().standard_normal((1, 2, k)).astype(np.float32)
    x[:, :, -2] = 10.0
    return [helper.make_node("MaxPool", ["x"], ["y"], name="op", kernel_shape=[k])], {"x": x}, {}


def _gru(hidden: int):
    rng = _rng()
    inits = {"w": (rng.standard_normal((1, 3 * hidden, 4)) * 0.1).astype(np.float32),
             "r": (rng.standard_normal((1, 3 * hidden, hidden)) * 0.02).astype(np.float32)}
    return [helper.make_node("GRU", ["x", "w", "r"], ["y"], name="op", hidden_size=hidden)], \
        {"x": rng.standard_normal((2, 1, 4)).astype(np.float32)}, inits


# name -> (case maker, a size just over the limit, one just under; from each kernel's loop passes)
FALLBACKS: dict[str, tuple[Any, int, int]] = {
    "argmax": (_argmax, 70_000, 60_000),  # loop_passes(r - 1)
    "softmax": (_softmax, 24_000, 20_000),  # 3 * loop_passes(r)
    "cumsum": (_cumsum, 70_000, 60_000),  # loop_passes(r)
    "matmul": (_matmul, 280_000, 240_000),  # loop_passes(taps, K // 4) + loop_passes(K % 4)
    "conv-depthwise": (_conv, 70_000, 60_000),  # loop_passes(kh, kw) + loop_passes(4)
    "maxpool": (_maxpool, 70_000, 60_000),  # loop_passes(*window)
    "gru": (_gru, 1500, 1300),  # 2 * loop_passes(ceil(H / 64), H) + loop_passes(ceil(H / 64))
}


@needs_limit
@pytest.mark.parametrize("case", list(FALLBACKS))
def test_a_layer_whose_loops_pass_the_limit_falls_back_and_one_under_it_stays(case):
    make, over, under = FALLBACKS[case]
    for size, falls_back in ((over, True), (under, False)):
        nodes, feeds, inits = make(size)
        model = _model(nodes, feeds, inits)
        got, fallbacks, _ = _run(model, feeds)
        assert ("op" in fallbacks) == falls_back, (case, size, fallbacks)
        _check(model, feeds, got, rtol=1e-3, atol=1e-4)


def test_the_sizes_sit_on_either_side_of_lavapipes_limit():
    budget = 65535 - LOOP_ALLOWANCE
    passes = {"argmax": lambda r: loop_passes(r - 1), "softmax": lambda r: 3 * loop_passes(r),
              "cumsum": loop_passes, "matmul": lambda k: loop_passes(1, k // 4) + loop_passes(k % 4),
              "conv-depthwise": lambda kw: loop_passes(1, kw) + loop_passes(4),
              "maxpool": lambda k: loop_passes(1, 1, k),
              "gru": lambda h: 2 * loop_passes(-(-h // 64), h) + loop_passes(-(-h // 64))}
    for name, (_make, over, under) in FALLBACKS.items():
        assert passes[name](under) <= budget < passes[name](over), name


def _reduce_sum(rows_outer: int):
    # Three reduced groups (every element's offset takes a loop over them) and 256 rows: no split for speed.
    x = _rng().standard_normal((rows_outer, 16, 32, 16, 32)).astype(np.float32)
    return [helper.make_node("ReduceSum", ["x", "ax"], ["y"], name="op", keepdims=0)], {"x": x}, \
        {"ax": np.array([0, 2, 4], np.int64)}


def _layer_norm(length: int):
    return [helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], name="op")], \
        {"x": _rng().standard_normal((2, length)).astype(np.float32)}, \
        {"s": np.full(length, 1.5, np.float32), "b": np.full(length, 0.25, np.float32)}


# name -> (case maker, over the limit: dispatches of the split work, under it: dispatches)
SPLITS: dict[str, tuple[Any, tuple[int, int], tuple[int, int]]] = {
    "reduce-sum": (_reduce_sum, (14, 2), (12, 1)),  # L = 14 * 32 * 32 elements a row: loop_passes(L, 3) = 5L + 2
    # norm_rows.wgsl, 16 invocations a row: 3 * loop_passes(ceil(L / 16)) + ...; past it, norm_stats_wg.wgsl with
    # 256 (2 * loop_passes(ceil(L / 16)) + ... is over too), then the elementwise apply
    "layer-norm": (_layer_norm, (600_000, 2), (300_000, 1)),
}


@needs_limit
@pytest.mark.parametrize("case", list(SPLITS))
def test_a_layer_whose_loops_pass_the_limit_splits_its_work_on_the_gpu(case):
    make, over, under = SPLITS[case]
    for size, dispatches in (over, under):
        nodes, feeds, inits = make(size)
        model = _model(nodes, feeds, inits)
        got, fallbacks, made = _run(model, feeds)
        assert "op" not in fallbacks and made == dispatches, (case, size, fallbacks, made)
        _check(model, feeds, got, rtol=1e-3, atol=1e-4)
