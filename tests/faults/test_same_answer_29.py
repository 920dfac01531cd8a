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
from helpers import BACKENDS, F, I64, make_model, ort_outputs
from onnx import TensorProto, helper

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


# -- int64 past the int32 range ---------------------------------------------------------------------------------
def _int64_model():
    # x (float) -> int64 on the device, then arithmetic whose results pass the int32 range.
    nodes = [helper.make_node("Cast", ["x"], ["a"], to=TensorProto.INT64),
             helper.make_node("Mul", ["a", "a"], ["sq"]), helper.make_node("Add", ["a", "big"], ["sum"]),
             helper.make_node("Sub", ["a", "big"], ["diff"]), helper.make_node("Neg", ["a"], ["neg"]),
             helper.make_node("Abs", ["m"], ["abs"]), helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Cast", ["r"], ["m0"], to=TensorProto.INT32),
             helper.make_node("Cast", ["m0"], ["m1"], to=TensorProto.INT64),
             helper.make_node("Sub", ["m1", "i32max"], ["m2"]), helper.make_node("Sub", ["m2", "one"], ["m"]),
             helper.make_node("CumSum", ["sq", "axis"], ["cum"])]
    big = np.array([2**31 - 1], np.int64)
    outputs = [(n, I64, None) for n in ("a", "sq", "sum", "diff", "neg", "abs", "cum")]
    return make_model(nodes, [("x", F, [4])], outputs,
                      {"big": big, "i32max": big, "one": np.array([1], np.int64), "axis": np.array(0, np.int64)})


@pytest.mark.parametrize("backend", BACKENDS)
def test_int64_arithmetic_is_exact_past_the_int32_range(backend):
    model = _int64_model()
    feeds = {"x": np.array([3e4, 5e4, -3e9, 7.9], np.float32)}
    expected = dict(zip(("a", "sq", "sum", "diff", "neg", "abs", "cum"), ort_outputs(model, feeds), strict=True))
    with ws.Worker(ws.load_model(model), backend) as worker:
        for _ in range(2):  # recorded, then replayed
            got = worker.run(feeds)
            for name, want in expected.items():
                np.testing.assert_array_equal(got[name], want, err_msg=name)
        if backend != "cpu":
            placements = worker.program.plan_summary()["placements"]
            fallbacks = {p["op"]: p["reason"] for p in placements if p["device"] == "fallback"}
            assert "int64: the GPU holds int64 in 32-bit words" in fallbacks["Cast"]
            assert all("int32 range" in reason for reason in fallbacks.values()), fallbacks


@pytest.mark.parametrize("backend", ["gpu-compute", "gpu-pixel"])
def test_a_fallback_names_the_inputs_and_attributes_its_program_declined(backend):
    # Mean of int32 tensors has no GPU program (only float32 Mean does): the reason names each input's
    # name, dtype, shape and place.
    model = make_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Cast", ["r"], ["i"], to=6),
                        helper.make_node("Mean", ["i", "i"], ["y"], name="mean_of_ints")],
                       [("x", F, [2, 3])], [("y", TensorProto.INT32, [2, 3])])
    with ws.Worker(ws.load_model(model), backend) as worker:
        worker.run({"x": np.ones((2, 3), np.float32)})
        placements = {p["layer"]: p for p in worker.program.plan_summary()["placements"]}
    reason = placements["mean_of_ints"]["reason"]
    assert placements["mean_of_ints"]["device"] == "fallback"
    assert "input 0 'i' int32[2, 3] (rank 2, device)" in reason and "input 1 'i'" in reason, reason


# -- float to integer casts: one rule on every backend ----------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("to", [TensorProto.INT32, TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16,
                                TensorProto.UINT16])
def test_out_of_range_float_casts_follow_one_rule(backend, to):
    special = np.array([np.inf, -np.inf, np.nan, 3e9, -3e9, 2147483648.0, -2147483648.0, 2147483520.0, 300.0,
                        -129.7, 65535.9, -0.9, 1e-45], np.float32)
    model = make_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Sub", ["x", "r"], ["n"]),
                        helper.make_node("Add", ["r", "n"], ["v"]),  # v == x, computed on the device
                        helper.make_node("Cast", ["v"], ["y"], to=to)], [("x", F, [special.size])],
                       [("y", to, [special.size])])
    with ws.Worker(ws.load_model(model), backend) as worker:
        got = worker.run({"x": special})["y"]
        assert not worker.stats()["fallback_layers"]
    expected = ort_outputs(model, {"x": special})[0]
    np.testing.assert_array_equal(got, expected)


