"""Small model builders and the ONNX Runtime reference, shared by the tests."""

from __future__ import annotations

import functools
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def make_model(nodes, inputs, outputs, initializers=(), opset: int = 17, domains=()) -> onnx.ModelProto:
    """A ModelProto from nodes and (name, elem_type, shape) input/output triples."""
    graph = helper.make_graph(
        nodes, "test",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(initializers).items()],
    )
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in domains]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model


def ort_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray], optimize: bool = True) -> list[np.ndarray]:
    """ONNX Runtime's outputs of ``model`` on ``feeds`` (CPU provider): the tests' reference. ``optimize=False``:
    its graph optimizations off, so that each node runs its own kernel (with them, its NCHWc transform gives
    pools of 16 channels or more its blocked-layout kernels, which sum in another order)."""
    import onnxruntime as ort  # here: test_memory_budget's capped children import this module

    options = ort.SessionOptions()
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def spy_scratch(monkeypatch) -> list[tuple[str, tuple[int, ...]]]:
    """Record the (key, shape) of every scratch buffer the CPU convolutions ask for, in order: how a test
    sees the chunks, blocks and forms a kernel chose."""
    from wgsentis.ops.parallel import HostWorkspace

    requests: list[tuple[str, tuple[int, ...]]] = []
    original = HostWorkspace.scratch

    def recording(workspace, key, shape, dtype):
        requests.append((key, tuple(shape)))
        return original(workspace, key, shape, dtype)

    monkeypatch.setattr(HostWorkspace, "scratch", recording)
    return requests


F = TensorProto.FLOAT
I64 = TensorProto.INT64


def kept_between_runs(model: onnx.ModelProto, feeds: dict[str, np.ndarray], key: str, index: int):
    """Run ``model`` twice on the cpu backend and check that its first layer kept the same derived weights,
    ``ctx.cache[key][index]``, from the first run to the second; returns (the kept array, the two outputs)."""
    import wgsentis as ws

    with ws.Worker(ws.load_model(model), "cpu") as worker:
        first = worker.run(feeds)["y"]
        kept = worker.program.steps[0].ctx.cache[key][index]
        second = worker.run(feeds)["y"]
        assert worker.program.steps[0].ctx.cache[key][index] is kept
    return kept, first, second


def child_results(stdout: str) -> dict[str, dict]:
    """The ``RESULT {json}`` lines a test's child process printed, by their "name"."""
    results = {}
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            entry = json.loads(line[len("RESULT "):])
            results[entry["name"]] = entry
    return results


# -- the one skip policy of GPU tests ----------------------------------------------------------------------------
# A test that needs a wgpu adapter carries the ``gpu`` marker: ``pytestmark = requires_gpu`` for a module of GPU
# tests, ``@requires_gpu`` on one test, or ``BACKENDS`` (its ``pytest.param("gpu-compute", marks=requires_gpu)``
# and gpu-pixel's) for the GPU parts of a test run on every backend, so each is an item of its own, never silently
# dropped. tests/conftest.py skips every such item, with ``gpu_adapter()``'s reason, only when no adapter
# opens; a module that needs the device as it loads skips itself with that same reason
# (``pytest.skip(gpu_adapter()[1], allow_module_level=True)``).

requires_gpu = pytest.mark.gpu
BACKENDS = ["cpu", pytest.param("gpu-compute", marks=requires_gpu), pytest.param("gpu-pixel", marks=requires_gpu)]


@functools.cache
def gpu_adapter() -> tuple[bool, str]:
    """Whether a wgpu adapter opens here, and the skip reason when not (probed once, on first use, so that a
    run of CPU tests opens no device)."""
    from wgsentis.backends.gpu.device import gpu_available

    ok, why = gpu_available()
    return ok, "" if ok else f"no wgpu adapter: {why}"


def texture_of(ctx, layout, value: np.ndarray | None = None):
    """A device texture in ``layout`` (pixel_layout.TextureLayout), usable as input, target and copy source and
    destination, holding ``value``'s packed texels when given."""
    usage = ctx.wgpu.TextureUsage
    texture = ctx.device.create_texture(size=(layout.width, layout.height, 1), format=layout.format,
                                        usage=usage.COPY_DST | usage.COPY_SRC | usage.TEXTURE_BINDING
                                        | usage.RENDER_ATTACHMENT)
    if value is not None:
        ctx.queue.write_texture({"texture": texture}, layout.pack(value),
                                {"bytes_per_row": layout.width * 16, "rows_per_image": layout.height},
                                (layout.width, layout.height, 1))
    return texture


def read_texture(ctx, layout, texture, encoder=None) -> np.ndarray:
    """``texture``'s tensor: copied to a buffer with 256-byte rows (after ``encoder``'s commands), mapped and
    unpacked by ``layout``."""
    from wgsentis.backends.gpu.device import map_for_reading

    buffer = ctx.device.create_buffer(size=layout.readback_bytes,
                                      usage=ctx.wgpu.BufferUsage.COPY_DST | ctx.wgpu.BufferUsage.MAP_READ)
    encoder = encoder or ctx.device.create_command_encoder()
    encoder.copy_texture_to_buffer({"texture": texture},
                                   {"buffer": buffer, "bytes_per_row": layout.row_bytes,
                                    "rows_per_image": layout.height}, (layout.width, layout.height, 1))
    ctx.queue.submit([encoder.finish()])
    map_for_reading(buffer, "a test's texture")
    value = layout.unpack(buffer.read_mapped(copy=True))
    buffer.unmap()
    return value
