"""Issue 29, point 8: a Loop that never stops is stopped the same way on every backend.

A Loop with no trip count whose condition never turns false runs ``Worker(max_loop_iterations=...)`` iterations
(default 1e6) and then stops with a LayerError naming the Loop, the count and the keyword, on cpu, gpu-compute and
gpu-pixel alike (the GPU Loop programs used to fall back to the CPU kernel at the bound, which ran it all again:
900 s on gpu-compute). Scan outputs a Loop keeps on the device count against ``memory_limit`` as the CPU kernel
counts its own (held plus the stacked copy), so a loop that grows them stops at the same iteration everywhere."""

from __future__ import annotations

import time

import numpy as np
import onnx
import pytest
from helpers import BACKENDS, F, make_model
from onnx import TensorProto, helper, numpy_helper

import wgsentis as ws
from wgsentis.errors import InputError, LayerError, ResourceLimitError
from wgsentis.run_control import DEFAULT_MAX_LOOP_ITERATIONS

B = TensorProto.BOOL


def _forever(device_condition: bool, trip_count: bool = False) -> onnx.ModelProto:
    """A Loop 'forever' carrying v (+1 per iteration) whose condition stays true: passed through from the
    host (Identity), or computed on the device from v (v + 1 > -1)."""
    nodes = [helper.make_node("Add", ["v_in", "one"], ["v_out"])]
    if device_condition:
        nodes += [helper.make_node("Greater", ["v_out", "minus_one"], ["gt"]),
                  helper.make_node("Squeeze", ["gt"], ["cond_out"])]
    else:
        nodes.append(helper.make_node("Identity", ["cond_in"], ["cond_out"]))
    body = helper.make_graph(
        nodes, "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("cond_in", B, []),
         helper.make_tensor_value_info("v_in", F, [1])],
        [helper.make_tensor_value_info("cond_out", B, []), helper.make_tensor_value_info("v_out", F, [1])],
        [numpy_helper.from_array(np.ones(1, np.float32), "one"),
         numpy_helper.from_array(-np.ones(1, np.float32), "minus_one")])
    inputs = [("trip", TensorProto.INT64, [])] if trip_count else []
    return make_model([helper.make_node("Loop", ["trip" if trip_count else "", "cond", "v0"], ["v"], name="forever",
                                        body=body)],
                      [*inputs, ("cond", B, []), ("v0", F, [1])], [("v", F, [1])], opset=16)


FEEDS = {"cond": np.array(True), "v0": np.zeros(1, np.float32)}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("device_condition", [False, True], ids=["host-condition", "device-condition"])
def test_a_loop_that_never_ends_stops_at_the_bound_quickly(backend, device_condition):
    start = time.monotonic()
    with ws.Worker(ws.load_model(_forever(device_condition)), backend, max_loop_iterations=50) as worker:
        with pytest.raises(LayerError) as caught:
            worker.run(FEEDS)
    elapsed = time.monotonic() - start
    error = caught.value
    assert type(error) is LayerError and error.layer == "forever" and error.op_type == "Loop", error
    message = str(error)
    assert "layer 'forever' (Loop)" in message and "ran 50 iterations" in message, message
    assert "never turned false" in message and "max_loop_iterations=50" in message, message
    assert elapsed < 30, f"{backend}: stopped after {elapsed:.1f} s"


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_infinite_trip_count_is_bounded_and_a_finite_one_is_trusted(backend):
    model = ws.load_model(_forever(device_condition=False, trip_count=True))
    with ws.Worker(model, backend, max_loop_iterations=20) as worker:
        with pytest.raises(LayerError, match=r"'forever' \(Loop\).*ran 20 iterations.*max_loop_iterations=20"):
            worker.run({"trip": np.array(np.iinfo(np.int64).max), **FEEDS})  # exporters' "infinite"
        out = worker.run({"trip": np.array(30, np.int64), **FEEDS})["v"]  # a model's own count: past the bound
    np.testing.assert_array_equal(out, [30])


def test_the_bound_is_checked_and_documented():
    model = ws.load_model(_forever(device_condition=False))
    for bad in (0, -1, True, 2.5, None, "many"):
        with pytest.raises(InputError, match="max_loop_iterations"):
            ws.Worker(model, "cpu", max_loop_iterations=bad)
    with ws.Worker(model, "cpu") as worker:
        assert worker.max_loop_iterations == DEFAULT_MAX_LOOP_ITERATIONS == 1_000_000
    assert "max_loop_iterations" in (ws.Worker.__doc__ or "")


def _growing(n: int) -> onnx.ModelProto:
    """A Loop 'grow' with no trip count, carrying an n-float v (+1 per iteration) and scanning 2 v: n floats more
    kept per iteration, computed on the device on the GPU backends."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["v_in", "one"], ["v_out"]),
         helper.make_node("Mul", ["v_out", "two"], ["row"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("cond_in", B, []),
         helper.make_tensor_value_info("v_in", F, [n])],
        [helper.make_tensor_value_info("cond_out", B, []), helper.make_tensor_value_info("v_out", F, [n]),
         helper.make_tensor_value_info("row", F, [n])],
        [numpy_helper.from_array(np.ones(1, np.float32), "one"),
         numpy_helper.from_array(np.full(1, 2, np.float32), "two")])
    return make_model([helper.make_node("Loop", ["", "cond", "v0"], ["v", "rows"], name="grow", body=body)],
                      [("cond", B, []), ("v0", F, [n])], [("v", F, [n]), ("rows", F, None)], opset=16)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_growing_scan_output_stops_at_the_same_iteration_on_every_backend(backend):
    n, limit = 1 << 14, 4 << 20  # 64 KiB a row: held + stacked pass 4 MiB at the 33rd iteration
    with ws.Worker(ws.load_model(_growing(n)), backend, memory_limit=limit) as worker:
        with pytest.raises(ResourceLimitError) as caught:
            worker.run({"cond": np.array(True), "v0": np.zeros(n, np.float32)})
    error = caught.value
    assert error.layer == "grow" and error.op_type == "Loop", error
    assert tuple(error.shape) == (33, n) and error.nbytes == 2 * 33 * n * 4, error
    assert "after 33 iterations" in str(error), error


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_loop_under_the_limits_still_runs_and_matches(backend):
    n = 8
    model = _growing(n)
    stop = helper.make_graph(  # the same loop, ended by its condition after 5 iterations (i < 4)
        [helper.make_node("Less", ["i", "four"], ["cond_out"]), *list(model.graph.node[0].attribute[0].g.node)[1:]],
        "body", list(model.graph.node[0].attribute[0].g.input), list(model.graph.node[0].attribute[0].g.output),
        [*model.graph.node[0].attribute[0].g.initializer, numpy_helper.from_array(np.array(4, np.int64), "four")])
    model.graph.node[0].ClearField("attribute")
    model.graph.node[0].attribute.append(helper.make_attribute("body", stop))
    feeds = {"cond": np.array(True), "v0": np.arange(n, dtype=np.float32)}
    with ws.Worker(ws.load_model(model), backend, memory_limit=1 << 20, max_loop_iterations=10) as worker:
        out = worker.run(feeds)
    np.testing.assert_array_equal(out["v"], feeds["v0"] + 5)
    np.testing.assert_array_equal(out["rows"], 2 * (feeds["v0"] + np.arange(1, 6, dtype=np.float32)[:, None]))
