"""gpu-compute engine mechanics: pipeline keys, grid folding, uploads, record/replay, planned host
tensors, counted fallback transfers, deferred staging readback, and device errors."""

from __future__ import annotations

import time

import numpy as np
import pytest
from helpers import F, I64, make_model, requires_gpu
from onnx import helper

import wgsentis as ws
from wgsentis.backends import gpu_compute as gc
from wgsentis.backends.gpu import dtypes, streams, tensors
from wgsentis.backends.gpu.device import GPUContext
from wgsentis.errors import DeviceError


def test_pipeline_key_changes_with_each_ingredient():
    base = tensors.pipeline_key("compute/unary.wgsl", {"EXPR": "v"}, {"WG": 64}, [("f32", 2)])
    variants = [
        tensors.pipeline_key("compute/binary.wgsl", {"EXPR": "v"}, {"WG": 64}, [("f32", 2)]),  # program
        tensors.pipeline_key("compute/unary.wgsl", {"EXPR": "-v"}, {"WG": 64}, [("f32", 2)]),  # substitution
        tensors.pipeline_key("compute/unary.wgsl", {"EXPR": "v"}, {"WG": 128}, [("f32", 2)]),  # workgroup size
        tensors.pipeline_key("compute/unary.wgsl", {"EXPR": "v"}, {"WG": 64, "K": 2}, [("f32", 2)]),  # constant
        tensors.pipeline_key("compute/unary.wgsl", {"EXPR": "v"}, {"WG": 64}, [("i32", 2)]),  # input dtype
        tensors.pipeline_key("compute/unary.wgsl", {"EXPR": "v"}, {"WG": 64}, [("f32", 3)]),  # input rank
        tensors.pipeline_key("compute/unary.wgsl", {"EXPR": "v"}, {"WG": 64}, [("f32", 2)],
                             faults=True),  # fault buffer
    ]
    assert len({base, *variants}) == 1 + len(variants)
    assert tensors.pipeline_key("compute/unary.wgsl", {"EXPR": "v"}, {"WG": 64}, [("f32", 2)]) == base


def test_fold_groups_above_the_dimension_limit():
    assert tensors.fold_groups(100, 65535) == (100, 1, 1)
    x, y, z = tensors.fold_groups(200_000, 65535)
    assert x <= 65535 and y <= 65535 and z == 1 and x * y >= 200_000
    with pytest.raises(DeviceError):
        tensors.fold_groups(65535 * 65535 + 1, 65535)


def test_int64_upload_is_range_checked():
    np.testing.assert_array_equal(dtypes.to_device_array(np.array([1, -2], np.int64), "x"), [1, -2])
    assert dtypes.to_device_array(np.array([True, False]), "m").dtype == np.uint32
    with pytest.raises(dtypes.TooLargeForDevice, match="int32 range"):
        dtypes.to_device_array(np.array([2**40], np.int64), "big")
    with pytest.raises(DeviceError, match="float64"):
        dtypes.to_device_array(np.zeros(2), "d")


def test_no_adapter_gives_a_clear_device_error(monkeypatch):
    import wgpu

    monkeypatch.setattr(wgpu.gpu, "request_adapter_sync", lambda **kw: None)
    with pytest.raises(DeviceError, match=r"no GPU adapter found.*mesa-vulkan-drivers"):
        GPUContext()


def _chain_model():
    return make_model(
        [helper.make_node("Add", ["x", "b"], ["s"], name="add"),
         helper.make_node("Shape", ["x"], ["shp"], name="shape"),
         helper.make_node("Gather", ["shp", "zero"], ["n"], name="gather_n", axis=0),
         helper.make_node("Concat", ["n", "minus1"], ["newshape"], name="concat", axis=0),
         helper.make_node("Reshape", ["s", "newshape"], ["r"], name="reshape"),
         helper.make_node("Sigmoid", ["r"], ["y"], name="sigmoid")],
        [("x", F, ["n", 3, 4])], [("y", F, ["n", 12])],
        {"b": np.float32(0.5) * np.ones(4, np.float32), "zero": np.array([0], np.int64),
         "minus1": np.array([-1], np.int64)})