# -- subnormals ----------------------------------------------------------------------------------------------------
def _subnormal_operands() -> tuple[np.ndarray, np.ndarray]:
    """Pairs whose operands or results lie in the subnormal range (and normal ones around them), bits random."""
    rng = np.random.default_rng(29)
    n = 4096
    sub = rng.integers(1, 1 << 23, n, dtype=np.uint32).view(np.float32) * rng.choice([-1, 1], n).astype(np.float32)
    normal = (rng.standard_normal(n) * np.exp2(rng.integers(-126, 100, n))).astype(np.float32)
    small = (rng.standard_normal(n) * np.exp2(rng.integers(-80, -40, n))).astype(np.float32)  # products underflow
    a = np.concatenate([sub, sub, normal, small, sub, [1e-40, 1.0, 1e-45, 0.0, -0.0, np.inf]]).astype(np.float32)
    b = np.concatenate([sub[::-1], normal, sub, small[::-1], -sub + np.float32(1e-44),
                        [1.0, 1.1754942e-38, 0.0, 1e-40, -1e-40, 1e-40]]).astype(np.float32)
    return a, b


@pytest.mark.parametrize("backend", ["gpu-compute", "gpu-pixel"])
def test_arithmetic_keeps_subnormals_on_every_backend(backend):
    a, b = _subnormal_operands()
    ops = ["Add", "Sub", "Mul", "Div", "Max", "Min", "Sum"]
    nodes = [helper.make_node(op, ["a", "b"], [op.lower()]) for op in ops]
    nodes.append(helper.make_node("Relu", ["a"], ["relu"]))
    outputs = [(op.lower(), F, [a.size]) for op in ops] + [("relu", F, [a.size])]
    model = ws.load_model(make_model(nodes, [("a", F, [a.size]), ("b", F, [a.size])], outputs))
    with ws.Worker(model, "cpu") as worker:
        expected = worker.run({"a": a, "b": b})
    with ws.Worker(model, backend) as worker:
        got = worker.run({"a": a, "b": b})
        assert not worker.stats()["fallback_layers"]
    for name, want in expected.items():
        # bit for bit (NaN where the cpu has NaN; -0 and +0 alike)
        mismatch = ~((got[name] == want) | (np.isnan(got[name]) & np.isnan(want)))
        assert not mismatch.any(), (name, a[mismatch][:4], b[mismatch][:4], got[name][mismatch][:4],
                                    want[mismatch][:4])


@pytest.mark.parametrize("backend", BACKENDS)
def test_quantize_linear_of_subnormals_matches_onnx_runtime(backend):
    x = np.array([1e-45, -1e-45, 1e-40, 3.0, -2e-39, 0.0], np.float32)
    model = make_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Sub", ["x", "r"], ["n"]),
                        helper.make_node("Add", ["r", "n"], ["v"]),  # v == x, on the device
                        helper.make_node("QuantizeLinear", ["v", "s", "z"], ["y"])],
                       [("x", F, [x.size]), ("s", F, [])], [("y", TensorProto.UINT8, [x.size])],
                       {"z": np.array(0, np.uint8)}, opset=13)
    for scale in (0.0, 1e-40, 1e-3):
        feeds = {"x": x, "s": np.array(scale, np.float32)}
        with ws.Worker(ws.load_model(model), backend) as worker:
            got = worker.run(feeds)["y"]
        np.testing.assert_array_equal(got, ort_outputs(model, feeds)[0], err_msg=f"scale {scale}")


