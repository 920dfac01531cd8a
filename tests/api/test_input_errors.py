"""Bad inputs to a worker get an InputError naming the input, the expected and the actual value."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import F, make_model
from onnx import helper

import wgsentis as ws
from wgsentis.errors import InputError, LayerError


@pytest.fixture
def worker():
    model = make_model([helper.make_node("Add", ["a", "b"], ["c"], name="add")],
                       [("a", F, ["n", 3]), ("b", F, ["n", 3])], [("c", F, ["n", 3])])
    with ws.Worker(ws.load_model(model, name="adder"), "cpu") as w:
        yield w


def test_unknown_input_name(worker):
    with pytest.raises(InputError, match=r"model 'adder' has no input\(s\) \['z'\]; its inputs are \['a', 'b'\]"):
        worker.schedule({"a": np.ones((1, 3), np.float32), "b": np.ones((1, 3), np.float32), "z": 1})


def test_missing_input(worker):
    with pytest.raises(InputError, match=r"missing input.*'b'"):
        worker.schedule({"a": np.ones((1, 3), np.float32)})


def test_wrong_dtype(worker):
    with pytest.raises(InputError, match="input 'a' expects dtype float32, got float64"):
        worker.schedule({"a": np.ones((1, 3)), "b": np.ones((1, 3), np.float32)})


def test_wrong_rank_and_fixed_dim(worker):
    with pytest.raises(InputError, match=r"input 'a' expects rank 2 shape \[n, 3\], got shape \[3\]"):
        worker.schedule({"a": np.ones(3, np.float32), "b": np.ones((1, 3), np.float32)})
    with pytest.raises(InputError, match=r"input 'b' expects shape \[n, 3\], got \[1, 4\] \(axis 1\)"):
        worker.schedule({"a": np.ones((1, 3), np.float32), "b": np.ones((1, 4), np.float32)})


def test_inconsistent_symbolic_dim_is_a_warning_then_the_layer_checks(worker):
    # As in ONNX Runtime: a symbolic name is not a constraint across inputs (said once, as a warning); the layer
    # that combines the two reports the real mismatch.
    from wgsentis.errors import SymbolicDimensionWarning
    with pytest.warns(SymbolicDimensionWarning, match="dimension 'n' is 2 here but 1 in input 'a'"):
        worker.schedule({"a": np.ones((1, 3), np.float32), "b": np.ones((2, 3), np.float32)})
    assert worker.run({"a": np.ones((1, 3), np.float32), "b": np.ones((2, 3), np.float32)})


def test_not_an_array(worker):
    with pytest.raises(InputError, match="expects a numpy array"):
        worker.schedule({"a": "hello", "b": np.ones((1, 3), np.float32)})


def test_runtime_failure_names_layer_and_inputs():
    model = make_model([helper.make_node("Reshape", ["x", "s"], ["y"], name="bad_reshape")],
                       [("x", F, [6]), ("s", ws.onnx_import.onnx.TensorProto.INT64, [2])], [("y", F, None)])
    with ws.Worker(ws.load_model(model), "cpu") as worker:
        worker.schedule({"x": np.ones(6, np.float32), "s": np.array([4, 4], np.int64)})
        with pytest.raises(LayerError, match=r"layer 'bad_reshape' \(Reshape\).*float32\[6\]"):
            worker.peek_output().readback_and_clone()


def test_sample_inputs_need_non_batch_dims():
    from wgsentis.shapes import sample_inputs

    model = ws.load_model(make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                                     [("x", F, [None, 3, "height", None])], [("y", F, [None, 3, "height", None])]),
                          name="img")
    with pytest.raises(InputError, match=r"input 'x'.*axis 2 \(height\).*--dim height=N"):
        sample_inputs(model)
    with pytest.raises(InputError, match=r"axis 3 \(unnamed\).*--dim x:3=N"):
        sample_inputs(model, {"height": 5})
    feeds = sample_inputs(model, {"height": 5, "x:3": 7})
    assert feeds["x"].shape == (1, 3, 5, 7)  # the unknown batch dim defaults to 1


def test_ieee_results_raise_no_numpy_warnings():
    import warnings

    model = ws.load_model(make_model([helper.make_node("Log", ["x"], ["y"], name="log")],
                                     [("x", F, [3])], [("y", F, [3])]))
    with warnings.catch_warnings(), ws.Worker(model, "cpu") as worker:
        warnings.simplefilter("error")  # log(0) = -inf is the answer, not a fault
        out = worker.run({"x": np.array([0.0, 1.0, -1.0], np.float32)})["y"]
    assert out[0] == -np.inf and out[1] == 0 and np.isnan(out[2])
