"""The host shortcuts of recording a plan for a new input size (issue 31, point 1) keep what they replace: a traced
plan's uniform blocks gathered and written once per buffer hold the words one write per dispatch would; a grown
scratch texture rebinds only the steps that bind it; bind groups made through wgpu-native's call bind what the
public method would, and a rejected one still raises."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from helpers import F, make_model, requires_gpu
from onnx import helper

import wgsentis as ws
from wgsentis.backends.gpu.memory import UniformArena
from wgsentis.backends.gpu.recording import rebind_textures
from wgsentis.backends.gpu.steps import Dispatch
from wgsentis.backends.gpu.tensors import PARAM_WORDS, GTexture


class _FakeQueue:
    def __init__(self) -> None:
        self.writes: list[tuple[int, int, bytes]] = []

    def write_buffer(self, buf: Any, offset: int, data: np.ndarray) -> None:
        self.writes.append((buf, offset, np.ascontiguousarray(data).tobytes()))


class _FakeContext:
    """What UniformArena uses of a GPUContext: buffers are numbers, writes are logged."""

    def __init__(self) -> None:
        self.uniform_align = 256
        self.wgpu = SimpleNamespace(BufferUsage=SimpleNamespace(UNIFORM=1, COPY_DST=2))
        self.queue = _FakeQueue()
        self.made = 0

    def create_buffer(self, size: int, usage: int, label: str, what: str) -> int:
        self.made += 1
        return self.made


def _contents(queue: _FakeQueue) -> dict[int, bytearray]:
    """Each buffer's bytes after the logged writes (unwritten bytes zero, as a new WebGPU buffer's are)."""
    out: dict[int, bytearray] = {}
    for buf, offset, data in queue.writes:
        held = out.setdefault(buf, bytearray())
        if len(held) < offset + len(data):
            held.extend(bytes(offset + len(data) - len(held)))
        held[offset: offset + len(data)] = data
    return out


def test_deferred_uniform_blocks_hold_what_one_write_per_dispatch_writes():
    rng = np.random.default_rng(0)
    blocks = [rng.integers(0, 1 << 32, PARAM_WORDS, dtype=np.uint32) for _ in range(40)]  # past one buffer
    now, later = _FakeContext(), _FakeContext()
    eager, deferred = UniformArena(now), UniformArena(later, first_slots=8, deferred=True)
    slots = [eager.allocate(b) for b in blocks]
    assert [deferred.allocate(b) for b in blocks] == slots  # the same (buffer, offset) for every block
    deferred.flush()
    deferred.flush()  # (a second flush writes nothing more)
    assert len(now.queue.writes) == len(blocks)
    assert len(later.queue.writes) == len(deferred.buffers) < len(blocks)  # one write per buffer
    assert {b: bytes(v) for b, v in _contents(later.queue).items()} == \
        {b: bytes(v) for b, v in _contents(now.queue).items()}


class _FakeDevice:
    """A device without wgpu-native's handle: bind groups go through the public method, counted."""

    def __init__(self) -> None:
        self.made: list[str] = []

    def create_bind_group(self, *, layout: Any, entries: list[dict], label: str) -> str:
        self.made.append(label)
        return label


def test_a_grown_scratch_texture_rebinds_only_the_steps_that_bind_it():
    grown, kept = GTexture(None, (1, 4), "grown"), GTexture(None, (1, 4), "kept")
    steps = [Dispatch(None, None, (1, 1, 1), 0, None, [], [tex], label)
             for tex, label in ((grown, "a"), (kept, "b"), (grown, "c"))]
    steps.append(Dispatch(None, None, (1, 1, 1), 0, None, [], [], "no textures"))
    device = _FakeDevice()
    rebind_textures(device, steps, {id(grown)})
    assert device.made == ["a", "c"]
    rebind_textures(device, steps)  # no set given: every step that binds a texture
    assert device.made == ["a", "c", "a", "b", "c"]