@requires_gpu
def test_shape_logic_is_planned_on_the_host_without_a_sync():
    model = ws.load_model(_chain_model())
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    ref = ws.Worker(model, "cpu").run({"x": x})["y"]
    with ws.Worker(model, "gpu-compute") as worker:
        out = worker.run({"x": x})["y"]
        stats = worker.stats()
    np.testing.assert_allclose(out, ref, rtol=1e-6)
    assert stats["fallback_layers"] == []
    assert set(stats["cpu_layers"]) == {"shape", "gather_n", "concat"}
    assert set(stats["gpu_layers"]) == {"add", "reshape", "sigmoid"}
    # one upload (x) and one download (y): nothing crossed in the middle of the GPU work
    assert (stats["uploads"], stats["downloads"]) == (1, 1)
    assert stats["upload_bytes"] == x.nbytes and stats["download_bytes"] == out.nbytes


@requires_gpu
def test_plan_replay_and_new_signature():
    model = ws.load_model(_chain_model())
    rng = np.random.default_rng(1)
    with ws.Worker(model, "gpu-compute") as worker:
        for shape in ((2, 3, 4), (2, 3, 4), (5, 3, 4), (2, 3, 4)):
            x = rng.standard_normal(shape).astype(np.float32)
            out = worker.run({"x": x})["y"]
            np.testing.assert_allclose(out, 1 / (1 + np.exp(-(x + 0.5).reshape(shape[0], 12))), rtol=1e-5)
        assert len(worker.program.plans) == 2


@ws.ops.register("HostOnlyNeg", 1, domain="test.wgsentis")
def _host_only_neg(ctx, x):
    return -x


@requires_gpu
def test_fallback_layer_syncs_with_counted_transfers():
    model = make_model(
        [helper.make_node("Relu", ["x"], ["a"], name="relu"),
         helper.make_node("HostOnlyNeg", ["a"], ["b"], name="neg_on_cpu", domain="test.wgsentis"),
         helper.make_node("Exp", ["b"], ["y"], name="exp")],
        [("x", F, [64])], [("y", F, [64])], domains=[("test.wgsentis", 1)])
    wg = ws.load_model(model)
    x = np.linspace(-2, 2, 64, dtype=np.float32)
    with ws.Worker(wg, "gpu-compute") as worker:
        for _ in range(2):  # recorded, then replayed
            out = worker.run({"x": x})["y"]
            np.testing.assert_allclose(out, np.exp(-np.maximum(x, 0)), rtol=1e-6)
            stats = worker.stats()
            assert stats["fallback_layers"] == ["neg_on_cpu"]
            assert stats["gpu_layers"] == ["relu", "exp"]
            assert (stats["uploads"], stats["downloads"]) == (2, 2)  # x, b up; a, y down
            kinds = [(t["kind"], t["tensor"], t["layer"]) for t in stats["transfers"]]
            assert ("download", "a", "neg_on_cpu") in kinds and ("upload", "b", "neg_on_cpu") in kinds


def _matmul_chain(n: int, layers: int = 8) -> ws.Model:
    """x @ W, ``layers`` times over, W a fixed (n, n) permutation: exact, and GPU work grows as n^3."""
    w = np.eye(n, dtype=np.float32)[::-1].copy()
    nodes = [helper.make_node("MatMul", [f"t{i}", "w"], [f"t{i + 1}"], name=f"matmul{i}") for i in range(layers)]
    return ws.load_model(make_model(nodes, [("t0", F, [n, n])], [(f"t{layers}", F, [n, n])],
                                    initializers={"w": w}))


@requires_gpu
@pytest.mark.parametrize("backend", ["gpu-compute", "gpu-pixel"])
def test_schedule_returns_before_the_gpu_is_done_and_readback_is_polled(backend):
    # Enough GPU work that the run is not dominated by encoding: the matrices grow until one blocking
    # run takes 20 ms (512 on lavapipe, 2048 on a large discrete GPU).
    for n in (128, 256, 512, 1024, 2048, 4096):
        model = _matmul_chain(n)
        x = np.random.default_rng(0).random((n, n), dtype=np.float32)
        worker = ws.Worker(model, backend)
        worker.run({"t0": x})  # record once
        start = time.perf_counter()
        worker.run({"t0": x})
        if time.perf_counter() - start >= 0.02:
            break
        worker.close()
    with worker:
        start = time.perf_counter()
        worker.schedule({"t0": x})
        t = worker.peek_output()
        scheduled = time.perf_counter() - start
        t.readback_request()
        assert not t.is_readback_request_done()
        polls = 0
        while not t.is_readback_request_done():
            polls += 1
            time.sleep(0.0005)
        total = time.perf_counter() - start
        assert polls > 0 and scheduled < total / 3, (n, scheduled, total)
        np.testing.assert_array_equal(t.download_to_array(), x)  # an even number of row reversals