@pytest.mark.parametrize("backend", ["gpu-compute", "gpu-pixel"])
def test_an_elementwise_fallback_says_which_input_and_why(backend):
    model = make_model([helper.make_node("Greater", ["x", "zero"], ["p"]), helper.make_node("Not", ["p"], ["q"]),
                        helper.make_node("Greater", ["p", "q"], ["y"], name="bool_greater"),
                        helper.make_node("Pow", ["x", "e"], ["z"], name="int_power")],
                       [("x", F, [3]), ("e", TensorProto.INT32, [3])],
                       [("y", TensorProto.BOOL, [3]), ("z", F, [3])], {"zero": np.zeros(1, np.float32)})
    with ws.Worker(ws.load_model(model), backend) as worker:
        worker.run({"x": np.array([-1, 0, 2], np.float32), "e": np.array([1, 2, 3], np.int32)})
        placements = {p["layer"]: p for p in worker.program.plan_summary()["placements"]}
    assert placements["bool_greater"]["reason"] == "Greater of bool tensors has no program here (Equal only)"
    assert placements["int_power"]["reason"] == "Pow's exponent 'e' is int32; this program takes float32"


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_output_that_is_an_initializer_comes_back_on_every_backend(backend):
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [3])],
                       [("y", F, [3]), ("w", F, [2])], {"w": np.array([1.5, -2.0], np.float32)})
    with ws.Worker(ws.load_model(model), backend) as worker:
        for _ in range(2):
            got = worker.run({"x": np.array([-1.0, 0.0, 2.0], np.float32)})
            np.testing.assert_array_equal(got["w"], [1.5, -2.0])
            np.testing.assert_array_equal(got["y"], [0.0, 0.0, 2.0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_int64_indices_computed_on_the_device_stay_there_and_stay_checked(backend):
    # A Cast to int64 and an offset Add whose results only serve as Gather indices stay on the device: a value past
    # int32 is out of range there as on the host (the same IndexOutOfRangeError); the same Add feeding an output
    # runs on the host.
    table = np.arange(20, dtype=np.float32).reshape(10, 2)
    nodes = [helper.make_node("Cast", ["xf"], ["i"], to=TensorProto.INT64, name="to_index"),
             helper.make_node("Add", ["i", "one"], ["j"], name="offset"),
             helper.make_node("Gather", ["table", "j"], ["y"], name="lookup", axis=0),
             helper.make_node("Add", ["i", "one"], ["k"], name="shown")]
    model = make_model(nodes, [("xf", F, [3])], [("y", F, None), ("k", I64, None)],
                       {"table": table, "one": np.array(1, np.int64)})
    with ws.Worker(ws.load_model(model), backend) as worker:
        got = worker.run({"xf": np.array([0.0, 4.9, -3.0], np.float32)})
        np.testing.assert_array_equal(got["y"], table[[1, 5, -2]])
        np.testing.assert_array_equal(got["k"], [1, 5, -2])
        if backend != "cpu":
            placements = {p["layer"]: p["device"] for p in worker.program.plan_summary()["placements"]}
            # (The Cast feeds an output too, so it runs on the host; the Adds of its bounded result stay on the GPU.)
            assert placements["offset"] == placements["lookup"] == placements["shown"] == "gpu", placements
            assert placements["to_index"] == "fallback", placements
        with pytest.raises(ws.errors.IndexOutOfRangeError, match="lookup"):
            worker.run({"xf": np.array([0.0, 3e9, 1.0], np.float32)})


@pytest.mark.parametrize("backend", BACKENDS)
def test_int64_arithmetic_of_bounded_inputs_stays_on_the_device_until_a_run_passes_the_bound(backend):
    # Inputs of small values (a sequence length, token positions) keep their int64 sums on the device: the plan
    # records a bound on each int64 input and checks it at every upload; a run past it is recorded anew, exactly.
    model = make_model([helper.make_node("Sub", ["a", "b"], ["d"], name="diff"),
                        helper.make_node("Mul", ["d", "d"], ["y"], name="square")],
                       [("a", I64, [3]), ("b", I64, [3])], [("y", I64, [3])])
    small = {"a": np.array([5, 100, -7], np.int64), "b": np.array([1, 2, 3], np.int64)}
    large = {"a": np.array([2**31 - 1, 0, -(2**31)], np.int64), "b": np.array([-(2**31), 2**31 - 1, 1], np.int64)}
    with ws.Worker(ws.load_model(model), backend) as worker:
        for feeds in (small, small, large, small):
            want = (feeds["a"] - feeds["b"]) ** 2
            np.testing.assert_array_equal(worker.run(feeds)["y"], want)
            if backend != "cpu" and feeds is small:
                # The difference's bound (2**17, from inputs bounded by 2**16) keeps it on the device; its square's
                # bound (2**34) does not, so that runs on the host.
                placements = {p["layer"]: p["device"] for p in worker.program.plan_summary()["placements"]}
                assert placements == {"diff": "gpu", "square": "fallback"}, placements


@pytest.mark.parametrize("backend", BACKENDS)
def test_int64_cumsum_runs_on_the_device_where_bounded_and_exactly_on_the_host_past_it(backend):
    # position ids from an attention mask: CumSum of small int64 values over a short axis stays on the device
    model = make_model([helper.make_node("Max", ["m", "zero"], ["p"]),  # (on the device: a device operand)
                        helper.make_node("CumSum", ["p", "axis"], ["y"], name="positions")],
                       [("m", I64, [2, 5])], [("y", I64, [2, 5])],
                       {"zero": np.array(0, np.int64), "axis": np.array(1, np.int64)})
    small = {"m": np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int64)}
    large = {"m": np.full((2, 5), 2**30, np.int64)}
    with ws.Worker(ws.load_model(model), backend) as worker:
        for feeds in (small, large, small):
            np.testing.assert_array_equal(worker.run(feeds)["y"], np.cumsum(np.maximum(feeds["m"], 0), axis=1))
            if backend != "cpu":
                placements = {p["layer"]: p["device"] for p in worker.program.plan_summary()["placements"]}
                assert placements["positions"] == ("gpu" if feeds is small else "fallback"), placements


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("positive", "negative"), [(2, 0), (0, -1), (1, 1)])
def test_isinf_detects_on_any_nonzero_attribute_as_the_cpu_does(backend, positive, negative):
    """IsInf's detect_positive / detect_negative: any non-zero value detects on every backend (the GPU programs
    once detected only where the value was exactly 1)."""
    node = helper.make_node("IsInf", ["x"], ["y"], detect_positive=positive, detect_negative=negative)
    graph = helper.make_graph([node], "isinf", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.BOOL, [4])])
    model = ws.load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]))
    x = np.array([np.inf, -np.inf, 1.0, np.nan], np.float32)
    with ws.Worker(model, backend) as worker:
        got = worker.run({"x": x})["y"]
    np.testing.assert_array_equal(got, [bool(positive), bool(negative), False, False])
