"""Operands past the storage binding limit run in tiles, never on the host (issue: "No fallback for size").

A tensor may be as large as the device's largest buffer; a dispatch binds a *window* of it (``Recorder.window``:
an element offset that becomes the binding's byte offset, added to the allocation's own offset in its arena).
Convolutions run over blocks of whole images (windows of X and Y) or over output rows of one image (the input
rows with their halo copied into a staging tensor, the outputs copied back; 1-D: output columns), every path;
elementwise unary and binary ops, Where, the quantization maps and ConvTranspose's output over contiguous blocks
of elements; MatMul and Gemm over blocks of rows of A and Y, or of batches (a transposed A transposed first). The
cases lower the binding limit to 1 MiB on a second device on the same adapter, so that small tensors need
tiles, and compare with the CPU kernels with no fallback layer, recorded and replayed (the replay runs on the
planner's arenas). What still cannot tile falls back cleanly. The reported 128-channel convolution (X and Y of
148 MB each, past lavapipe's 128 MiB binding) runs at the real limits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import pytest
from helpers import F, make_model, requires_gpu
from onnx import helper
from ops.gpu_check import compare, node_model

import wgsentis as ws
from wgsentis.backends.gpu.device import GPUContext
from wgsentis.backends.gpu.steps import Copy, Dispatch
from wgsentis.backends.gpu_compute import ComputeProgram, Recorder

pytestmark = requires_gpu

MiB = 1 << 20


@pytest.fixture(scope="module")
def small_binding() -> GPUContext:
    """A device that binds at most 1 MiB per storage buffer and makes buffers of at most 16 MiB."""
    return GPUContext(limits={"max-storage-buffer-binding-size": MiB, "max-buffer-size": 16 * MiB})


def _model(nodes: list[onnx.NodeProto], feeds: dict[str, np.ndarray], inits: dict | None = None) -> ws.Model:
    return ws.load_model(make_model(nodes, [(k, F, list(v.shape)) for k, v in feeds.items()], [("y", F, None)],
                                    inits or {}))


@dataclass
class Steps:
    """What a plan's steps did, counted before its program is closed (which empties them)."""

    dispatches: int
    windows: int  # dispatches that bind a window (a binding offset within an allocation)
    copies: int  # buffer-to-buffer copies


def _steps(plan: Any) -> Steps:
    dispatches = [s for s in plan.steps if isinstance(s, Dispatch)]
    return Steps(len(dispatches), sum(1 for s in dispatches if any(s.offsets)),
                 sum(1 for s in plan.steps if type(s) is Copy))


def _run(ctx: GPUContext, model: ws.Model, feeds: dict[str, np.ndarray]) -> tuple[np.ndarray, Steps, list[str]]:
    """Run ``model`` on ``ctx`` twice (traced and replayed on its arenas, then replayed again); returns the output,
    its plan's steps and the fallback layers."""
    program = ComputeProgram(model.graph, ctx=ctx, fast_winograd=True)  # the F(4x4) paths its cases size
    try:
        first = program.run(feeds).wait()["y"]
        again = program.run(feeds).wait()["y"]
        steps, fallback = _steps(program.last_plan), program.stats()["fallback_layers"]
    finally:
        program.close()
    np.testing.assert_array_equal(again, first, err_msg="the replay differs")
    return first, steps, fallback


def _cpu(model: ws.Model, feeds: dict[str, np.ndarray]) -> np.ndarray:
    with ws.Worker(model, "cpu") as worker:
        return worker.run(feeds)["y"]


def _check(ctx: GPUContext, model: ws.Model, feeds: dict[str, np.ndarray], rtol: float = 1e-4,
           atol: float = 2e-4) -> Steps:
    """Assert no fallback and the CPU's answer; returns what the plan's steps did."""
    got, steps, fallback = _run(ctx, model, feeds)
    assert fallback == [], f"fell back: {fallback}"
    np.testing.assert_allclose(got, _cpu(model, feeds), rtol=rtol, atol=atol)
    return steps