@requires_gpu
@pytest.mark.parametrize("backend", ["gpu-compute", "gpu-pixel"])
def test_int64_values_outside_int32_fall_back_not_wrong(backend):
    model = make_model([helper.make_node("Add", ["a", "b"], ["y"], name="add")],
                       [("a", I64, [2]), ("b", I64, [2])], [("y", I64, [2])])
    with ws.Worker(ws.load_model(model), backend) as worker:
        out = worker.run({"a": np.array([2**40, 1], np.int64), "b": np.array([1, 2], np.int64)})["y"]
    np.testing.assert_array_equal(out, [2**40 + 1, 3])


@requires_gpu
@pytest.mark.parametrize("backend", ["gpu-compute", "gpu-pixel"])
def test_device_info_in_stats(backend):
    model = ws.load_model(make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [4])], [("y", F, [4])]))
    with ws.Worker(model, backend) as worker:
        worker.run({"x": np.ones(4, np.float32)})
        info = worker.stats()["device"]
    assert info["name"] and info["backend"] and "max-storage-buffer-binding-size" in info["limits"]




@requires_gpu
@pytest.mark.parametrize("backend", ["gpu-compute", "gpu-pixel"])
def test_random_ops_are_not_baked_into_the_replayed_plan(backend):
    model = make_model([helper.make_node("RandomUniform", [], ["r"], name="rand", shape=[64]),
                        helper.make_node("Add", ["x", "r"], ["y"], name="add")],
                       [("x", F, [64])], [("y", F, [64])])
    with ws.Worker(ws.load_model(model), backend) as worker:
        x = np.zeros(64, np.float32)
        first, second = worker.run({"x": x})["y"], worker.run({"x": x})["y"]
        assert worker.stats()["fallback_layers"] == ["rand"]
    assert not np.array_equal(first, second)
    assert ((0 <= first) & (first < 1)).all()


@requires_gpu
def test_constant_matrix_as_texture_reads_back():
    from wgsentis.backends.gpu.device import get_context

    model = ws.load_model(make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [1])], [("y", F, [1])]))
    program = gc.ComputeProgram(model.graph)
    rec = gc.Recorder(program)
    matrix = np.arange(3 * 5, dtype=np.float32).reshape(3, 5)
    tex = rec.texture(matrix, "m")
    assert rec.texture(matrix, "m") is tex  # uploaded once
    out = rec.alloc((3, 5))
    rec.dispatch("compute/texture_copy.wgsl", [], [out], [15, 5], 15, textures=[tex])
    ctx = get_context()
    encoder = ctx.device.create_command_encoder()
    cpass = encoder.begin_compute_pass()
    for d in rec.steps:
        cpass.set_pipeline(d.pipeline)
        cpass.set_bind_group(0, d.bind_group)
        cpass.dispatch_workgroups(*d.groups)
    cpass.end()
    np.testing.assert_array_equal(program.download([out], encoder, "test")[0], matrix)
    too_big = np.zeros((ctx.limits["max-texture-dimension-2d"] + 1, 4), np.float32)
    assert rec.texture(too_big, "big") is None


@requires_gpu
def test_scratch_textures_are_slots_shared_by_layers_and_grown_to_the_largest_request():
    from wgsentis.backends.gpu.tensors import LINEAR_TEXELS

    model = ws.load_model(make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [1])], [("y", F, [1])]))
    program = gc.ComputeProgram(model.graph)
    rec = gc.Recorder(program)
    rec.layer_index = 0
    first = rec.scratch_texture(64, 100)  # 1600 texels: two rows of a linear texture
    assert first.shape == (2, 4 * LINEAR_TEXELS)
    second = rec.scratch_texture(32, 40)
    assert second is not first  # the layer holds `first` already: its second request gets slot 1
    rec.layer_index = 1  # the next layer: its first request is slot 0 again, whatever its shape
    assert rec.scratch_texture(1, 4000) is first and not program.scratch.grown
    rec.layer_index = 2
    grown = rec.scratch_texture(512, 100)  # past slot 0's texels: the slot gets a taller texture
    assert grown is first and first.shape[0] == 13 and program.scratch.grown
    assert program.scratch.nbytes == (13 + 1) * LINEAR_TEXELS * 16  # two slots, each its largest request
    rec.layer_index = 3
    limit = program.ctx.limits["max-texture-dimension-2d"]
    assert rec.scratch_texture(limit * LINEAR_TEXELS + 1, 4) is None
    program.close()


