"""Runaway work and shared workers: timeouts, cancel(), and one Worker driven by many threads.

A run may be bounded (``timeout=``) or stopped (``Worker.cancel()``) between layers and between Loop
iterations; it raises a typed error naming the layer, and the worker stays usable. A Worker shared by
threads returns each ``run`` the outputs of its own inputs. The thread cases run in a subprocess: before
the fix a GPU worker shared by threads aborted the process (a Rust panic in wgpu-native).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from helpers import BACKENDS, requires_gpu
from onnx import TensorProto as T
from onnx import helper as h

import wgsentis as ws
from wgsentis.errors import InputError, RunCancelledError, RunInterruptedError, RunTimeoutError

# Generous: the machine's speed drifts 2-3x, and a slow CI box must not fail these.
STOP_WITHIN_S = 30.0


def runaway_loop_model(trip_count_input: bool = True) -> ws.Model:
    """y = x + M (one Add per iteration of a Loop named 'runaway'), M a graph input (or 10**12)."""
    body = h.make_graph(
        [h.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going"),
         h.make_node("Add", ["v_in", "one"], ["v_out"], name="step")],
        "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []),
         h.make_tensor_value_info("v_in", T.FLOAT, [1])],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("v_out", T.FLOAT, [1])],
        [h.make_tensor("one", T.FLOAT, [1], [1.0])])
    inputs = [h.make_tensor_value_info("x", T.FLOAT, [1])]
    inits = [h.make_tensor("c", T.BOOL, [], [True])]
    if trip_count_input:
        inputs.append(h.make_tensor_value_info("M", T.INT64, []))
    else:
        inits.append(h.make_tensor("M", T.INT64, [], [10**12]))
    graph = h.make_graph([h.make_node("Loop", ["M", "c", "x"], ["y"], body=body, name="runaway")], "loops",
                         inputs, [h.make_tensor_value_info("y", T.FLOAT, [1])], inits)
    return ws.load_model(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))


def long_chain_model(layers: int = 400) -> ws.Model:
    """A chain of MatMuls on a 256x256 matrix: no control flow, just many layers that take a while."""
    nodes, prev = [], "x"
    for k in range(layers):
        nodes.append(h.make_node("MatMul", [prev, "w"], [f"t{k}"], name=f"mm{k}"))
        prev = f"t{k}"
    nodes.append(h.make_node("Identity", [prev], ["y"], name="out"))
    w = np.eye(256, dtype=np.float32)
    graph = h.make_graph(nodes, "chain", [h.make_tensor_value_info("x", T.FLOAT, [256, 256])],
                         [h.make_tensor_value_info("y", T.FLOAT, [256, 256])],
                         [h.make_tensor("w", T.FLOAT, [256, 256], w.ravel())])
    return ws.load_model(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))


def feeds(trips: int) -> dict[str, np.ndarray]:
    return {"x": np.zeros(1, np.float32), "M": np.array(trips, np.int64)}


@pytest.mark.parametrize("backend", BACKENDS)
def test_timeout_stops_a_runaway_loop_and_the_worker_stays_usable(backend):
    with ws.Worker(runaway_loop_model(), backend) as worker:
        assert worker.run(feeds(3))["y"].tolist() == [3.0]
        start = time.monotonic()
        with pytest.raises(RunTimeoutError) as info:
            worker.run(feeds(10**12), timeout=0.3)
        assert time.monotonic() - start < STOP_WITHIN_S
        message = str(info.value)
        assert "timeout of 0.3 s" in message and "'runaway' (Loop)" in message and "'loops'" in message
        assert info.value.layer is not None
        assert worker.run(feeds(5))["y"].tolist() == [5.0]  # usable afterwards, same plan or a new one


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_infinite_trip_count_in_the_model_is_bounded_by_the_timeout(backend):
    with ws.Worker(runaway_loop_model(trip_count_input=False), backend) as worker:
        with pytest.raises(RunTimeoutError, match="runaway"):
            worker.run({"x": np.zeros(1, np.float32)}, timeout=0.2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cancel_stops_the_run_in_progress_from_another_thread(backend):
    with ws.Worker(runaway_loop_model(), backend) as worker:
        worker.schedule(feeds(10**12))
        pending = worker.peek_output()
        timer = threading.Timer(0.3, worker.cancel)
        timer.start()
        start = time.monotonic()
        with pytest.raises(RunCancelledError, match=r"cancelled in layer .*'runaway' \(Loop\)"):
            pending.download_to_array()
        assert time.monotonic() - start < STOP_WITHIN_S
        timer.join()
        assert worker.run(feeds(2))["y"].tolist() == [2.0]


def test_cancel_stops_queued_runs_but_not_later_ones():
    with ws.Worker(runaway_loop_model(), "cpu") as worker:
        worker.schedule(feeds(10**12))
        first = worker.peek_output()
        worker.schedule(feeds(4))  # queued behind the runaway one
        queued = worker.peek_output()
        worker.cancel()
        with pytest.raises(RunCancelledError):
            first.download_to_array()
        with pytest.raises(RunCancelledError, match="before its first layer"):
            queued.download_to_array()
        assert worker.run(feeds(4))["y"].tolist() == [4.0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_timeout_is_checked_between_layers_of_a_long_graph(backend):
    model = long_chain_model()
    x = np.random.default_rng(0).random((256, 256), dtype=np.float32)
    with ws.Worker(model, backend) as worker:
        with pytest.raises(RunTimeoutError) as info:
            worker.run({"x": x}, timeout=1e-4)
        assert info.value.layer is None or info.value.layer.startswith(("mm", "out"))
        np.testing.assert_allclose(worker.run({"x": x}, timeout=600)["y"], x, rtol=1e-5)


def test_timeout_counts_from_the_start_of_the_run_not_the_queue():
    with ws.Worker(runaway_loop_model(), "cpu") as worker:
        worker.schedule(feeds(10**12), timeout=2.0)
        slow = worker.peek_output()
        worker.schedule(feeds(1), timeout=1.0)  # waits ~2 s in the queue, then runs in well under 1 s
        quick = worker.peek_output()
        with pytest.raises(RunTimeoutError):
            slow.download_to_array()
        assert quick.download_to_array().tolist() == [1.0]


@pytest.mark.parametrize("bad", [0, -1, "1", float("nan"), True])
def test_timeout_must_be_a_positive_number(bad):
    with ws.Worker(runaway_loop_model(), "cpu") as worker, pytest.raises(InputError, match="timeout"):
        worker.run(feeds(1), timeout=bad)


def test_interruptions_share_a_base_class():
    assert issubclass(RunTimeoutError, RunInterruptedError) and issubclass(RunCancelledError, RunInterruptedError)


THREADED_RUNS = """
import sys, threading
import numpy as np
from onnx import TensorProto as T, helper as h
import wgsentis as ws

