"""wgsentis.ort against onnxruntime itself: the same NodeArgs, metadata, outputs and error classes for the same models
and mistakes, the providers' mapping to backends, RunOptions.terminate, and installed() swapping onnxruntime in
sys.modules for unchanged client code."""

from __future__ import annotations

import sys
import textwrap
import threading
import time
import warnings

import numpy as np
import onnx
import onnxruntime
import pytest
from helpers import F, I64, make_model, requires_gpu
from onnx import TensorProto, helper
from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

import wgsentis.ort as wort
from wgsentis import errors as ws_errors
from wgsentis.cli_common import sample_model_path


def _symbolic_model() -> onnx.ModelProto:
    """Symbolic and unnamed dims, an int64 input, two outputs (one undeclared shape), an overridable initializer."""
    model = make_model(
        [helper.make_node("Add", ["x", "bias"], ["y"]), helper.make_node("Cast", ["n"], ["z"], to=F),
         helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0)],
        [("x", F, ["batch", 3]), ("n", I64, [None, 2]), ("bias", F, [3])],
        [("y", F, ["batch", 3]), ("z", F, None), ("s", F, [])],
        initializers={"bias": np.array([0.5, -1.0, 2.0], np.float32)})
    model.graph.output[1].type.tensor_type.ClearField("shape")
    model.producer_name, model.domain, model.doc_string, model.model_version = "tests", "ai.test", "a model", 7
    model.graph.doc_string = "the graph"
    helper.set_model_props(model, {"author": "ort facade", "purpose": "tests"})
    return model


def _with_seq_output() -> onnx.ModelProto:
    """A sequence output (SplitToSequence) next to a tensor one."""
    graph = helper.make_graph(
        [helper.make_node("SplitToSequence", ["x"], ["parts"], axis=0), helper.make_node("Relu", ["x"], ["r"])],
        "seq", [helper.make_tensor_value_info("x", F, [2, 3])],
        [helper.make_tensor_sequence_value_info("parts", F, None), helper.make_tensor_value_info("r", F, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


FEEDS = {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "n": np.array([[1, 2], [3, 4]], np.int64)}


@pytest.fixture(scope="module")
def model_bytes() -> bytes:
    return _symbolic_model().SerializeToString()


@pytest.fixture(scope="module")
def sessions(model_bytes):
    real = onnxruntime.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    ours = wort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    yield real, ours
    ours.close()


def _args(node_args) -> list[tuple]:
    return [(a.name, a.shape, a.type) for a in node_args]


def test_node_args_and_metadata_match_onnxruntime(sessions):
    real, ours = sessions
    assert _args(ours.get_inputs()) == _args(real.get_inputs())
    assert _args(ours.get_outputs()) == _args(real.get_outputs())
    assert _args(ours.get_overridable_initializers()) == _args(real.get_overridable_initializers())
    for field in ("producer_name", "graph_name", "domain", "description", "graph_description", "version",
                  "custom_metadata_map"):
        assert getattr(ours.get_modelmeta(), field) == getattr(real.get_modelmeta(), field), field


def test_unknown_rank_and_float16_node_args_match_onnxruntime():
    half, double = TensorProto.FLOAT16, TensorProto.DOUBLE
    model = make_model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Cast", ["h"], ["k"], to=half)],
                       [("x", F, None), ("h", double, [2])], [("y", F, None), ("k", half, [2])])
    data = model.SerializeToString()
    real = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    ours = wort.InferenceSession(data)
    assert _args(ours.get_inputs()) == _args(real.get_inputs())
    assert _args(ours.get_outputs()) == _args(real.get_outputs())
    feed = {"x": -FEEDS["x"], "h": np.array([1.5, -2.25])}
    for g, w in zip(ours.run(None, feed), real.run(None, feed), strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    ours.close()


def test_negative_dim_values_read_as_unknown_as_in_onnxruntime():
    # Paddle2ONNX exports (PP-OCR's cls model) write dim_value -1 for a dynamic batch; onnxruntime reports None.
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [-1, 3, 0])], [("y", F, [-5, 3, 0])])
    data = model.SerializeToString()
    real = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    ours = wort.InferenceSession(data)
    assert _args(ours.get_inputs()) == _args(real.get_inputs()) == [("x", [None, 3, 0], "tensor(float)")]
    assert _args(ours.get_outputs()) == _args(real.get_outputs())
    ours.close()