def _conv_model(x_shape: tuple[int, ...], w_shape: tuple[int, ...], *, residual: bool = False, seed: int = 0,
                **attrs: Any) -> tuple[ws.Model, dict[str, np.ndarray]]:
    """Conv with a bias (with a residual Add and a Relu the passes fuse into it, when asked) and its feeds."""
    rng = np.random.default_rng(seed)
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32)}
    fan_in = int(np.prod(w_shape[1:]))
    inits = {"w": (rng.standard_normal(w_shape) / np.sqrt(fan_in)).astype(np.float32),
             "b": rng.standard_normal(w_shape[0]).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", **attrs)]
    if residual:
        out_shape = _cpu(_model(nodes, feeds, inits), feeds).shape
        feeds["z"] = rng.standard_normal(out_shape).astype(np.float32)
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", **attrs),
                 helper.make_node("Add", ["c", "z"], ["s"], name="add"),
                 helper.make_node("Relu", ["s"], ["y"], name="relu")]
    return _model(nodes, feeds, inits), feeds


# case -> (X shape, W shape, Conv attributes, fused residual and Relu, how X and Y are tiled): X or Y (or both)
# over the 1 MiB binding limit.
CONV_CASES: dict[str, tuple[tuple, tuple, dict, bool, str]] = {
    # blocks of whole images whose offsets are aligned: windows of X and Y, no copy (Winograd F(4x4))
    "winograd4-image-windows": ((3, 16, 64, 96), (16, 16, 3, 3), {"pads": [1] * 4}, False, "windows"),
    "winograd4-image-windows-fused": ((3, 16, 64, 96), (16, 16, 3, 3), {"pads": [1] * 4}, True, "windows"),
    # images whose planes are not a whole number of alignment units: each block copied in and out
    "winograd4-unaligned-images": ((3, 15, 101, 97), (8, 15, 3, 3), {"pads": [1] * 4}, False, "staged"),
    # output rows of one image: X's rows (and the halo) staged per channel, every path
    "winograd4-rows": ((1, 16, 130, 140), (16, 16, 3, 3), {"pads": [1] * 4}, False, "staged"),
    "winograd4-rows-fused": ((1, 16, 130, 140), (16, 16, 3, 3), {"pads": [1] * 4}, True, "staged"),
    "winograd2-rows": ((1, 64, 700, 7), (16, 64, 3, 3), {"pads": [1] * 4}, False, "staged"),
    "depthwise-rows": ((1, 16, 130, 140), (16, 1, 3, 3), {"pads": [1] * 4, "group": 16}, False, "staged"),
    "pointwise-rows": ((1, 16, 130, 140), (16, 16, 1, 1), {}, False, "staged"),
    "pointwise-strided-rows": ((1, 16, 130, 140), (16, 16, 1, 1), {"strides": [2, 2]}, False, "staged"),
    "im2col-texture-rows": ((1, 3, 400, 400), (8, 3, 7, 7), {"pads": [3] * 4, "strides": [2, 2]}, False, "staged"),
    "implicit-groups-rows": ((1, 16, 130, 140), (16, 8, 3, 3), {"pads": [1] * 4, "group": 2}, True, "staged"),
    "implicit-dilated-rows": ((1, 16, 130, 140), (16, 8, 3, 3), {"pads": [2] * 4, "group": 2, "dilations": [2, 2]},
                              False, "staged"),
    "im2col-buffer-rows": ((1, 4, 200, 400), (4, 2, 11, 11), {"pads": [5] * 4, "group": 2}, False, "staged"),
    # a 1-D convolution over blocks of whole images
    "conv1d-images": ((3, 16, 8200), (16, 16, 3), {"pads": [1, 1]}, False, "windows"),
    # one 1-D image past the limit: blocks of output columns, each channel's input columns staged
    "conv1d-columns": ((1, 16, 20000), (16, 16, 3), {"pads": [1, 1]}, False, "staged"),
    "conv1d-columns-strided-fused": ((2, 8, 40001), (16, 8, 10), {"pads": [4, 3], "strides": [5]}, True, "staged"),
    "conv1d-columns-dilated-depthwise": ((1, 16, 20000), (16, 1, 3), {"pads": [3, 3], "dilations": [3],
                                                                      "group": 16}, False, "staged"),
    "conv1d-columns-one-channel-in": ((1, 1, 300_000), (64, 1, 10), {"strides": [5]}, False, "staged"),
}