backend, runs = sys.argv[1], int(sys.argv[2])
graph = h.make_graph([h.make_node("Mul", ["x", "two"], ["m"]), h.make_node("Relu", ["m"], ["y"]),
                      h.make_node("Neg", ["x"], ["z"])], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [4, 64])],
                     [h.make_tensor_value_info("y", T.FLOAT, [4, 64]), h.make_tensor_value_info("z", T.FLOAT, [4, 64])],
                     [h.make_tensor("two", T.FLOAT, [], [2.0])])
model = ws.load_model(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))
sys.setswitchinterval(1e-6)  # switch threads as often as possible: races show up
wrong, errors = [], []
with ws.Worker(model, backend) as worker:
    def client(k):
        for i in range(runs):
            x = np.full((4, 64), k * 1000 + i, np.float32)
            try:
                if i % 3 == 0:
                    out = worker.run({"x": x})
                    y, z = out["y"], out["z"]
                else:  # schedule/peek_output pairs are per thread; read both outputs of one run at once
                    worker.schedule({"x": x})
                    ty, tz = worker.peek_output("y"), worker.peek_output("z")
                    got = {}
                    readers = [threading.Thread(target=lambda t=t: got.__setitem__(t.name, t.download_to_array()))
                               for t in (ty, tz)]
                    [r.start() for r in readers]
                    [r.join() for r in readers]
                    y, z = got["y"], got["z"]
            except Exception as exc:
                errors.append(repr(exc))
                continue
            if not (np.array_equal(y, 2 * x) and np.array_equal(z, -x)):
                wrong.append((k, i))
    threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
