"""The cyclic garbage collector paused while a GPU plan is traced (backends/gpu/collector.py): counted across
threads, resumed by the last pause only where a pause stopped it, and a new size's run leaves it as it found it."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest
from helpers import F, make_model, requires_gpu
from onnx import helper

import wgsentis as ws
from wgsentis.backends.gpu.collector import CollectorPause


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_pauses_nest_and_the_last_resumes(collector_on):
    pause = CollectorPause()
    with pause.paused():
        assert not gc.isenabled()
        with pause.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # (one pause still on)
    assert gc.isenabled()


def test_a_collector_the_caller_turned_off_stays_off(collector_on):
    pause = CollectorPause()
    gc.disable()
    with pause.paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_a_pause_that_raises_resumes(collector_on):
    pause = CollectorPause()
    with pytest.raises(ValueError), pause.paused():
        raise ValueError("a failed trace")
    assert gc.isenabled()


def test_pauses_of_two_threads_resume_once_both_end(collector_on):
    pause = CollectorPause()
    inside, release = threading.Barrier(2), threading.Event()
    states = []

    def run() -> None:
        with pause.paused():
            inside.wait()
            release.wait()

    thread = threading.Thread(target=run)
    thread.start()
    with pause.paused():
        inside.wait()
    states.append(gc.isenabled())  # the other thread's pause is still on
    release.set()
    thread.join()
    assert states == [False] and gc.isenabled()


@requires_gpu
@pytest.mark.parametrize("backend", ["gpu-compute", "gpu-pixel"])
def test_runs_at_new_sizes_leave_the_collector_on(collector_on, backend):
    model = ws.load_model(make_model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [("x", F, [1, "s"])],
                                     [("y", F, None)]))
    with ws.Worker(model, backend) as worker:
        for s in (3, 5, 7, 9, 11, 13):
            worker.run({"x": np.ones((1, s), np.float32)})
            assert gc.isenabled()
