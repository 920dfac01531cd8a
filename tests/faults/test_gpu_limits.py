"""gpu-compute at the device's edges (issue 18).

- A tensor over the storage binding limit runs correctly (its layers fall back to the host, or, for
  constant product weights, are split into row blocks), never a rejected bind group.
- Dispatches over the per-dimension workgroup limit are folded, and every builder honours the device's own
  limit: a device asked for a small one shows it with small tensors.
- A buffer or texture the device cannot make raises DeviceOutOfMemoryError naming what was being allocated
  and its size, directly, from inside a layer's program and through GPUProgram.run.
- Shader loops longer than the driver runs (lavapipe stops every invocation after 65535 loop iterations in
  all, silently) must not give wrong answers.
- Nothing submits work that uses a destroyed buffer (wgpu-native aborts the process there): every
  ``destroy()`` in wgsentis is one reviewed here, and closing workers around runs is tried in a child process.

Devices with other limits are GPUContext(limits=...): a second device on the same adapter."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from helpers import F, make_model, requires_gpu
from onnx import helper

import wgsentis as ws
from wgsentis.backends.gpu.device import GPUContext, get_context
from wgsentis.backends.gpu.memory import BufferPool
from wgsentis.backends.gpu.steps import Dispatch
from wgsentis.backends.gpu_compute import ComputeProgram as GPUProgram
from wgsentis.errors import DeviceError, DeviceOutOfMemoryError, WgSentisError

pytestmark = requires_gpu

MiB = 1 << 20
ROOT = Path(ws.__file__).resolve().parent


def _model(nodes: list[onnx.NodeProto], feeds: dict[str, np.ndarray], inits: dict | None = None,
           outputs: tuple[str, ...] = ("y",)) -> ws.Model:
    return ws.load_model(make_model(nodes, [(k, F, list(v.shape)) for k, v in feeds.items()],
                                    [(o, F, None) for o in outputs], inits or {}))


def _on_device(ctx: GPUContext, model: ws.Model, feeds: dict[str, np.ndarray]) -> tuple[dict[str, Any], Any]:
    """Run ``model`` twice (recorded, then replayed) on ``ctx``; returns the outputs and the plan."""
    program = GPUProgram(model.graph, ctx=ctx)
    try:
        first = program.run(feeds).wait()
        again = program.run(feeds).wait()
        for name, value in first.items():
            np.testing.assert_array_equal(again[name], value, err_msg=f"{name}: the replay differs")
        return first, program.last_plan
    finally:
        program.close()


def _cpu(model: ws.Model, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    with ws.Worker(model, "cpu") as worker:
        return worker.run(feeds)


def _assert_matches_cpu(model: ws.Model, feeds: dict[str, np.ndarray], got: dict[str, Any],
                        rtol: float = 1e-4, atol: float = 1e-4) -> None:
    for name, want in _cpu(model, feeds).items():
        np.testing.assert_allclose(got[name], want, rtol=rtol, atol=atol, err_msg=name)


@pytest.fixture(scope="module")
def small_binding() -> GPUContext:
    """A device that binds at most 1 MiB per storage buffer and makes buffers of at most 4 MiB."""
    return GPUContext(limits={"max-storage-buffer-binding-size": MiB, "max-buffer-size": 4 * MiB})


@pytest.fixture(scope="module")
def small_buffers() -> GPUContext:
    """A device whose buffers are smaller than what it would bind: 1 MiB buffers, 4 MiB bindings."""
    return GPUContext(limits={"max-storage-buffer-binding-size": 4 * MiB, "max-buffer-size": MiB})


@pytest.fixture(scope="module")
def small_grid() -> GPUContext:
    """A device with 64 workgroups per dispatch dimension."""
    return GPUContext(limits={"max-compute-workgroups-per-dimension": 64})


# -- the storage binding limit ---------------------------------------------------------------------------------
def test_an_intermediate_over_the_adapters_binding_limit_runs_on_the_host():
    ctx = get_context()
    rows = ctx.max_binding // 4000 + 16  # Tile makes (rows, 1000) float32: just over the limit
    feeds = {"s": np.random.default_rng(0).standard_normal((1, 1000)).astype(np.float32)}
    model = _model([helper.make_node("Tile", ["s", "r"], ["t"], name="tile"),
                    helper.make_node("Relu", ["t"], ["u"], name="relu"),
                    helper.make_node("ReduceSum", ["u", "ax"], ["y"], name="sum", keepdims=0)],
                   feeds, {"r": np.array([rows, 1], np.int64), "ax": np.array([0], np.int64)})
    with ws.Worker(model, "gpu-compute") as worker:
        got = worker.run(feeds)
        stats = worker.stats()
    assert "sum" in stats["fallback_layers"], stats  # it cannot bind its input: the host reduces it
    _assert_matches_cpu(model, feeds, got, rtol=1e-5)


def _binding_cases() -> dict[str, tuple[list, dict, dict, set[str]]]:
    """name -> (nodes, feeds, initializers, layers that must run on the GPU) for the 1 MiB-binding device."""
    rng = np.random.default_rng(1)
    big = rng.standard_normal(300_000).astype(np.float32)  # 1.2 MB
    small = rng.standard_normal((1, 1000)).astype(np.float32)
    weight = (rng.standard_normal((128, 2400)) * 0.1).astype(np.float32)  # 1.2 MB constant
    return {
        "input-over-the-limit": ([helper.make_node("Relu", ["x"], ["y"], name="relu")], {"x": big}, {}, set()),
        "intermediate-over-the-limit": (
            [helper.make_node("Tile", ["s", "r"], ["t"], name="tile"),
             helper.make_node("Relu", ["t"], ["u"], name="relu"),
             helper.make_node("ReduceSum", ["u", "ax"], ["y"], name="sum", keepdims=0)],
            {"s": small}, {"r": np.array([300, 1], np.int64), "ax": np.array([0], np.int64)}, set()),
        "constant-over-the-limit-in-an-add": (
            [helper.make_node("Add", ["x", "c"], ["y"], name="add")], {"x": big.reshape(1, 300_000)},
            {"c": rng.standard_normal((1, 300_000)).astype(np.float32)}, set()),
        "constant-weight-over-the-limit-split-in-row-blocks": (
            [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
            {"x": rng.standard_normal((3, 128)).astype(np.float32)}, {"w": weight}, {"mm"}),
        "over-the-limit-then-back-under": (
            [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "shape"], ["m"], name="reshape"),
             helper.make_node("ReduceMean", ["m"], ["g"], name="mean", axes=[1]),
             helper.make_node("Sigmoid", ["g"], ["y"], name="sigmoid")],
            {"x": big}, {"shape": np.array([300, 1000], np.int64)}, {"sigmoid"}),
    }


BINDING_CASES = _binding_cases()


@pytest.mark.parametrize("case", list(BINDING_CASES))
def test_a_tensor_over_the_binding_limit_gives_the_cpus_answer(small_binding, case):
    nodes, feeds, inits, on_gpu = BINDING_CASES[case]
    model = _model(nodes, feeds, inits)
    got, plan = _on_device(small_binding, model, feeds)
    assert on_gpu <= set(plan.gpu_layers), (plan.gpu_layers, plan.fallback_layers)
    _assert_matches_cpu(model, feeds, got)


# -- the workgroup grid limit -------------------------------------------------------------------------------------
def _grids(plan: Any) -> list[tuple[int, int, int]]:
    return [step.groups for step in plan.steps if isinstance(step, Dispatch)]


@pytest.mark.slow  # 67 MB through lavapipe; the small-grid device below checks folding in every program
def test_an_elementwise_op_over_65535_workgroups_is_folded_on_the_adapters_device():
    ctx = get_context()
    n = ctx.max_workgroups * 256 + 7  # more groups of 256 (or 64) invocations than one dimension holds
    feeds = {"x": np.random.default_rng(2).standard_normal(n).astype(np.float32)}
    model = _model([helper.make_node("Add", ["x", "x"], ["y"], name="add")], feeds)
    program = GPUProgram(model.graph)
    try:
        got = program.run(feeds).wait()
        grids = _grids(program.last_plan)
    finally:
        program.close()
    assert grids and all(max(g) <= ctx.max_workgroups for g in grids)
    assert any(g[1] > 1 for g in grids), grids  # folded into a second dimension
    np.testing.assert_array_equal(got["y"], 2 * feeds["x"])


def _grid_cases() -> dict[str, tuple[list, dict, dict]]:
    rng = np.random.default_rng(3)

    def r(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    img = r(2, 80, 12, 12)
    flat = r(64 * 64 * 4 * 3 + 5)
    return {
        "relu": ([helper.make_node("Relu", ["x"], ["y"])], {"x": flat}, {}),
        "add-odd-size": ([helper.make_node("Add", ["x", "x"], ["y"])], {"x": flat}, {}),
        "mul-broadcast": ([helper.make_node("Mul", ["x", "b"], ["y"])], {"x": img}, {"b": r(1, 80, 1, 1)}),
        "transpose": ([helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1])], {"x": img}, {}),
        "concat": ([helper.make_node("Concat", ["x", "x"], ["y"], axis=1)], {"x": img}, {}),
        "softmax": ([helper.make_node("Softmax", ["x"], ["y"], axis=1)], {"x": r(4200, 9)}, {}),
        "reduce-mean": ([helper.make_node("ReduceMean", ["x"], ["y"], axes=[1])], {"x": r(4200, 9)}, {}),
        "matmul": ([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": r(300, 40)}, {"w": r(40, 260)}),
        "conv1x1": ([helper.make_node("Conv", ["x", "w"], ["y"])], {"x": img}, {"w": r(16, 80, 1, 1)}),
        "conv3x3": ([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1] * 4)], {"x": img[:, :8]},
                    {"w": r(8, 8, 3, 3)}),
        "depthwise": ([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1] * 4, group=80)], {"x": img},
                      {"w": r(80, 1, 3, 3)}),
        "conv-transpose": ([helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2])], {"x": img[:, :8]},
                           {"w": r(8, 4, 3, 3)}),
        "maxpool": ([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])], {"x": img}, {}),
        "averagepool": ([helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1] * 4)],
                        {"x": img}, {}),
        "batchnorm": ([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])], {"x": img},
                      {"s": r(80), "b": r(80), "m": r(80), "v": np.abs(r(80)) + 0.5}),
        "instancenorm": ([helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"])], {"x": img},
                         {"s": r(80), "b": r(80)}),
        "resize": ([helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="linear")], {"x": img},
                   {"sc": np.array([1, 1, 2, 2], np.float32)}),
        "pad": ([helper.make_node("Pad", ["x", "p"], ["y"])], {"x": img},
                {"p": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)}),
    }


GRID_CASES = _grid_cases()


@pytest.mark.parametrize("case", list(GRID_CASES))
def test_every_program_keeps_within_the_devices_grid_limit(small_grid, case):
    nodes, feeds, inits = GRID_CASES[case]
    model = _model(nodes, feeds, inits)
    got, plan = _on_device(small_grid, model, feeds)
    assert all(max(g) <= 64 for g in _grids(plan)), _grids(plan)
    _assert_matches_cpu(model, feeds, got, rtol=1e-3, atol=1e-4)


# -- allocations the device cannot make ----------------------------------------------------------------------------
def test_an_impossible_buffer_is_a_typed_out_of_memory_error_naming_it():
    ctx = get_context()
    usage = ctx.wgpu.BufferUsage.STORAGE
    fine = ctx.create_buffer(16, usage, "fine")  # an ordinary one is made
    assert fine.size == 16
    with pytest.raises(DeviceOutOfMemoryError) as info:
        ctx.create_buffer(ctx.max_buffer + 1, usage, "huge", "tensor 'activations'")
    oom = info.value
    assert isinstance(oom, DeviceError) and isinstance(oom, WgSentisError)
    assert oom.nbytes == ctx.max_buffer + 1 and "tensor 'activations'" in oom.what and "huge" in oom.what
    assert f"{ctx.max_buffer + 1:,} bytes" in str(oom) and "tensor 'activations'" in str(oom)
    with pytest.raises(DeviceOutOfMemoryError, match=r"tensor 'x' .*wgsentis pool #0"):
        BufferPool(ctx).acquire(ctx.max_buffer + 1, "tensor 'x'")


def test_an_impossible_texture_is_a_typed_out_of_memory_error_naming_it():
    ctx = get_context()
    side = int(ctx.limits["max-texture-dimension-2d"]) + 1
    usage = ctx.wgpu.TextureUsage.TEXTURE_BINDING
    with pytest.raises(DeviceOutOfMemoryError, match=rf"constant 'fc:W' \(texture 'fc:W', {side} x 1 rgba32float\)"):
        ctx.create_texture((side, 1, 1), "rgba32float", usage, "fc:W", 16 * side, "constant 'fc:W'")


def test_an_input_the_device_cannot_hold_is_named_through_gpu_program_run(small_binding):
    feeds = {"x": np.ones(1_200_000, np.float32)}  # 4.8 MB, over the 4 MiB buffer limit
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="relu")], feeds)
    program = GPUProgram(model.graph, ctx=small_binding)
    with pytest.raises(DeviceOutOfMemoryError) as info:
        program.run(feeds)
    assert "tensor 'x' [1200000]" in info.value.what and info.value.nbytes >= 4_800_000
    program.close()


def test_a_layer_output_the_device_cannot_hold_names_the_layer(small_buffers):
    feeds = {"s": np.ones((1, 1000), np.float32)}  # Tile makes 2 MB: bindable here, but no buffer holds it
    model = _model([helper.make_node("Tile", ["s", "r"], ["y"], name="tile")], feeds,
                   {"r": np.array([500, 1], np.int64)})
    program = GPUProgram(model.graph, ctx=small_buffers)
    with pytest.raises(DeviceOutOfMemoryError, match=r"output \[500, 1000\] of layer 'tile' \(Tile\).*2,000,128 bytes"):
        program.run(feeds)  # raised inside the layer's program: not wrapped into a LayerError
    program.close()


def test_outputs_too_big_for_one_staging_buffer_are_named(small_binding):
    feeds = {"x": np.ones(230_000, np.float32)}  # 0.9 MB each, five outputs: 4.6 MB of staging
    outputs = tuple(f"y{i}" for i in range(5))
    model = _model([helper.make_node("Relu", ["x"], [o], name=f"relu{o}") for o in outputs], feeds, outputs=outputs)
    program = GPUProgram(model.graph, ctx=small_binding)
    names = r"\['y0', 'y1', 'y2', 'y3', 'y4'\]"
    with pytest.raises(DeviceOutOfMemoryError, match=rf"staging buffer for the outputs {names}"):
        program.run(feeds)
    program.close()


# -- loops longer than the driver runs -----------------------------------------------------------------------------
def _long_loop_cases() -> dict[str, tuple[list, dict, dict]]:
    rng = np.random.default_rng(4)
    row = rng.standard_normal((1, 1_200_000)).astype(np.float32)
    return {
        "instance-norm-1024x1024": ([helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"])],
                                    {"x": row[:, : 1 << 20].reshape(1, 1, 1024, 1024)},
                                    {"s": np.ones(1, np.float32), "b": np.zeros(1, np.float32)}),
        "softmax-over-1.2M": ([helper.make_node("Softmax", ["x"], ["y"], axis=1)], {"x": row}, {}),
        "layer-norm-over-1.2M": ([helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"])], {"x": row},
                                 {"s": np.ones(1_200_000, np.float32), "b": np.zeros(1_200_000, np.float32)}),
        "matmul-with-k-400k": ([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": row[:, :400_000]},
                               {"w": (rng.standard_normal((400_000, 4)) * 0.01).astype(np.float32)}),
        "cumsum-over-1.2M": ([helper.make_node("CumSum", ["x", "ax"], ["y"])], {"x": row},
                             {"ax": np.array(1, np.int64)}),
    }


LONG_LOOPS = _long_loop_cases()


@pytest.mark.parametrize("case", list(LONG_LOOPS))
def test_a_kernel_with_a_long_loop_gives_the_cpus_answer(case):
    nodes, feeds, inits = LONG_LOOPS[case]
    model = _model(nodes, feeds, inits)
    with ws.Worker(model, "gpu-compute") as worker:
        got = worker.run(feeds)
    want = _cpu(model, feeds)["y"]
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got["y"], want, rtol=1e-3, atol=1e-3 * scale)


# -- destroyed buffers -------------------------------------------------------------------------------------------
# Every destroy() in wgsentis, by file and enclosing function: each destroys a staging (or probe) buffer only
# after its mapping completed, so the submission that used it has finished and nothing recorded refers to it.
REVIEWED_DESTROYS = {
    # after the buffer's map completed (its copy is done) and it was unmapped
    ("backends/gpu/readback.py", "PendingReadback._release"),
    ("backends/gpu/readback.py", "StagingPool.release"),
    ("backends/gpu/device.py", "GPUContext.division_function"),
    # free staging buffers: each was released only after its run's outputs were read
    ("backends/gpu/readback.py", "StagingPool.close"),
    # a program's close(): after Worker.close drained its runs and GPUProgram.close waited for the queue
    ("backends/gpu/program.py", "GPUProgram._free_plan"),
    ("backends/gpu/memory.py", "ConstantStore.close"),
    ("backends/gpu/memory.py", "ScratchTextures.close"),
    ("backends/gpu/memory.py", "UniformArena.close"),
    ("backends/gpu/memory.py", "PlanValues.close"),  # (from GPUProgram._free_plan only)
    ("backends/gpu/faults.py", "FaultBuffer.close"),
    ("backends/gpu/timestamps.py", "QuerySets.close"),
    ("backends/gpu_pixel.py", "PixelProgram.close"),
    # A device tensor's own staging buffer, destroyed once mapped and read: only its copy used it, and the
    # mapping completed after that copy did.
    ("backends/gpu/device_tensors.py", "DeviceValue.read"),
}


def _destroy_calls() -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))

        def visit(node: ast.AST, scope: tuple[str, ...], path: Path = path) -> None:
            for child in ast.iter_child_nodes(node):
                inner = scope
                if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                    inner = (*scope, child.name)
                if (isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute)
                        and child.func.attr == "destroy"):
                    found.add((path.relative_to(ROOT).as_posix(), ".".join(scope)))
                visit(child, inner)

        visit(tree, ())
    return found


def test_every_destroy_call_is_a_reviewed_one():
    """A new destroy() must be checked against recorded plans, bind groups and pending encoders (a submission
    using a destroyed buffer aborts the process), then listed in REVIEWED_DESTROYS."""
    assert _destroy_calls() == REVIEWED_DESTROYS


CHILD = textwrap.dedent("""
    import gc
    import numpy as np
    import wgsentis as ws

    model = ws.load_model(ws.__file__.replace("__init__.py", "data/sample.onnx"))
    feeds = [{"image": np.random.default_rng(b).standard_normal((b, 3, 32, 32)).astype(np.float32)}
             for b in (1, 2, 3)]

    # runs whose readbacks are never read, then close with runs still queued
    worker = ws.Worker(model, "gpu-compute")
    for k in range(12):
        worker.schedule(feeds[k % 3])
    worker.close()
    # a tensor read after its worker closed
    worker = ws.Worker(model, "gpu-compute")
    worker.schedule(feeds[1])
    late = worker.peek_output()
    worker.close()
    assert late.download_to_array().shape == (2, 10)
    # close, then another worker on the same model, and two workers at once
    first = ws.Worker(model, "gpu-compute")
    second = ws.Worker(model, "gpu-compute")
    a = first.run(feeds[0])["probabilities"]
    first.close()
    b = second.run(feeds[0])["probabilities"]
    assert np.allclose(a, b)
    # add_output after runs: the worker recompiles, the old program closes after its queued runs
    for k in range(4):
        second.schedule(feeds[k % 3])
    model.add_output(model.graph.layers[0].outputs[0])
    out = second.run(feeds[2])
    assert len(out) == 2
    second.close()
    # a plan re-recorded when a host-read input changes, with readbacks dropped in between
    from onnx import TensorProto, helper
    g = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [12]),
                           helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    reshape = ws.load_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    with ws.Worker(reshape, "gpu-compute") as w:
        for k in range(10):
            w.schedule({"x": np.arange(12, dtype=np.float32), "s": np.array([3, 4] if k % 2 else [4, 3])})
        assert w.run({"x": np.arange(12, dtype=np.float32), "s": np.array([2, 6])})["y"].shape == (2, 6)
    del worker, first, second, w, late
    gc.collect()
    # the device still works after all of it
    with ws.Worker(ws.load_model(ws.__file__.replace("__init__.py", "data/sample.onnx")), "gpu-compute") as w:
        assert w.run(feeds[0])["probabilities"].shape == (1, 10)
    print("survived")
""")


def test_closing_workers_around_runs_never_aborts_the_process(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    assert "survived" in done.stdout