@requires_gpu
def test_a_grown_scratch_slot_is_rebound_in_every_cached_plan():
    """Batch 1 records with small scratch textures, batch 4 grows them; the batch-1 plan, replayed after, binds the
    grown texture (its old bind groups would still work, but would keep the old texture alive) and is right."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((8, 3, 3, 3), dtype=np.float32)
    model = ws.load_model(make_model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
                                     [("x", F, ["n", 3, 32, 32])], [("y", F, None)], {"w": w}))
    small, large = (rng.standard_normal((b, 3, 32, 32), dtype=np.float32) for b in (1, 4))
    with ws.Worker(model, "gpu-compute") as worker, ws.Worker(model, "cpu") as oracle:
        worker.run({"x": small})
        program = worker.program
        plan = program.last_plan
        scratch = {id(t) for t in program.scratch.slots}
        textured = [step for step in plan.steps if any(id(r) in scratch for r in getattr(step, "extra", []))]
        assert textured  # the convolution reads an operand from a scratch texture
        groups = [step.bind_group for step in textured]
        before = worker.stats()["intermediate_bytes"]
        np.testing.assert_allclose(worker.run({"x": large})["y"], oracle.run({"x": large})["y"], rtol=1e-4, atol=1e-4)
        assert worker.stats()["intermediate_bytes"] > before
        assert all(step.bind_group is not old for step, old in zip(textured, groups, strict=True))
        np.testing.assert_allclose(worker.run({"x": small})["y"], oracle.run({"x": small})["y"], rtol=1e-4, atol=1e-4)


@requires_gpu
def test_plan_rerecorded_when_a_host_read_input_value_changes():
    model = make_model([helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
                        helper.make_node("Relu", ["r"], ["y"], name="relu")],
                       [("x", F, [12]), ("shape", I64, [2])], [("y", F, None)])
    x = np.arange(-6, 6, dtype=np.float32)
    with ws.Worker(ws.load_model(model), "gpu-compute") as worker:
        for shape in ([3, 4], [3, 4], [2, 6], [4, 3]):
            out = worker.run({"x": x, "shape": np.array(shape, np.int64)})["y"]
            assert out.shape == tuple(shape)
            np.testing.assert_array_equal(out, np.maximum(x, 0).reshape(shape))
            assert worker.stats()["fallback_layers"] == []


@requires_gpu
@pytest.mark.parametrize("inside", [True, False])
def test_profiled_replay_times_every_gpu_layer(inside):
    # lavapipe writes timestamps inside passes; the other scheme (a timestamped pass per layer, what adapters
    # without that feature get) is asked for explicitly.
    nodes = [helper.make_node("Sin", ["t0"], ["t1"], name="sin"),
             helper.make_node("Concat", ["t1", "t0"], ["t2"], name="concat", axis=0),  # a buffer copy
             helper.make_node("Relu", ["t2"], ["t3"], name="relu")]
    model = ws.load_model(make_model(nodes, [("t0", F, [4096])], [("t3", F, [8192])]))
    x = np.linspace(-1, 1, 4096, dtype=np.float32)
    with ws.Worker(model, "gpu-compute") as worker:
        worker.run({"t0": x})
        program = worker.program
        program.set_timestamps(True, pass_per_layer=not inside)
        out = worker.run({"t0": x})["t3"]
        times = program.last_run.layer_gpu_ns
    # WGSL's sin is not correctly rounded: within 2^-11 on [-pi, pi] by the spec (NVIDIA's: 3.3e-7 here).
    np.testing.assert_allclose(out, np.maximum(np.concatenate([np.sin(x), x]), 0), rtol=0, atol=2.0**-11)
    assert times[0] > 0 and times[2] > 0  # sin and relu, timed on the GPU
    if inside:
        assert times[1] > 0  # the copy, timed on the encoder between the passes
    else:
        # The copy opened no pass, so its timestamp pair was given back: a pair resolved but never
        # written hung NVIDIA's driver (the readback never completed).
        assert 1 not in times


def test_wgsl_includes_expand_once_and_cycles_are_named(tmp_path, monkeypatch):
    """The test shaders live in a package root of their own under tmp_path: nothing is written into the
    package's wgsl/ folder (a shared working tree, perhaps read-only), nor left in its source cache."""
    from types import SimpleNamespace

    from wgsentis.backends.gpu import device

    def package_root(package: str):
        assert package == "wgsentis"
        return tmp_path

    folder = tmp_path / "wgsl" / "compute"
    folder.mkdir(parents=True)
    monkeypatch.setattr(device, "resources", SimpleNamespace(files=package_root))
    monkeypatch.setattr(device, "_source_cache", {})
    files = {
        "_t_top.wgsl": '#include "compute/_t_a.wgsl"\n#include "compute/_t_b.wgsl"\nTOP\n',
        "_t_a.wgsl": '#include "compute/_t_shared.wgsl"\nA\n',
        "_t_b.wgsl": '#include "compute/_t_shared.wgsl"\nB\n',
        "_t_shared.wgsl": "SHARED\n",
        "_t_loop1.wgsl": '#include "compute/_t_loop2.wgsl"\n',
        "_t_loop2.wgsl": '#include "compute/_t_loop1.wgsl"\n',
    }
    for name, text in files.items():
        (folder / name).write_text(text)
    text = device.wgsl_source("compute/_t_top.wgsl")
    assert text.count("SHARED") == 1 and text.index("SHARED") < text.index("A") < text.index("B")
    with pytest.raises(DeviceError, match=r"include cycle: compute/_t_loop1.wgsl -> compute/_t_loop2.wgsl "
                                          r"-> compute/_t_loop1.wgsl"):
        device.wgsl_source("compute/_t_loop1.wgsl")
    with pytest.raises(DeviceError, match="missing from the package"):
        device.wgsl_source("compute/_t_absent.wgsl")


