"""The workspace a program lends its host kernels (wgsentis.ops.parallel.HostWorkspace): scratch buffers per
thread and the pools that splits run on belong to the program, survive between its runs, and are freed when
its worker closes, on the cpu backend and in a GPU backend's host program."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from helpers import F, make_model, requires_gpu
from onnx import helper

import wgsentis as ws
from wgsentis.ops.parallel import HostWorkspace, run_split


def _conv_model():
    """A 3x3 convolution big enough to split (Winograd, 64->64 at 56x56) and a LRN (scratch of its own)."""
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((64, 64, 3, 3)) / 24).astype(np.float32)
    return make_model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                       helper.make_node("LRN", ["c"], ["y"], size=3)],
                      [("x", F, [1, 64, 56, 56])], [("y", F, None)], {"w": w})


def test_a_closed_workers_scratch_and_pools_are_released():
    x = np.random.default_rng(6).standard_normal((1, 64, 56, 56)).astype(np.float32)
    worker = ws.Worker(ws.load_model(_conv_model()), "cpu", threads=2, spin_wait=False)
    first = worker.run({"x": x})["y"]
    workspace = worker.program.workspace
    held = workspace.held_bytes()
    assert held > 0 and workspace.pool_threads() == 1  # one pool of one thread beside the caller
    np.testing.assert_array_equal(worker.run({"x": x})["y"], first)
    assert workspace.held_bytes() == held  # the second run reuses the first run's buffers
    worker.close()
    assert workspace.held_bytes() == 0 and workspace.pool_threads() == 0


def test_each_worker_has_its_own_workspace():
    model = ws.load_model(_conv_model())
    with ws.Worker(model, "cpu") as a, ws.Worker(model, "cpu") as b:
        assert a.program.workspace is not b.program.workspace


def test_scratch_is_per_thread_and_the_pool_threads_stop_on_close():
    workspace = HostWorkspace()
    seen: dict[int, int] = {}

    def work(lo: int, hi: int) -> None:
        buf = workspace.scratch("part", (hi - lo,), np.float32)
        buf[:] = lo
        seen[threading.get_ident()] = buf.__array_interface__["data"][0]

    run_split(4000, 2, work, workspace=workspace)
    assert len(seen) == 2 and len(set(seen.values())) == 2  # two threads, two buffers
    pool_threads = [t for t in threading.enumerate() if t.ident in seen and t is not threading.current_thread()]
    assert workspace.held_bytes() == 4 * 4000
    workspace.close()
    assert workspace.held_bytes() == 0 and workspace.pool_threads() == 0
    assert all(not t.is_alive() for t in pool_threads)


def test_kernels_outside_a_program_keep_nothing():
    from wgsentis.ops.parallel import TRANSIENT

    buf = TRANSIENT.scratch("x", (256,), np.float32)
    assert buf.shape == (256,) and TRANSIENT.held_bytes() == 0 and TRANSIENT.pool(2) is None


@requires_gpu
@pytest.mark.parametrize("backend", ["gpu-compute", "gpu-pixel"])
def test_a_gpu_programs_host_workspace_is_released_on_close(backend):
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [2, 3])], [("y", F, None)])
    worker = ws.Worker(ws.load_model(model), backend)
    worker.run({"x": np.ones((2, 3), np.float32)})
    workspace = worker.program.placer.host_program.workspace
    assert worker.program.placer.cpu_steps[0].ctx.workspace is workspace  # what its host layers' kernels get
    workspace.scratch("seed", (1024,), np.float32)  # what a host layer's kernel would hold
    assert workspace.held_bytes() == 4096
    worker.close()
    assert workspace.held_bytes() == 0