def test_initializers_listed_as_inputs_before_ir4_are_constants_as_in_onnxruntime():
    model = make_model([helper.make_node("Add", ["x", "b"], ["y"])], [("x", F, [3]), ("b", F, [3])], [("y", F, [3])],
                       initializers={"b": np.ones(3, np.float32)}, opset=9)
    model.ir_version = 3
    data = model.SerializeToString()
    real = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    ours = wort.InferenceSession(data)
    assert _args(ours.get_inputs()) == _args(real.get_inputs())
    assert _args(ours.get_overridable_initializers()) == _args(real.get_overridable_initializers()) == []
    feed = {"x": np.arange(3, dtype=np.float32)}
    np.testing.assert_array_equal(ours.run(None, feed)[0], real.run(None, feed)[0])
    ours.close()


def test_sample_model_from_a_path_matches_onnxruntime():
    path = str(sample_model_path())
    real = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    ours = wort.InferenceSession(sample_model_path(), providers=["CPUExecutionProvider"])  # a PathLike
    assert _args(ours.get_inputs()) == _args(real.get_inputs())
    assert _args(ours.get_outputs()) == _args(real.get_outputs())
    inputs = real.get_inputs()
    shape = [d if isinstance(d, int) else 1 for d in inputs[0].shape]
    feed = {inputs[0].name: np.random.default_rng(0).random(shape, dtype=np.float32)}
    for got, want in zip(ours.run(None, feed), real.run(None, feed), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    ours.close()


def test_outputs_match_onnxruntime_in_the_order_asked(sessions):
    real, ours = sessions
    for names in (None, [], ["s", "y"], ["z"]):
        got, want = ours.run(names, FEEDS), real.run(names, FEEDS)
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    override = {**FEEDS, "bias": np.zeros(3, np.float32)}
    np.testing.assert_allclose(ours.run(["y"], override)[0], real.run(["y"], override)[0], rtol=1e-5)
    lists = {"x": [[1.0, 2.0, 3.0]], "n": FEEDS["n"]}  # a list fed to a tensor input
    np.testing.assert_allclose(ours.run(["y"], lists)[0], real.run(["y"], lists)[0], rtol=1e-5)


def test_sequence_outputs_are_lists_as_in_onnxruntime():
    data = _with_seq_output().SerializeToString()
    real = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    ours = wort.InferenceSession(data)
    assert _args(ours.get_outputs()) == _args(real.get_outputs())
    feed = {"x": FEEDS["x"]}
    got, want = ours.run(None, feed), real.run(None, feed)
    assert type(got[0]) is type(want[0]) is list
    for g, w in zip(got[0], want[0], strict=True):
        np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(got[1], want[1])
    ours.close()


MISTAKES = {
    "missing input": lambda s: s.run(None, {"x": FEEDS["x"]}),
    "wrong dtype": lambda s: s.run(None, {"x": FEEDS["x"].astype(np.float64), "n": FEEDS["n"]}),
    "wrong override dtype": lambda s: s.run(None, {**FEEDS, "bias": np.zeros(3, np.float64)}),
    "wrong rank": lambda s: s.run(None, {"x": np.ones(3, np.float32), "n": FEEDS["n"]}),
    "wrong dim": lambda s: s.run(None, {"x": np.ones((2, 4), np.float32), "n": FEEDS["n"]}),
    "unknown output": lambda s: s.run(["nope"], FEEDS),
    "unknown input": lambda s: s.run(None, {**FEEDS, "q": FEEDS["n"]}),
    "feed not a dict": lambda s: s.run(None, FEEDS["x"]),
}


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_run_mistakes_raise_onnxruntimes_classes(sessions, mistake):
    real, ours = sessions
    with pytest.raises(Exception) as want:
        MISTAKES[mistake](real)
    with pytest.raises(Exception) as got:
        MISTAKES[mistake](ours)
    want_type = want.value.__class__
    ours_type = getattr(wort, want_type.__name__, want_type)  # an ORT class's namesake, or the same builtin
    assert isinstance(got.value, ours_type), (mistake, got.value, want.value)
    if want_type.__module__ == ort_state.__name__:
        assert isinstance(got.value, ws_errors.WgSentisError)
        assert str(got.value).startswith(str(want.value).split(" : ")[0])  # "[ONNXRuntimeError]"
    if isinstance(got.value, wort.InvalidArgument | wort.MissingInputs):
        assert isinstance(got.value, ws_errors.InputError)


@pytest.mark.parametrize("source", ["/nonexistent/model.onnx", b"not a model"])
def test_load_mistakes_raise_onnxruntimes_classes(source):
    with pytest.raises(Exception) as want:
        onnxruntime.InferenceSession(source, providers=["CPUExecutionProvider"])
    with pytest.raises(Exception) as got:
        wort.InferenceSession(source)
    assert type(got.value).__name__ == type(want.value).__name__
    assert isinstance(got.value, ws_errors.ModelLoadError)


def test_index_out_of_range_is_invalid_argument():
    model = make_model([helper.make_node("Gather", ["x", "i"], ["y"])], [("x", F, [3]), ("i", I64, [1])],
                       [("y", F, [1])]).SerializeToString()
    feed = {"x": np.ones(3, np.float32), "i": np.array([7], np.int64)}
    with pytest.raises(ort_state.InvalidArgument):
        onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feed)
    with pytest.raises(wort.InvalidArgument) as got:
        wort.InferenceSession(model).run(None, feed)
    assert isinstance(got.value, ws_errors.IndexOutOfRangeError) and got.value.index == 7