@pytest.mark.parametrize("case", list(CONV_CASES))
def test_conv_operands_over_the_binding_limit_run_in_tiles(small_binding, case):
    x_shape, w_shape, attrs, fused, tiling = CONV_CASES[case]
    model, feeds = _conv_model(x_shape, w_shape, residual=fused, **attrs)
    steps = _check(small_binding, model, feeds)
    if tiling == "windows":
        assert steps.windows > 0 and steps.copies == (1 if fused else 0)  # only the residual's copy into Y
    else:
        assert steps.copies > 0


def test_conv_whose_one_output_column_passes_the_limit_falls_back_cleanly(small_binding):
    """A 1-D convolution dilated by 300,000: one output column reads input columns 1.2 MB apart, past 1 MiB,
    so nothing tiles it; it runs on the host, correctly."""
    model, feeds = _conv_model((1, 1, 600_000), (1, 1, 2), dilations=[300_000])
    got, _plan, fallback = _run(small_binding, model, feeds)
    assert fallback == ["conv"]
    np.testing.assert_allclose(got, _cpu(model, feeds), rtol=1e-4, atol=2e-4)


def test_a_chain_of_layers_over_the_limit_runs_on_the_planners_arenas(small_binding):
    """Conv -> Sigmoid -> Conv, every tensor past the limit, replayed on the arenas the planner laid out."""
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal((3, 16, 64, 96)).astype(np.float32)}
    inits = {"w1": (rng.standard_normal((16, 16, 3, 3)) / 12).astype(np.float32),
             "w2": (rng.standard_normal((16, 16, 1, 1)) / 4).astype(np.float32)}
    model = _model([helper.make_node("Conv", ["x", "w1"], ["a"], name="conv1", pads=[1] * 4),
                    helper.make_node("Sigmoid", ["a"], ["r"], name="sigmoid"),
                    helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2")], feeds, inits)
    steps = _check(small_binding, model, feeds)
    assert steps.windows >= 3  # a block of each layer past the first


def test_a_window_is_bound_at_its_offset_plus_the_tensors_offset_in_its_arena(small_binding):
    """A tensor the planner moved to a nonzero offset of an arena: a dispatch on a window of it writes exactly the
    window's elements there."""
    model = _model([helper.make_node("Relu", ["x"], ["y"])], {"x": np.zeros(4, np.float32)})
    program = ComputeProgram(model.graph, ctx=small_binding)
    try:
        rec = Recorder(program)
        rec.layer_index = 0
        values = np.linspace(-1.0, 1.0, 4096, dtype=np.float32)
        x = rec.upload(values, "x")
        y = rec.alloc((4096,))
        usage = small_binding.wgpu.BufferUsage
        arena = small_binding.create_buffer(32768, usage.STORAGE | usage.COPY_SRC | usage.COPY_DST, "test arena")
        y.alloc.move(arena, 8192)  # where a planner might put it
        first, count = 3 * rec.window_align // 4, 1000
        rec.dispatch("compute/unary.wgsl", [rec.window(x, first, (count,))], [rec.window(y, first, (count,))],
                     [count, 0.0, 0.0, 0.0], count, subs={"EXPR": "max(v, 0.0)", "TX": "f32", "TY": "f32"})
        assert rec.steps[-1].offsets == [4 * first, 4 * first]
        encoder = small_binding.device.create_command_encoder()
        cpass = encoder.begin_compute_pass()
        for step in rec.steps:
            cpass.set_pipeline(step.pipeline)
            cpass.set_bind_group(0, step.bind_group)
            cpass.dispatch_workgroups(*step.groups)
        cpass.end()
        got = program.download([y], encoder, "test")[0]
        want = np.zeros(4096, np.float32)
        want[first:first + count] = np.maximum(values[first:first + count], 0.0)
        np.testing.assert_array_equal(got, want)
        arena.destroy()
    finally:
        program.close()


# case -> (nodes, feeds, initializers): elementwise ops over the limit
def _elementwise_cases() -> dict[str, tuple[list, dict, dict]]:
    rng = np.random.default_rng(3)

    def r(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    return {
        "relu-vec4": ([helper.make_node("Relu", ["x"], ["y"])], {"x": r(3, 4, 100_000)}, {}),
        "exp-odd-size": ([helper.make_node("Exp", ["x"], ["y"])], {"x": r(3, 100_001)}, {}),
        "leaky-relu": ([helper.make_node("LeakyRelu", ["x"], ["y"], alpha=0.3)], {"x": r(700_000)}, {}),
        "add-same-shape": ([helper.make_node("Add", ["x", "z"], ["y"])], {"x": r(3, 100_001), "z": r(3, 100_001)},
                           {}),
        "mul-axis-broadcast": ([helper.make_node("Mul", ["x", "c"], ["y"])], {"x": r(3, 4, 100_000)},
                               {"c": r(4, 1)}),
        "sub-general-broadcast": ([helper.make_node("Sub", ["c", "x"], ["y"])], {"x": r(3, 100_001)},
                                  {"c": r(3, 1)}),
        "div-scalar": ([helper.make_node("Div", ["x", "c"], ["y"])], {"x": r(3, 100_001)},
                       {"c": np.array(1.7, np.float32)}),
        # ConvTranspose: its output in blocks of elements (the gather kernel), X bound whole
        "conv-transpose-output-blocks": ([helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2],
                                                           pads=[1, 0, 0, 1], output_padding=[1, 0])],
                                         {"x": r(1, 8, 100, 100)}, {"w": r(8, 8, 3, 3), "b": r(8)}),
        "conv-transpose-1d-groups": ([helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[4], group=2)],
                                     {"x": r(2, 4, 20_000)}, {"w": r(4, 3, 4)}),
        "max-variadic": ([helper.make_node("Max", ["x", "z", "w"], ["y"])],
                         {"x": r(300_000), "z": r(300_000), "w": r(300_000)}, {}),
        # three operands (compute/map3.wgsl): Where, and the quantization maps
        "where-same-shape": ([helper.make_node("Greater", ["x", "z"], ["m"]),
                              helper.make_node("Where", ["m", "x", "z"], ["y"])],
                             {"x": r(3, 100_001), "z": r(3, 100_001)}, {}),
        "where-broadcast-operand": ([helper.make_node("Greater", ["x", "c"], ["m"]),
                                     helper.make_node("Where", ["m", "x", "c"], ["y"])],
                                    {"x": r(3, 4, 100_000)}, {"c": r(4, 1)}),
        "quantize-dequantize": ([helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"]),
                                 helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"])],
                                {"x": r(3, 100_001)}, {"s": np.array(0.02, np.float32),
                                                       "zp": np.array(3, np.uint8)}),
    }


ELEMENTWISE_CASES = _elementwise_cases()


@pytest.mark.parametrize("case", list(ELEMENTWISE_CASES))
def test_elementwise_ops_over_the_binding_limit_run_in_blocks(small_binding, case):
    nodes, feeds, inits = ELEMENTWISE_CASES[case]
    steps = _check(small_binding, _model(nodes, feeds, inits), feeds, rtol=1e-5, atol=1e-5)
    assert steps.windows > 0


def _matmul_cases() -> dict[str, tuple[list, dict, dict, int]]:
    """name -> (nodes, feeds, initializers, blocks at least)."""
    rng = np.random.default_rng(4)

    def r(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    gemm = [helper.make_node("Gemm", ["a", "b", "c"], ["y"])]
    return {
        "matmul-rows-const-b": ([helper.make_node("MatMul", ["a", "b"], ["y"])], {"a": r(3000, 100)},
                                {"b": r(100, 120)}, 2),
        "matmul-batches-folded-into-rows": ([helper.make_node("MatMul", ["a", "b"], ["y"])], {"a": r(4, 700, 100)},
                                            {"b": r(100, 120)}, 2),
        "matmul-batch-blocks": ([helper.make_node("MatMul", ["a", "b"], ["y"])],
                                {"a": r(4, 700, 100), "b": r(4, 100, 120)}, {}, 2),
        "matmul-rows-within-batches": ([helper.make_node("MatMul", ["a", "b"], ["y"])],
                                       {"a": r(2, 3000, 100), "b": r(2, 100, 120)}, {}, 4),
        "matmul-odd-sizes": ([helper.make_node("MatMul", ["a", "b"], ["y"])], {"a": r(3001, 99), "b": r(99, 121)},
                             {}, 2),
        "matmul-shared-a-batched-b": ([helper.make_node("MatMul", ["a", "b"], ["y"])],
                                      {"a": r(700, 100), "b": r(3, 100, 1200)}, {}, 6),
        "gemm-rows": (gemm, {"a": r(3000, 100)}, {"b": r(100, 120), "c": r(120)}, 2),
        "gemm-rows-transposed-b-row-bias": (
            [helper.make_node("Gemm", ["a", "b", "c"], ["y"], alpha=0.5, beta=2.0, transB=1)], {"a": r(3000, 100)},
            {"b": r(120, 100), "c": r(3000, 1)}, 2),
        "gemm-rows-device-b-full-bias": (gemm, {"a": r(3000, 100), "b": r(100, 120), "c": r(3000, 120)}, {}, 2),
        # a transposed A is transposed first, in tiles of windows (its rows of op(A) are strided)
        "gemm-transposed-a": ([helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=1)], {"a": r(100, 3000)},
                              {"b": r(100, 120), "c": r(120)}, 2),
        "gemm-transposed-a-odd-sizes": ([helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=1, transB=1,
                                                          alpha=0.5)],
                                        {"a": r(301, 1999), "b": r(121, 301)}, {"c": r(1999, 1)}, 2),
    }