@requires_gpu
def test_new_sizes_match_a_program_that_saw_only_that_size():
    """A program that recorded other sizes first (its scratch textures grown, cached plans rebound) gives, at each
    size, the bits of a fresh program run at that size alone, and replays its earlier plans right after."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((8, 3, 3, 3), dtype=np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    model = ws.load_model(make_model(nodes, [("x", F, [1, 3, "h", "w"])], [("y", F, None)], {"w": w}))
    inputs = [rng.standard_normal((1, 3, h, h), dtype=np.float32) for h in (8, 24, 40, 16)]
    with ws.Worker(model, "gpu-compute") as worker:
        seen = [worker.run({"x": x})["y"] for x in inputs]
        again = [worker.run({"x": x})["y"] for x in inputs]  # replays, after every growth
        stats = worker.stats()
    assert stats["plans_recorded"] == 4 and stats["plans_recorded_for_new_sizes"] == 3
    for x, first, replayed in zip(inputs, seen, again, strict=True):
        with ws.Worker(model, "gpu-compute") as alone:
            expected = alone.run({"x": x})["y"]
        assert np.array_equal(first, expected) and np.array_equal(replayed, expected)


@requires_gpu
def test_a_rejected_bind_group_still_raises():
    from wgsentis.backends.gpu.bind_groups import create_bind_group
    from wgsentis.backends.gpu.device import get_context

    ctx = get_context()
    usage = ctx.wgpu.BufferUsage
    layout = ctx.device.create_bind_group_layout(entries=[
        {"binding": 0, "visibility": ctx.wgpu.ShaderStage.COMPUTE, "buffer": {"type": "read-only-storage"}}])
    buf = ctx.device.create_buffer(size=256, usage=usage.STORAGE)
    assert create_bind_group(ctx.device, layout, [(buf, 0, 256)], "fits") is not None
    with pytest.raises(Exception):  # noqa: B017 - wgpu's own validation error, whatever its class
        create_bind_group(ctx.device, layout, [(buf, 0, 512)], "past the buffer's end")
    buf.destroy()


@requires_gpu
@pytest.mark.parametrize("backend", ["gpu-compute", "gpu-pixel"])
def test_host_values_of_a_size_live_with_its_plan_not_the_program(backend):
    """A value the host computes from shapes for a GPU layer (a decoder's positions) is uploaded once per plan,
    counted with the run's uploads, and kept with that plan: the program's constants do not grow with every new
    size (they did: 3 buffers a token of a GPT-2 step, kept until close), and an earlier size's plan still
    replays its own values after later sizes were recorded."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "one"], ["n"], axis=0),
             helper.make_node("Cast", ["n"], ["nf"], to=1),
             helper.make_node("Range", ["zero", "nf", "step"], ["r"]),
             helper.make_node("Add", ["x", "r"], ["y"])]
    consts = {"one": np.array(1, np.int64), "zero": np.array(0.0, np.float32), "step": np.array(1.0, np.float32)}
    model = ws.load_model(make_model(nodes, [("x", F, [1, "n"])], [("y", F, None)], consts))
    rng = np.random.default_rng(2)
    inputs = [rng.standard_normal((1, n), dtype=np.float32) for n in range(3, 27)]
    with ws.Worker(model, backend, max_plans=8) as worker:
        worker.run({"x": inputs[0]})
        weights = worker.stats()["weight_upload_bytes"]
        for x in inputs:
            y = worker.run({"x": x})["y"]
            np.testing.assert_array_equal(y, x + np.arange(x.shape[1], dtype=np.float32))
            stats = worker.stats()
            assert stats["weight_upload_bytes"] == weights
            if stats["run"]["recorded"] and x is not inputs[0]:
                assert any(t["layer"] == "a host value of the plan" and t["bytes"] >= 4 * x.shape[1]
                           for t in stats["transfers"])
        for x in inputs[-8:]:  # replays of the cached sizes, each on its own plan's values
            np.testing.assert_array_equal(worker.run({"x": x})["y"], x + np.arange(x.shape[1], dtype=np.float32))
            assert not worker.stats()["run"]["recorded"]