def test_zipmap_outputs_are_lists_of_dicts_as_in_onnxruntime():
    nodes = [helper.make_node("LinearClassifier", ["x"], ["label", "scores"], domain="ai.onnx.ml",
                              coefficients=[1.0, -1.0, 0.5, 0.5], intercepts=[0.0, 0.1], classlabels_ints=[0, 1]),
             helper.make_node("ZipMap", ["scores"], ["probs"], domain="ai.onnx.ml", classlabels_int64s=[0, 1])]
    probs_type = helper.make_sequence_type_proto(
        helper.make_map_type_proto(I64, helper.make_tensor_type_proto(F, [])))
    graph = helper.make_graph(nodes, "classifier", [helper.make_tensor_value_info("x", F, [None, 2])],
                              [helper.make_tensor_value_info("label", I64, [None]),
                               helper.make_value_info("probs", probs_type)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 8
    data = model.SerializeToString()
    real = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    ours = wort.InferenceSession(data)
    assert _args(ours.get_outputs()) == _args(real.get_outputs())
    assert ours.get_outputs()[1].type == "seq(map(int64,tensor(float)))"
    feed = {"x": np.array([[1.0, 2.0], [0.5, -1.0]], np.float32)}
    (got_label, got_probs), (want_label, want_probs) = ours.run(None, feed), real.run(None, feed)
    np.testing.assert_array_equal(got_label, want_label)
    assert type(got_probs) is list and [type(p) for p in got_probs] == [dict, dict]
    for g, w in zip(got_probs, want_probs, strict=True):
        assert g.keys() == w.keys()
        np.testing.assert_allclose([g[k] for k in g], [w[k] for k in g], rtol=1e-5)
    ours.close()


def test_unsupported_operator_is_not_implemented():
    model = make_model([helper.make_node("NoSuchOp", ["x"], ["y"], domain="com.example")],
                       [("x", F, [1])], [("y", F, [1])], domains=[("com.example", 1)])
    with pytest.raises(wort.NotImplemented) as got:
        wort.InferenceSession(model.SerializeToString())
    assert isinstance(got.value, ws_errors.ModelLoadError)


def test_error_classes_cover_onnxruntimes():
    ours = {name for name in wort.__all__ if isinstance(getattr(wort, name), type)}
    theirs = {name for name in dir(ort_state)
              if isinstance(getattr(ort_state, name), type) and issubclass(getattr(ort_state, name), Exception)}
    assert theirs <= ours


def test_providers_map_to_backends(model_bytes):
    assert wort.InferenceSession(model_bytes).backend == "cpu"
    session = wort.InferenceSession(model_bytes, providers=[("CPUExecutionProvider", {"arena": "on"})])
    assert session.get_providers() == ["CPUExecutionProvider"]
    assert session.get_provider_options() == {"CPUExecutionProvider": {"arena": "on"}}
    assert session.backend == "cpu"
    assert "CPUExecutionProvider" in wort.get_available_providers()
    assert wort.get_device() == "CPU"
    # the onnxruntime API level it follows, which clients compare with releases; the build info names wgsentis
    from packaging.version import Version

    import wgsentis

    assert Version(wort.__version__) >= Version("1.20") and wort.get_version_string() == wort.__version__
    assert wgsentis.__version__ in wort.get_build_info()
    # Unknown and unavailable names: a UserWarning each and the next one (or the CPU) taken, as ONNX Runtime does.
    for providers in (["FooExecutionProvider"], ["CUDAExecutionProvider", "CPUExecutionProvider"]):
        with warnings.catch_warnings(record=True) as real_warnings:
            warnings.simplefilter("always")
            real = onnxruntime.InferenceSession(model_bytes, providers=providers)
        with warnings.catch_warnings(record=True) as our_warnings:
            warnings.simplefilter("always")
            ours = wort.InferenceSession(model_bytes, providers=providers)
        assert ours.get_providers() == real.get_providers() == ["CPUExecutionProvider"]
        assert {w.category for w in our_warnings} == {w.category for w in real_warnings} == {UserWarning}
    with pytest.raises(ValueError):
        wort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"], provider_options=[{}, {}])


def test_the_cpu_provider_opens_no_gpu_device(model_bytes, monkeypatch):
    monkeypatch.setattr(wort, "_gpu_ok", lambda: pytest.fail("a CPU session probed the GPU"))
    wort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"]).close()
    wort.InferenceSession(model_bytes).close()


def test_session_options_are_read(model_bytes):
    options = wort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = wort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3
    options.graph_optimization_level = wort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = wort.InferenceSession(model_bytes, options)
    assert session._worker.threads == 1 and session._worker.spin_wait is False
    assert session.get_session_options() is options
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert [m for m in wort.GraphOptimizationLevel.__members__] == list(onnxruntime.GraphOptimizationLevel.__members__)
    assert int(wort.GraphOptimizationLevel.ORT_ENABLE_ALL) == int(onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL)
    np.testing.assert_allclose(session.run(["y"], FEEDS)[0], FEEDS["x"] + np.array([0.5, -1.0, 2.0], np.float32))
    assert session.end_profiling() == ""
    session.close()


def _slow_model() -> onnx.ModelProto:
    """A Loop of 200000 iterations: long enough for terminate to land while it runs."""
    value_info, boolean = helper.make_tensor_value_info, TensorProto.BOOL
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["v_in", "one"], ["v_out"])],
        "body", [value_info("i", I64, []), value_info("cond_in", boolean, []), value_info("v_in", F, [1])],
        [value_info("cond_out", boolean, []), value_info("v_out", F, [1])],
        [onnx.numpy_helper.from_array(np.ones(1, np.float32), "one")])
    return make_model([helper.make_node("Loop", ["trip", "cond", "v0"], ["v"], body=body)],
                      [("v0", F, [1])], [("v", F, [1])],
                      initializers={"trip": np.array(200000, np.int64), "cond": np.array(True)})