print("wrong", len(wrong), "errors", len(errors), errors[:3])
"""


@pytest.mark.parametrize("backend,runs", [("cpu", 150), pytest.param("gpu-compute", 60, marks=requires_gpu)])
def test_a_worker_shared_by_eight_threads_returns_each_run_its_own_outputs(backend, runs):
    child = subprocess.run([sys.executable, "-c", textwrap.dedent(THREADED_RUNS), backend, str(runs)],
                           capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, child.stderr[-3000:]
    assert "wrong 0 errors 0" in child.stdout, child.stdout + child.stderr[-2000:]


# -- a blocking cpu run on its caller's thread (Worker._submit, runs_on_any_thread) --------------------------------


def _recording_execute(worker: ws.Worker, calls: list) -> None:
    """Record (thread ident, trip count) of every run the worker's program executes."""
    program = worker.program
    execute = program.execute

    def recorded(feeds_, control=None, on_device=False):
        calls.append((threading.get_ident(), int(feeds_["M"]) if "M" in feeds_ else None))
        return execute(feeds_, control, on_device)

    program.execute = recorded


def test_a_blocking_cpu_run_executes_on_the_calling_thread_and_a_scheduled_one_on_the_runner():
    calls: list = []
    with ws.Worker(runaway_loop_model(), "cpu") as worker:
        _recording_execute(worker, calls)
        assert worker.run(feeds(3))["y"].tolist() == [3.0]
        worker.schedule(feeds(5))
        assert worker.peek_output().download_to_array().tolist() == [5.0]
        assert worker.run(feeds(2), on_device=True)["y"].download_to_array().tolist() == [2.0]
    here = threading.get_ident()
    assert [(ident == here, trips) for ident, trips in calls] == [(True, 3), (False, 5), (True, 2)]


def test_a_run_called_behind_scheduled_runs_waits_its_turn():
    """With runs queued, a blocking run goes to the runner behind them (the order runs were asked for holds)."""
    calls: list = []
    with ws.Worker(runaway_loop_model(), "cpu") as worker:
        _recording_execute(worker, calls)
        worker.schedule(feeds(200_000))  # a while on the runner
        first = worker.peek_output()
        assert worker.run(feeds(7))["y"].tolist() == [7.0]
        assert first.download_to_array().tolist() == [200_000.0]
    assert [trips for _, trips in calls] == [200_000, 7]
    assert calls[0][0] == calls[1][0] != threading.get_ident()  # both on the runner


def test_runs_from_many_threads_share_one_set_of_scratch_buffers():
    """A run's scratch buffers are the program's (HostWorkspace.run_buffers), whichever thread runs it: eight
    threads' blocking runs, each on its own thread, hold what one thread's do, not eight times that."""
    graph = h.make_graph(
        [h.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], name="conv")], "conv",
        [h.make_tensor_value_info("x", T.FLOAT, [1, 16, 48, 48])], [h.make_tensor_value_info("y", T.FLOAT, None)],
        [h.make_tensor("w", T.FLOAT, [16, 16, 3, 3], np.random.default_rng(0).random(16 * 16 * 9).tolist())])
    model = ws.load_model(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]))
    x = np.random.default_rng(1).random((1, 16, 48, 48), dtype=np.float32)
    with ws.Worker(model, "cpu", threads=1) as worker:
        expected = worker.run({"x": x})["y"]
        held = worker.program.workspace.held_bytes()
        assert held > 0  # the convolution took scratch buffers

        def run_once() -> None:
            np.testing.assert_array_equal(worker.run({"x": x})["y"], expected)

        threads = [threading.Thread(target=run_once) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert worker.program.workspace.held_bytes() == held
