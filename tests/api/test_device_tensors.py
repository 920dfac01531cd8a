"""Tensors that stay on the device: ``run(..., on_device=True)`` and ``schedule(..., on_device=True)`` hand out Tensors
whose data is in device memory of their own; they are read only on demand, fed back (to the same worker or another
on the same device) without crossing the host, never written by a later run, and counted while held."""

from __future__ import annotations

import asyncio
import gc

import numpy as np
import pytest
from helpers import make_model, requires_gpu
from onnx import TensorProto, helper

import wgsentis as ws
from wgsentis.errors import InputError, ResourceLimitError

GPU_BACKENDS = [pytest.param("gpu-compute", marks=requires_gpu), pytest.param("gpu-pixel", marks=requires_gpu)]


def _cache_step_model():
    """A KV-cache step: present = Concat(past, new) along axis 2; y = ReduceSum(present * 2) over that axis."""
    f = TensorProto.FLOAT
    nodes = [helper.make_node("Concat", ["past", "new"], ["present"], axis=2),
             helper.make_node("Mul", ["present", "two"], ["scaled"]),
             helper.make_node("ReduceSum", ["scaled", "axes"], ["y"], keepdims=0)]
    model = make_model(nodes, [("past", f, [1, 4, "p", 8]), ("new", f, [1, 4, 1, 8])],
                       [("present", f, [1, 4, "t", 8]), ("y", f, [1, 4, 8])],
                       {"two": np.float32(2.0), "axes": np.array([2], np.int64)})
    return ws.load_model(model, name="cache_step")


def _steps(rng, count):
    return [rng.standard_normal((1, 4, 1, 8), dtype=np.float32) for _ in range(count)]


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_cache_fed_back_on_device_matches_host_runs(backend):
    model = _cache_step_model()
    news = _steps(np.random.default_rng(0), 6)
    with ws.Worker(model, backend) as host_worker, ws.Worker(model, backend) as device_worker:
        past_host = np.zeros((1, 4, 0, 8), np.float32)
        past_device: object = past_host
        for step, new in enumerate(news):
            expected = host_worker.run({"past": past_host, "new": new})
            outputs = device_worker.run({"past": past_device, "new": new}, on_device=True)
            present = outputs["present"]
            assert isinstance(present, ws.Tensor) and present.on_device
            assert present.shape == (1, 4, step + 1, 8) and present.dtype == np.float32  # no copy needed
            stats = device_worker.stats()
            # Only the new row went up (and the first step's empty host past); nothing came down.
            if step:
                assert stats["upload_bytes"] == new.nbytes, stats["transfers"]
            assert stats["download_bytes"] == 0
            np.testing.assert_array_equal(np.asarray(present), expected["present"])
            np.testing.assert_allclose(outputs["y"].download_to_array(), expected["y"], rtol=1e-6)
            past_host, past_device = expected["present"], present


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_a_later_run_never_writes_into_a_held_device_tensor(backend):
    model = _cache_step_model()
    past = np.ones((1, 4, 3, 8), np.float32)
    a, b = _steps(np.random.default_rng(1), 2)
    with ws.Worker(model, backend) as worker:
        first = worker.run({"past": past, "new": a}, on_device=True)["present"]
        for _ in range(3):  # the same plan replayed: its arenas are rewritten, the held tensor is not
            worker.run({"past": past, "new": b}, on_device=True)
            worker.run({"past": past, "new": b})
        np.testing.assert_array_equal(np.asarray(first), np.concatenate([past, a], axis=2))


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_device_output_feeds_another_worker_on_the_same_device(backend):
    f = TensorProto.FLOAT
    encoder = ws.load_model(make_model([helper.make_node("Tanh", ["x"], ["states"])], [("x", f, [2, 16])],
                                       [("states", f, [2, 16])]), name="encoder")
    decoder = ws.load_model(make_model([helper.make_node("MatMul", ["states", "w"], ["logits"])],
                                       [("states", f, [2, 16])], [("logits", f, [2, 5])],
                                       {"w": np.random.default_rng(2).standard_normal((16, 5)).astype(np.float32)}),
                            name="decoder")
    x = np.random.default_rng(3).standard_normal((2, 16), dtype=np.float32)
    with ws.Worker(encoder, backend) as enc, ws.Worker(decoder, backend) as dec, ws.Worker(decoder, "cpu") as ref:
        states = enc.run({"x": x}, on_device=True)["states"]
        logits = dec.run({"states": states})["logits"]
        assert dec.stats()["upload_bytes"] == 0  # bound on the device
        np.testing.assert_allclose(logits, ref.run({"states": np.tanh(x)})["logits"], rtol=1e-5, atol=1e-6)
        # The cpu worker reads it to the host, and gets the same values.
        np.testing.assert_allclose(ref.run({"states": states})["logits"], logits, rtol=1e-5, atol=1e-6)