MATMUL_CASES = _matmul_cases()


@pytest.mark.parametrize("case", list(MATMUL_CASES))
def test_matmul_operands_over_the_binding_limit_run_in_row_blocks(small_binding, case):
    nodes, feeds, inits, blocks = MATMUL_CASES[case]
    steps = _check(small_binding, _model(nodes, feeds, inits), feeds)
    assert steps.dispatches >= blocks and steps.windows > 0


@pytest.mark.parametrize("nodes,feeds,inits", [
    # a ConvTranspose whose input passes the limit and whose output's channel products do not fit one block
    ([helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], group=2)],
     {"x": np.random.default_rng(5).standard_normal((1, 8, 200, 200)).astype(np.float32)},
     {"w": np.random.default_rng(6).standard_normal((8, 1, 2, 2)).astype(np.float32)}),
])
def test_ops_that_cannot_tile_fall_back_cleanly(small_binding, nodes, feeds, inits):
    model = _model(nodes, feeds, inits)
    got, _plan, fallback = _run(small_binding, model, feeds)
    assert fallback, "expected a fallback layer"
    np.testing.assert_allclose(got, _cpu(model, feeds), rtol=1e-4, atol=1e-4)


def test_a_window_starts_where_a_binding_may(small_binding):
    model = _model([helper.make_node("Relu", ["x"], ["y"])], {"x": np.zeros(4, np.float32)})
    program = ComputeProgram(model.graph, ctx=small_binding)
    try:
        rec = Recorder(program)
        t = rec.alloc((1000, 1000))  # 4 MB: past the binding limit, within the buffer limit
        step = rec.window_align // 4
        part = rec.window(rec.view(t, (1_000_000,)), 3 * step, (2 * step, 4))
        assert part.first == 3 * step and part.shape == (2 * step, 4) and part.alloc is t.alloc
        with pytest.raises(ValueError, match="not a multiple"):
            rec.window(t, step + 1, (4,))
        with pytest.raises(ValueError, match="runs past"):
            rec.window(t, 999_000, (2000,))
    finally:
        program.close()


@pytest.mark.slow  # ~40 s: an 85 GFLOP convolution, on the CPU oracle and twice on lavapipe
def test_the_reported_128_channel_convolution_runs_at_the_real_limits():
    """X (2, 128, 901, 161) and Y are 148 MB each, past lavapipe's 128 MiB binding: a block per image, each
    binding its windows of X and Y."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 128, 901, 161)).astype(np.float32)
    w = (rng.standard_normal((128, 128, 3, 3)) / 34).astype(np.float32)
    b = rng.standard_normal(128).astype(np.float32)
    model = node_model("Conv", {"x": x}, constants={"w": w, "b": b}, pads=[1, 1, 1, 1])
    compare(model, {"x": x}, rtol=1e-4, atol=1e-4, backend="gpu-compute")
