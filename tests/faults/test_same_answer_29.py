"""Issue 29's classes that the worker and the GPU runtime own: a scheduled run uses its inputs as they were when it
was scheduled; a symbolic dimension name shared between inputs is not a constraint across them (ONNX Runtime's
rule); int64 arithmetic on the GPU backends never saturates at the int32 range the device holds int64 in; float to
integer casts follow one rule on every backend; a GPU fallback says which input, dtype, rank or attribute its
program declined."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest
from helpers import BACKENDS, F, make_model, ort_outputs
from onnx import helper

import wgsentis as ws
from wgsentis.errors import SymbolicDimensionWarning


# -- inputs as they were when scheduled ---------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_scheduled_run_uses_its_inputs_as_scheduled(backend):
    model = make_model([helper.make_node("Mul", ["x", "x"], ["y"])], [("x", F, [4, 4])], [("y", F, [4, 4])])
    with ws.Worker(ws.load_model(model), backend) as worker:
        buffer = np.zeros((8, 4), np.float32)
        view = buffer[:4]  # a view into the caller's buffer
        whole = np.zeros((4, 4), np.float32)
        outputs = []
        # Hold the worker's run queue so that no scheduled run can start before the caller reuses its arrays
        # (without the gate the race would usually, not always, be won by the run).
        gate = threading.Event()
        worker._runner.submit(gate.wait, 60)
        for k in range(1, 4):  # the first run records, the later ones replay: both must hold
            buffer[:] = k
            worker.schedule({"x": view})
            outputs.append((k * k, worker.peek_output()))
            whole[:] = 10 * k
            worker.schedule({"x": whole})
            outputs.append((100 * k * k, worker.peek_output()))
        buffer[:] = -1.0
        whole[:] = -1.0
        gate.set()
        for expected, out in outputs:
            np.testing.assert_array_equal(out.readback_and_clone(), np.full((4, 4), expected, np.float32))


def test_a_read_only_input_is_not_copied():
    from wgsentis.worker import _snapshot

    frozen = np.ones(4, np.float32)
    frozen.flags.writeable = False
    assert _snapshot(frozen, frozen) is frozen
    writable = np.ones(4, np.float32)
    assert _snapshot(writable, writable) is not writable


# -- symbolic dimensions across inputs ------------------------------------------------------------------------
def _per_symbol_model():
    # Three inputs declared [N], fed one per phoneme, one per character, one per word: each summed on its own.
    nodes = [helper.make_node("ReduceSum", [n], [f"s_{n}"], keepdims=0) for n in ("phs", "chars", "words")]
    nodes += [helper.make_node("Add", ["s_phs", "s_chars"], ["t"]), helper.make_node("Add", ["t", "s_words"], ["y"])]
    return make_model(nodes, [(n, F, ["N"]) for n in ("phs", "chars", "words")], [("y", F, [])], opset=13)


@pytest.mark.parametrize("backend", BACKENDS)
def test_inputs_sharing_a_symbolic_name_may_differ_as_in_onnx_runtime(backend):
    model = _per_symbol_model()
    feeds = {"phs": np.arange(4, dtype=np.float32), "chars": np.arange(6, dtype=np.float32),
             "words": np.ones(2, np.float32)}
    expected = ort_outputs(model, feeds)[0]
    with ws.Worker(ws.load_model(model), backend) as worker:
        with pytest.warns(SymbolicDimensionWarning) as said:
            got = worker.run(feeds)["y"]
        assert sorted(str(w.message).split(": ", 2)[2] for w in said) == [
            "dimension 'N' is 2 here but 4 in input 'phs'; symbolic dimensions are not a constraint across inputs, "
            "so the run goes on",
            "dimension 'N' is 6 here but 4 in input 'phs'; symbolic dimensions are not a constraint across inputs, "
            "so the run goes on"]
        np.testing.assert_allclose(got, expected, rtol=1e-6)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # said once per worker, not on every run
            worker.run(feeds)


def test_a_fixed_dim_is_still_checked():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, ["N", 3])], [("y", F, ["N", 3])])
    with ws.Worker(ws.load_model(model), "cpu") as worker, pytest.raises(ws.errors.InputError, match="axis 1"):
        worker.run({"x": np.ones((2, 4), np.float32)})