@requires_gpu
@pytest.mark.parametrize("native", [True, False])
def test_replay_encodes_through_native_calls_or_public_methods(native, monkeypatch):
    """Replays encode dispatches through wgpu-native's calls where this wgpu-py exposes them (it does:
    the fast path must not silently fall away) and through wgpu-py's public methods otherwise
    (``native_calls=False``); both give the same answer."""
    from wgsentis.cli import sample_model_path

    assert streams._native_pass_calls() is not None and streams._native_pass_calls(checked=False) is not None
    model = ws.load_model(str(sample_model_path()))
    feeds = {"image": np.random.default_rng(3).random((1, 3, 32, 32), dtype=np.float32)}
    expected = ws.Worker(model, "cpu").run(feeds)
    program = gc.ComputeProgram(model.graph, native_calls=native)
    _ = program.ctx.division_function  # the device's one-off probe binds through the public method: done first
    public_binds: list[str] = []  # bind groups made through wgpu-py's public method
    device_type = type(program.ctx.device)
    public = device_type.create_bind_group

    def spy(self, *args, **kwargs):
        public_binds.append(kwargs.get("label", ""))
        return public(self, *args, **kwargs)

    monkeypatch.setattr(device_type, "create_bind_group", spy)
    try:
        assert (program.make_stream(False).native is not None) == native
        for _ in range(3):  # the traced plan's first run, then replays
            got = program.execute(feeds).wait()
            for name, value in expected.items():
                np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-5)
        assert bool(public_binds) != native  # the steps' bind groups too follow native_calls
    finally:
        program.close()


def test_a_readback_the_gpu_never_completes_raises_instead_of_hanging():
    import threading

    from wgsentis.backends.gpu.device import wait_mapped

    class NeverMapped:  # a map_async promise whose callback never fires (a hung device)
        _state = "pending"
        _thread_event = threading.Event()

        def sync_wait(self):
            raise AssertionError("would block forever")

    start = time.perf_counter()
    with pytest.raises(DeviceError, match=r"outputs y.*within 0.05 s.*hung"):
        wait_mapped(NeverMapped(), "the outputs y", timeout_s=0.05)
    assert time.perf_counter() - start < 5


def test_pack_params_words_are_numpys_float32_and_u32_bit_patterns():
    """A dispatch's uniform words: floats rounded to float32 (infinity past its range, NaN kept), integers wrapped
    to u32, the rest zero, exactly as numpy converts them."""
    from wgsentis.backends.gpu.tensors import PARAM_WORDS, pack_params

    values = [1.5, -0.0, 1e39, -1e39, float("nan"), float("inf"), 3.4028235e38, 1e-46, 0.1, np.float32(2.5),
              np.float64(-7.25), 7, -1, 2**33 + 5, True, np.int64(-3)]
    words = pack_params(values, "test")
    with np.errstate(over="ignore"):
        want = [int(np.array(v, np.float32).view(np.uint32)) if isinstance(v, float | np.floating)
                else int(v) & 0xFFFFFFFF for v in values]
    assert words.dtype == np.uint32 and words.size == PARAM_WORDS
    assert [int(w) for w in words[:len(values)]] == want
    assert not words[len(values):].any()