def test_run_options_terminate():
    session = wort.InferenceSession(_slow_model().SerializeToString())
    feed = {"v0": np.zeros(1, np.float32)}
    refused = wort.RunOptions()
    refused.terminate = True
    real_options = onnxruntime.RunOptions()
    real_options.terminate = True
    with pytest.raises(ort_state.Fail):
        onnxruntime.InferenceSession(_symbolic_model().SerializeToString()).run(None, FEEDS, real_options)
    with pytest.raises(wort.Fail):  # set before the run: refused, as ONNX Runtime does
        session.run(None, feed, refused)
    # Set while the run is in progress: it stops at the next Loop iteration through the Worker's cancel path.
    running = wort.RunOptions()
    timer = threading.Timer(0.3, lambda: setattr(running, "terminate", True))
    started = time.monotonic()
    timer.start()
    with pytest.raises(wort.Fail) as stopped:
        session.run(None, feed, running)
    timer.join()
    assert isinstance(stopped.value, ws_errors.RunCancelledError)
    assert time.monotonic() - started < 20
    running.terminate = False  # usable again
    session.close()


def test_io_binding_on_cpu(sessions):
    real, ours = sessions
    results = []
    for session in (real, ours):
        binding = session.io_binding()
        binding.bind_cpu_input("x", FEEDS["x"])
        value_type = wort.OrtValue if session is ours else onnxruntime.OrtValue
        binding.bind_ortvalue_input("n", value_type.ortvalue_from_numpy(FEEDS["n"]))
        binding.bind_output("y")
        binding.bind_output("s")
        session.run_with_iobinding(binding)
        outs = binding.get_outputs()
        assert [o.shape() for o in outs] == [[2, 3], []] and outs[0].device_name() == "cpu"
        assert outs[0].data_type() == "tensor(float)"
        results.append(binding.copy_outputs_to_cpu())
    for g, w in zip(results[1], results[0], strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5)
    value = wort.OrtValue.ortvalue_from_numpy(FEEDS["x"])
    assert value.shape() == [2, 3] and value.device_name() == "cpu" and value.is_tensor()
    np.testing.assert_array_equal(value.numpy(), FEEDS["x"])


