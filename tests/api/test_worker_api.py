"""The public API: loading, model info, add_output, Worker, deferred Tensor readback, stats."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import onnx
import pytest
from helpers import F, make_model, ort_outputs
from onnx import helper

import wgsentis as ws
from wgsentis.cli import sample_model_path
from wgsentis.backends import ProgramOptions, create_program
from wgsentis.errors import BackendNotAvailableError, InputError, TensorError


def _two_layer_model() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    return make_model(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
         helper.make_node("Relu", ["h"], ["y"], name="relu")],
        [("x", F, ["n", 4])], [("y", F, ["n", 3])],
        {"w": rng.standard_normal((4, 3)).astype(np.float32)},
    )


def test_load_from_path_bytes_and_proto_agree():
    path = sample_model_path()
    proto = onnx.load(str(path))
    models = [ws.load_model(path), ws.load_model(path.read_bytes()), ws.load_model(proto)]
    x = np.random.default_rng(0).random((2, 3, 32, 32), dtype=np.float32)
    outs = [ws.Worker(m, "cpu").run({"image": x})["probabilities"] for m in models]
    for out in outs[1:]:
        np.testing.assert_array_equal(outs[0], out)
    # and what they agree on is the model's answer: ONNX Runtime's
    np.testing.assert_allclose(outs[0], ort_outputs(proto, {"image": x})[0], rtol=1e-4, atol=1e-6)


def test_model_infos_keep_symbolic_dims():
    model = ws.load_model(sample_model_path())
    (inp,) = model.inputs
    assert inp.name == "image" and inp.dtype == np.float32 and inp.shape == ("batch", 3, 32, 32)
    assert [o.name for o in model.outputs] == ["probabilities"]
    assert all(layer.name and layer.op_type for layer in model.layers)


def test_add_output_by_tensor_and_by_layer_name():
    model = ws.load_model(_two_layer_model())
    assert model.add_output("h") == "h"
    x = np.ones((2, 4), np.float32)
    out = ws.Worker(model, "cpu").run({"x": x})
    np.testing.assert_allclose(out["h"], x @ model.imported.constants["w"], rtol=1e-6)
    model2 = ws.load_model(_two_layer_model())
    assert model2.add_output("mm") == "h"
    with pytest.raises(InputError, match="no tensor or layer"):
        model2.add_output("nope")


def test_add_output_of_a_tensor_removed_by_fusion():
    model = ws.load_model(sample_model_path())
    fused_ops = [layer.op_type for layer in model.layers]
    assert "BatchNormalization" not in fused_ops  # folded into the stem Conv
    model.add_output("stem")  # the Conv output before BatchNormalization
    x = np.random.default_rng(0).random((1, 3, 32, 32), dtype=np.float32)
    out = ws.Worker(model, "cpu").run({"image": x})
    import onnxruntime as ort

    proto = onnx.load(str(sample_model_path()))
    proto.graph.output.append(helper.make_tensor_value_info("stem", F, None))
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"image": x}), strict=True))
    np.testing.assert_allclose(out["stem"], ref["stem"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out["probabilities"], ref["probabilities"], rtol=1e-4, atol=1e-6)


def test_backend_names():
    model = ws.load_model(_two_layer_model())
    assert ws.Worker(model, ws.BackendType.CPU).backend is ws.BackendType.CPU
    assert ws.Worker(model, "GPU_PIXEL").backend is ws.BackendType.GPU_PIXEL  # made lazily: no device needed yet
    with pytest.raises(BackendNotAvailableError, match="not available yet"):
        create_program("gpu-vertex", model.graph, ProgramOptions())  # a name outside the factory table
    with pytest.raises(InputError, match="unknown backend 'tpu'"):
        ws.Worker(model, "tpu")
    with pytest.raises(InputError, match="threads"):
        ws.Worker(model, "cpu", threads=0)


def _slow_model(n: int = 6, size: int = 768) -> onnx.ModelProto:
    nodes = [helper.make_node("MatMul", [f"t{i}", "w"], [f"t{i + 1}"], name=f"mm{i}") for i in range(n)]
    w = (np.eye(size) * 0.999).astype(np.float32)
    return make_model(nodes, [("t0", F, [size, size])], [(f"t{n}", F, [size, size])], {"w": w})


def test_schedule_returns_before_the_work_is_done_and_readback_blocks():
    model = ws.load_model(_slow_model())
    x = np.ones((768, 768), np.float32)
    with ws.Worker(model, "cpu", threads=1) as worker:
        start = time.perf_counter()
        worker.schedule({"t0": x})
        t = worker.peek_output()
        scheduled = time.perf_counter() - start
        assert not t.is_ready
        host = t.readback_and_clone()
        total = time.perf_counter() - start
    assert scheduled < total / 3
    assert isinstance(host, ws.Tensor) and host.shape == (768, 768)
    np.testing.assert_allclose(host.download_to_array(), x * 0.999**6, rtol=1e-5)


def test_readback_request_polling_and_async():
    model = ws.load_model(_slow_model(3))
    x = np.ones((768, 768), np.float32)
    with ws.Worker(model, "cpu") as worker:
        worker.schedule({"t0": x})
        t = worker.peek_output()
        with pytest.raises(TensorError):
            ws.Tensor(np.zeros(1)).is_readback_request_done()
        t.readback_request()
        polls = 0
        while not t.is_readback_request_done():
            polls += 1
            time.sleep(0.001)
        assert polls > 0
        worker.schedule({"t0": x * 2})
        t2 = worker.peek_output()

        async def read() -> ws.Tensor:
            return await t2.readback_and_clone_async()

        result = asyncio.run(read())
        np.testing.assert_allclose(result.download_to_array(), 2 * x * 0.999**3, rtol=1e-5)
        # The first tensor was read back before the second run was scheduled: it holds the first run's
        # answer, and download_to_array is non-destructive (a second download gives the same values).
        for _ in range(2):
            np.testing.assert_allclose(t.download_to_array(), x * 0.999**3, rtol=1e-5)


def test_stats_keys_after_a_run():
    model = ws.load_model(_two_layer_model())
    with ws.Worker(model, "cpu") as worker:
        worker.run({"x": np.ones((1, 4), np.float32)})
        stats = worker.stats()
    for key in ("gpu_layers", "cpu_layers", "fallback_layers", "uploads", "downloads", "upload_bytes",
                "download_bytes", "peak_device_bytes"):
        assert key in stats
    assert stats["cpu_layers"] == ["mm"]  # Relu fused into the MatMul
    assert stats["fallback_layers"] == [] and stats["uploads"] == 0


def test_tensor_inputs_are_accepted():
    model = ws.load_model(_two_layer_model())
    x = np.arange(4, dtype=np.float32).reshape(1, 4) - 1.5
    with ws.Worker(model, "cpu") as worker:
        a = worker.run({"x": ws.Tensor(x)})["y"]
        b = worker.run({"x": x})["y"]
    np.testing.assert_array_equal(a, b)
    expected = np.maximum(x @ model.imported.constants["w"], 0)  # MatMul then Relu, in numpy
    assert (expected > 0).any() and (expected == 0).any()
    np.testing.assert_allclose(a, expected, rtol=1e-6)