@requires_gpu
def test_device_tensor_of_one_gpu_backend_feeds_the_other():
    model = _cache_step_model()
    past = np.random.default_rng(4).standard_normal((1, 4, 2, 8), dtype=np.float32)
    new, = _steps(np.random.default_rng(5), 1)
    with ws.Worker(model, "gpu-compute") as compute, ws.Worker(model, "gpu-pixel") as pixel:
        held = compute.run({"past": past, "new": new}, on_device=True)["present"]
        out = pixel.run({"past": held, "new": new})  # another storage: one copy through the host, counted
        assert any(t["kind"] == "download" and t["tensor"] == "past" for t in pixel.stats()["transfers"])
        np.testing.assert_array_equal(out["present"], np.concatenate([past, new, new], axis=2))


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_device_tensor_readback_api(backend):
    model = _cache_step_model()
    past = np.zeros((1, 4, 2, 8), np.float32)
    new, = _steps(np.random.default_rng(6), 1)
    expected = np.concatenate([past, new], axis=2)
    with ws.Worker(model, backend) as worker:
        worker.schedule({"past": past, "new": new}, on_device=True)
        present = worker.peek_output("present")
        present.readback_request()
        while not present.is_readback_request_done():
            pass
        assert present.on_device and "on the device" in repr(present)
        np.testing.assert_array_equal(present.readback_and_clone().download_to_array(), expected)
        later = worker.run({"past": past, "new": new}, on_device=True)["present"]
        clone = asyncio.run(later.readback_and_clone_async())
        assert not clone.on_device
        np.testing.assert_array_equal(clone.download_to_array(), expected)


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_held_device_tensors_are_counted_and_freed(backend):
    model = _cache_step_model()
    past = np.zeros((1, 4, 64, 8), np.float32)
    new, = _steps(np.random.default_rng(7), 1)
    gc.collect()  # device tensors other tests dropped
    with ws.Worker(model, backend) as worker:
        worker.run({"past": past, "new": new})
        before = worker.stats()["held_device_bytes"]
        held = [worker.run({"past": past, "new": new}, on_device=True) for _ in range(3)]
        grown = worker.stats()["held_device_bytes"]
        assert grown >= before + 3 * 4 * 65 * 8 * 4
        del held
        worker.run({"past": past, "new": new})  # the worker's peek_output outputs are this run's now
        gc.collect()
        assert worker.stats()["held_device_bytes"] == before


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_memory_budget_counts_held_device_tensors(backend):
    model = _cache_step_model()
    past = np.zeros((1, 4, 4096, 8), np.float32)  # 512 KiB
    new, = _steps(np.random.default_rng(8), 1)
    with ws.Worker(model, backend, memory_limit=4 << 20) as worker:
        held = [worker.run({"past": past, "new": new}, on_device=True) for _ in range(2)]
        with pytest.raises(ResourceLimitError, match=r"held by the caller|live on the device"):
            for _ in range(12):
                held.append(worker.run({"past": past, "new": new}, on_device=True))
        held.clear()
        gc.collect()
        worker.run({"past": past, "new": new})  # the budget is free again


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_device_tensor_of_the_wrong_dtype_or_shape_is_an_input_error(backend):
    model = _cache_step_model()
    f = TensorProto.FLOAT
    other = ws.load_model(make_model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.INT32)],
                                     [("x", f, [1, 4, 2, 8])], [("y", TensorProto.INT32, [1, 4, 2, 8])]), name="cast")
    with ws.Worker(model, backend) as worker, ws.Worker(other, backend) as caster:
        ints = caster.run({"x": np.zeros((1, 4, 2, 8), np.float32)}, on_device=True)["y"]
        with pytest.raises(InputError, match="input 'past' expects dtype float32, got int32"):
            worker.run({"past": ints, "new": np.zeros((1, 4, 1, 8), np.float32)})
        wrong = worker.run({"past": np.zeros((1, 4, 2, 8), np.float32), "new": np.zeros((1, 4, 1, 8), np.float32)},
                           on_device=True)["present"]
        with pytest.raises(InputError, match="input 'new' expects shape"):
            worker.run({"past": wrong, "new": wrong})


def test_cpu_backend_on_device_outputs_are_host_tensors():
    model = _cache_step_model()
    past = np.zeros((1, 4, 2, 8), np.float32)
    new, = _steps(np.random.default_rng(9), 1)
    with ws.Worker(model, "cpu") as worker:
        outputs = worker.run({"past": past, "new": new}, on_device=True)
        assert isinstance(outputs["present"], ws.Tensor) and not outputs["present"].on_device
        again = worker.run({"past": outputs["present"], "new": new})
        np.testing.assert_array_equal(again["present"], np.concatenate([past, new, new], axis=2))


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_symbolic_dimension_warning_points_at_the_callers_line_for_device_inputs(backend):
    """A device tensor input whose symbolic dim disagrees with another input's warns as an array does, and the
    warning names the caller's line (not a frame inside the worker)."""
    from wgsentis.errors import SymbolicDimensionWarning

    f = TensorProto.FLOAT
    model = ws.load_model(make_model([helper.make_node("Concat", ["a", "b"], ["y"], axis=0)],
                                     [("a", f, ["n"]), ("b", f, ["n"])], [("y", f, ["m"])]), name="two_n")
    with ws.Worker(model, backend) as worker:
        held = worker.run({"a": np.ones(2, np.float32), "b": np.ones(2, np.float32)}, on_device=True)["y"]
        # The device tensor is the input checked second: the one that warns.
        with pytest.warns(SymbolicDimensionWarning, match="dimension 'n' is 4 here but 3 in input 'a'") as said:
            y = worker.run({"a": np.arange(3, dtype=np.float32), "b": held})["y"]
    assert [w.filename for w in said] == [__file__]
    np.testing.assert_array_equal(y, [0, 1, 2, 1, 1, 1, 1])


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_stats_count_plans_recorded_and_those_for_new_sizes(backend):
    """stats() counts every plan recorded, and apart those for a size-only change of a structure seen before; a
    replay, and a run at a size whose plan is cached, records none."""
    model = _cache_step_model()
    new = np.ones((1, 4, 1, 8), np.float32)
    with ws.Worker(model, backend) as worker:
        counts = []
        for past_len in [0, 3, 3, 5, 0]:
            worker.run({"past": np.ones((1, 4, past_len, 8), np.float32), "new": new})
            stats = worker.stats()
            counts.append((stats["plans_recorded"], stats["plans_recorded_for_new_sizes"]))
    assert counts == [(1, 0), (2, 1), (2, 1), (3, 2), (3, 2)]