CLIENT = textwrap.dedent("""
    import numpy as np
    import onnxruntime as ort
    from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

    def client(path):
        s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        name = s.get_inputs()[0].name
        shape = [d if isinstance(d, int) else 1 for d in s.get_inputs()[0].shape]
        out = s.run(None, {name: np.ones(shape, np.float32)})
        try:
            s.run(["no such output"], {name: np.ones(shape, np.float32)})
        except InvalidArgument:
            pass
        return type(s), out
""")


def test_installed_runs_unchanged_client_code_and_restores_sys_modules():
    before = {k: v for k, v in sys.modules.items() if k == "onnxruntime" or k.startswith("onnxruntime.")}
    path = str(sample_model_path())
    with wort.installed(backend="cpu"):
        namespace: dict = {}
        exec(compile(CLIENT, "<ort client>", "exec"), namespace)
        session_type, outputs = namespace["client"](path)
        import onnxruntime as inside

        assert inside is wort
        assert sys.modules["onnxruntime.capi.onnxruntime_pybind11_state"].Fail is wort.Fail
    assert session_type is wort.InferenceSession
    want = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    feed = {want.get_inputs()[0].name: np.ones([d if isinstance(d, int) else 1 for d in want.get_inputs()[0].shape],
                                                np.float32)}
    for g, w in zip(outputs, want.run(None, feed), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    after = {k: v for k, v in sys.modules.items() if k == "onnxruntime" or k.startswith("onnxruntime.")}
    assert after.keys() == before.keys() and all(after[k] is before[k] for k in before)
    # Restored when the body raises too, with the default backend.
    with pytest.raises(KeyError), wort.installed(backend="cpu"):
        raise KeyError("body")
    after = {k: v for k, v in sys.modules.items() if k == "onnxruntime" or k.startswith("onnxruntime.")}
    assert after.keys() == before.keys() and all(after[k] is before[k] for k in before)
    handle = wort.install("cpu")  # the one-liner
    assert sys.modules["onnxruntime"] is wort
    handle.uninstall()
    assert sys.modules["onnxruntime"] is onnxruntime


@requires_gpu
@pytest.mark.parametrize("backend, provider", [("gpu-compute", "WebGPUExecutionProvider"),
                                               ("gpu-pixel", "WgsentisGpuPixelExecutionProvider")])
def test_gpu_providers_match_onnxruntime(model_bytes, backend, provider):
    real = onnxruntime.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    ours = wort.InferenceSession(model_bytes, providers=[provider, "CPUExecutionProvider"])
    assert ours.backend == backend and ours.get_providers() == [provider]
    for g, w in zip(ours.run(None, FEEDS), real.run(None, FEEDS), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    binding = ours.io_binding()
    for name, value in FEEDS.items():
        binding.bind_cpu_input(name, value)
    binding.bind_output("y", "webgpu")
    binding.bind_output("s", "cpu")
    ours.run_with_iobinding(binding)
    device_out, host_out = binding.get_outputs()
    assert device_out.device_name() == "webgpu" and host_out.device_name() == "cpu"
    want_y = real.run(["y"], FEEDS)[0]
    np.testing.assert_allclose(device_out.numpy(), want_y, rtol=1e-4, atol=1e-4)
    # The device output fed back as an input: passed device to device, the same answer as onnxruntime's.
    again = ours.io_binding()
    again.bind_ortvalue_input("x", device_out)
    again.bind_cpu_input("n", FEEDS["n"])
    again.bind_output("y", "webgpu")
    ours.run_with_iobinding(again)
    want_again = real.run(["y"], {"x": want_y, "n": FEEDS["n"]})[0]
    np.testing.assert_allclose(again.copy_outputs_to_cpu()[0], want_again, rtol=1e-4, atol=1e-4)
    ours.close()
    with wort.installed(backend=backend):
        import onnxruntime as facade

        session = facade.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
        assert session.backend == backend
        session.close()


# -- issue 32: the surface other onnxruntime clients reach -------------------------------------------------------
def test_ort_values_match_onnxruntime():
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    for runtime in (onnxruntime, wort):
        value = runtime.OrtValue.ortvalue_from_numpy(array.copy())
        pointer = value.data_ptr()
        value.update_inplace(array * 2)
        assert value.data_ptr() == pointer  # the same buffer, updated in place
        # onnxruntime 1.32's element_type() is the ONNX element type, an int.
        assert (value.element_type(), value.data_type(), value.shape(), value.tensor_size_in_bytes()) == \
            (TensorProto.FLOAT, "tensor(float)", [2, 3], 24), runtime
        assert value.numpy().tolist() == (array * 2).tolist()
        assert (value.is_tensor(), value.is_tensor_sequence(), value.is_sparse_tensor()) == (True, False, False)
        empty = runtime.OrtValue.ortvalue_from_shape_and_type([2, 4], TensorProto.FLOAT16)
        assert (empty.data_type(), empty.shape(), empty.numpy().dtype) == ("tensor(float16)", [2, 4], np.float16)
        assert runtime.OrtValue.ortvalue_from_shape_and_type([3], np.int64).numpy().dtype == np.int64
    with pytest.raises(wort.InvalidArgument, match="update_inplace"):
        wort.OrtValue.ortvalue_from_numpy(array).update_inplace(np.zeros(3, np.float32))


def test_session_surface_matches_onnxruntime(model_bytes, tmp_path):
    path = tmp_path / "model.onnx"
    path.write_bytes(model_bytes)
    for runtime in (onnxruntime, wort):
        from_path, from_bytes = runtime.InferenceSession(str(path)), runtime.InferenceSession(model_bytes)
        assert (from_path._model_path, from_path._model_bytes) == (str(path), None)
        assert (from_bytes._model_path, from_bytes._model_bytes) == (None, model_bytes)
        options = runtime.SessionOptions()
        assert (options.use_per_session_threads, str(options.execution_order), options.has_providers()) == \
            (True, "ExecutionOrder.DEFAULT", False)
        options.add_provider("CPUExecutionProvider", {})
        assert options.has_providers()
        assert runtime.InferenceSession(model_bytes, options).get_providers() == ["CPUExecutionProvider"]
        assert str(runtime.GraphOptimizationLevel.ORT_ENABLE_ALL) == "GraphOptimizationLevel.ORT_ENABLE_ALL"
        assert str(runtime.ExecutionMode.ORT_PARALLEL) == "ExecutionMode.ORT_PARALLEL"
        assert runtime.set_seed(7) is None
        assert isinstance(runtime.get_build_info(), str)


def test_run_async_calls_back_as_onnxruntime(model_bytes):
    results = {}
    for runtime in (onnxruntime, wort):
        session = runtime.InferenceSession(model_bytes)
        done = threading.Event()
        calls: list = []

        def callback(outputs, user_data, error, calls=calls, done=done):
            calls.append((outputs, user_data, error))
            if len(calls) == 2:
                done.set()

        session.run_async(["y"], FEEDS, callback, "ok")
        session.run_async(["y"], {**FEEDS, "x": FEEDS["x"].astype(np.float64)}, callback, "bad")
        assert done.wait(30), runtime
        results[runtime] = {data: (error != "", [o.tolist() for o in outputs]) for outputs, data, error in calls}
    assert results[wort] == results[onnxruntime]
    assert results[wort]["bad"] == (True, []) and results[wort]["ok"][0] is False


def test_installed_puts_the_cpu_provider_first(model_bytes):
    """A client that passes get_available_providers() (or takes its first) runs on the backend installed() names,
    not on the first GPU provider."""
    with wort.installed("cpu"):
        import onnxruntime as facade
        from onnxruntime.capi import _pybind_state

        assert facade.get_available_providers()[0] == "CPUExecutionProvider"
        assert _pybind_state.get_available_providers() == facade.get_available_providers()
        session = facade.InferenceSession(model_bytes, providers=facade.get_available_providers())
        assert (session.backend, session.get_providers()) == ("cpu", ["CPUExecutionProvider"])
    assert wort.get_available_providers()[-1] == "CPUExecutionProvider"  # outside, onnxruntime's order


def test_io_binding_host_pointers_and_preallocated_outputs_match_onnxruntime(model_bytes):
    """bind_input from a host pointer, bind_output into a host buffer, bind_ortvalue_output: as onnxruntime."""
    x = FEEDS["x"].copy()
    results = []
    for runtime in (onnxruntime, wort):
        session = runtime.InferenceSession(model_bytes)
        binding = session.io_binding()
        binding.bind_input("x", "cpu", 0, np.float32, list(x.shape), x.ctypes.data)
        binding.bind_cpu_input("n", FEEDS["n"])
        y = np.zeros((2, 3), np.float32)
        binding.bind_output("y", "cpu", 0, np.float32, list(y.shape), y.ctypes.data)
        s = runtime.OrtValue.ortvalue_from_numpy(np.zeros((), np.float32))
        binding.bind_ortvalue_output("s", s)
        session.run_with_iobinding(binding)
        got = [y.copy(), s.numpy().copy(), *(o.numpy().copy() for o in binding.get_outputs())]
        x[0, 0] += 10  # a bound pointer is read when the run starts: the next run sees the new value
        session.run_with_iobinding(binding)
        results.append([*got, y.copy(), s.numpy().copy()])
        x[0, 0] -= 10
    assert len(results[1]) == len(results[0]) == 6
    for ours, theirs in zip(results[1], results[0], strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)
    assert results[1][4][0, 0] == results[1][0][0, 0] + 10  # y after the second run
    binding = wort.InferenceSession(model_bytes).io_binding()
    with pytest.raises(wort.NotImplemented, match="cuda"):
        binding.bind_input("x", "cuda", 0, np.float32, [2, 3], x.ctypes.data)
    with pytest.raises(ValueError, match="element_type"):
        binding.bind_output("y", "cpu", 0, None, None, x.ctypes.data)


def test_negative_intra_op_threads_are_the_default_as_in_onnxruntime(model_bytes):
    for runtime in (onnxruntime, wort):
        options = runtime.SessionOptions()
        options.intra_op_num_threads = -1
        assert runtime.InferenceSession(model_bytes, options).run(["s"], FEEDS)[0] == pytest.approx(15.0)


@requires_gpu
def test_a_gpu_providers_device_id_picks_the_adapter(model_bytes):
    import wgsentis as ws

    last = len(ws.adapters()) - 1
    real = onnxruntime.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    for options in ({"deviceId": str(last)}, {"device_id": last}):
        ours = wort.InferenceSession(model_bytes, providers=[("WebGPUExecutionProvider", options)])
        assert ours._worker.adapter == last
        for g, w in zip(ours.run(None, FEEDS), real.run(None, FEEDS), strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    ours.set_providers(["WebGPUExecutionProvider"])  # no device_id: back on the default device
    assert ours._worker.adapter is None
    with pytest.raises(wort.InvalidArgument, match="device_id 'gpu1' is not a GPU index"):
        wort.InferenceSession(model_bytes, providers=[("WebGPUExecutionProvider", {"device_id": "gpu1"})])
    with pytest.raises(ws_errors.DeviceError, match=f"adapter {last + 1} is not one of"):
        wort.InferenceSession(model_bytes, providers=[("WebGPUExecutionProvider", {"deviceId": last + 1})])
    # the CPU provider has no device to pick: its device_id is ignored
    on_cpu = wort.InferenceSession(model_bytes, providers=[("CPUExecutionProvider", {"device_id": 3})])
    assert on_cpu._worker.adapter is None
