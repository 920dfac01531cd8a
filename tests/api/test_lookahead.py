"""Plans prepared ahead (backends/gpu/lookahead.py, issue 31): where the last four runs of a structure grew its inputs
by the same steps, the next size's plan is traced right after a run is submitted, and the next run replays it,
giving the bits of a worker that prepares nothing; a prediction that misses (another size, other values of an input
read on the host) records as before, and two misses in a row stop the predictions. The cache fed back as device
tensors (a decoder's loop) binds through stand-ins that hold no memory."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from helpers import F, make_model, requires_gpu
from onnx import TensorProto, helper

import wgsentis as ws
from wgsentis.backends.gpu.lookahead import SizeLookahead, next_signature, stand_in
from wgsentis.backends.gpu.report import RunReport

GPU_BACKENDS = ["gpu-compute", "gpu-pixel"]


def _sig(n: int) -> tuple:
    return (("mask", (1, n + 1), "<i8"), ("past", (1, 2, n, 4), "<f4"))


def test_four_runs_in_step_predict_the_fifth_and_nothing_else_does():
    history = [_sig(3), _sig(4), _sig(5)]
    assert next_signature(history, _sig(6)) == _sig(7)
    assert next_signature(history[1:], _sig(6)) is None  # three runs in step: not yet
    assert next_signature(history, _sig(7)) is None  # the last step differs
    assert next_signature([_sig(5)] * 3, _sig(5)) is None  # nothing grows
    shrinking = [_sig(9), _sig(7), _sig(5)]
    assert next_signature(shrinking, _sig(3)) == _sig(1)
    assert next_signature([_sig(7), _sig(5), _sig(3)], _sig(1)) is None  # would go below zero
    assert next_signature(history, (("mask", "list"),)) is None  # a sequence input predicts nothing


def test_the_lookahead_stops_after_two_misses_in_a_row():
    lookahead = SizeLookahead()
    structure = ("s",)
    for n in range(4):
        predicted = lookahead.observe(structure, _sig(n))
    assert predicted == _sig(4)
    lookahead._pending[structure] = predicted  # (as prepare leaves it)
    assert lookahead.observe(structure, _sig(9)) is None  # a miss: the step changed
    for n in (10, 11, 12):
        predicted = lookahead.observe(structure, _sig(n))
    assert predicted == _sig(13)
    lookahead._pending[structure] = predicted
    lookahead.observe(structure, _sig(20))  # a second miss in a row
    for n in (21, 22, 23, 24):
        assert lookahead.observe(structure, _sig(n)) is None
    assert SizeLookahead(enabled=False).observe(structure, _sig(1)) is None


def test_a_hit_clears_the_misses_of_its_own_structure_only():
    class _Plan:
        prepared_ahead = True

    lookahead = SizeLookahead()
    one, other = ("one",), ("other",)
    for structure in (one, other):
        lookahead._pending[structure] = _sig(5)
        lookahead.observe(structure, _sig(9))  # a first miss each
    lookahead.replayed(other, _Plan(), RunReport())  # a hit on the other structure
    assert lookahead._misses == {one: 1}
    lookahead._pending[one] = _sig(10)
    lookahead.observe(one, _sig(30))  # the second miss in a row of the first structure stops it
    assert one in lookahead._stopped and other not in lookahead._stopped


def test_stand_ins_keep_values_and_bounds_of_what_grows():
    class Plan:
        host_read_inputs = {"read": None}
        input_tensors = {}

    ids = np.array([[5, 70000]], np.int64)
    grown = stand_in(None, "ids", ids, (1, 4), Plan())
    assert grown.tolist() == [[5, 70000, 70000, 70000]]  # the last slice repeated: the same int64 bound
    read = stand_in(None, "read", np.array([[0.5, 2.0]], np.float32), (1, 3), Plan())
    assert read.tolist() == [[0.5, 2.0, 2.0]]  # read on the host: values, not zeros
    assert not stand_in(None, "x", np.ones((2, 3), np.float32), (2, 5), Plan()).any()  # only its shape matters
    same = np.ones((1, 1), np.int64)
    assert stand_in(None, "same", same, (1, 1), Plan()) is same
    assert stand_in(None, "cut", np.arange(6).reshape(1, 6), (1, 4), Plan()).tolist() == [[0, 1, 2, 3]]


def _cache_model() -> ws.Model:
    """A decoder step in miniature: past (1, 2, s, 4) and new (1, 2, 1, 4) -> present (Concat), attention of the new
    row over the present (scores, Softmax), an output of fixed shape and the present itself."""
    nodes = [helper.make_node("Concat", ["past", "new"], ["present"], axis=2),
             helper.make_node("Transpose", ["present"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["new", "kt"], ["scores"]),
             helper.make_node("Softmax", ["scores"], ["probs"], axis=-1),
             helper.make_node("MatMul", ["probs", "present"], ["y"])]
    return ws.load_model(make_model(nodes, [("past", F, [1, 2, "s", 4]), ("new", F, [1, 2, 1, 4])],
                                    [("y", F, None), ("present", F, None)]))


def _generate(worker: ws.Worker, steps: int, on_device: bool, rng_seed: int = 3) -> tuple[list, list]:
    rng = np.random.default_rng(rng_seed)
    past: object = np.zeros((1, 2, 0, 4), np.float32)
    ys, runs = [], []
    for _ in range(steps):
        outputs = worker.run({"past": past, "new": rng.standard_normal((1, 2, 1, 4), dtype=np.float32)},
                             on_device=on_device)
        ys.append(np.asarray(outputs["y"]))
        past = outputs["present"]
        runs.append(dict(worker.stats()["run"]))
    return ys, runs


@requires_gpu
@pytest.mark.parametrize("on_device", [False, True])
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_a_growing_cache_replays_plans_prepared_ahead_with_the_bits_of_a_worker_that_prepares_none(backend,
                                                                                                  on_device):
    model = _cache_model()
    with ws.Worker(model, backend, prepare_ahead=False) as plain:
        expected, plain_runs = _generate(plain, 12, on_device)
        assert plain.stats()["plans_prepared_ahead"] == 0
    assert all(r["recorded"] for r in plain_runs)
    with ws.Worker(model, backend) as worker:
        got, runs = _generate(worker, 12, on_device)
        stats = worker.stats()
    for step, (a, b) in enumerate(zip(got, expected, strict=True)):
        assert np.array_equal(a, b), step
    # Runs 0-3 in step predict run 4 onwards: each later run replays the plan prepared while the one before ran.
    assert [r["prepared_ahead"] for r in runs] == [False] * 4 + [True] * 8
    assert not any(r["recorded"] for r in runs[4:])
    assert all(r["ahead_ms"] > 0 for r in runs[3:])
    assert stats["plans_prepared_ahead"] == 9 and stats["prepared_plans_replayed"] == 8
    assert stats["plans_prepared_ahead_failed"] == 0
    # The plan prepared last is kept beside max_plans, evicting none of the others.
    assert stats["cached_plans"] <= stats["max_plans"] + 1


@requires_gpu
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_stand_ins_of_device_tensors_count_nothing_as_held(backend):
    model = _cache_model()
    held = {}
    for ahead in (False, True):
        with ws.Worker(model, backend, prepare_ahead=ahead) as worker:
            _generate(worker, 8, on_device=True)
            gc.collect()
            held[ahead] = worker.stats()["held_device_bytes"]
            assert worker.stats()["plans_prepared_ahead"] == (5 if ahead else 0)  # after runs 3 to 7
    # What the worker still holds (its last run's outputs, for peek_output), and not a byte more for the stand-ins.
    assert held[True] == held[False] > 0


@requires_gpu
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_a_missed_prediction_records_that_size_and_two_in_a_row_stop_the_lookahead(backend):
    model = _cache_model()
    rng = np.random.default_rng(4)
    lengths = [1, 2, 3, 4, 9, 10, 11, 12, 20, 21, 22, 23, 24, 25]
    feeds = {s: {"past": rng.standard_normal((1, 2, s, 4), dtype=np.float32),
                 "new": rng.standard_normal((1, 2, 1, 4), dtype=np.float32)} for s in set(lengths)}
    with ws.Worker(model, backend) as worker:
        runs = []
        for s in lengths:
            outputs = worker.run(feeds[s])
            with ws.Worker(model, "cpu") as cpu:
                expected = cpu.run(feeds[s])
            np.testing.assert_allclose(outputs["y"], expected["y"], rtol=1e-5, atol=1e-6)
            runs.append(dict(worker.stats()["run"], prepared=worker.stats()["plans_prepared_ahead"]))
    assert runs[4]["recorded"] and not runs[4]["prepared_ahead"]  # 5 was prepared; 9 came
    assert runs[8]["recorded"]  # 13 was prepared; 20 came: the second miss in a row
    assert runs[-1]["prepared"] == runs[8]["prepared"] == 2  # and nothing prepared since


@requires_gpu
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_a_prepared_plan_whose_host_read_values_differ_is_recorded_anew(backend):
    """x (1, n) float64 has no device type: its values are read on the host and baked into the plan. The stand-in
    repeats its last column; these runs' values differ, so each prepared plan is rejected and the run records."""
    nodes = [helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["xf", "b"], ["y"])]
    model = ws.load_model(make_model(nodes, [("x", TensorProto.DOUBLE, [1, "n"]), ("b", F, [1, "n"])],
                                     [("y", F, None)]))
    rng = np.random.default_rng(5)
    with ws.Worker(model, backend) as worker:
        for n in range(1, 10):
            x = rng.standard_normal((1, n))
            b = rng.standard_normal((1, n), dtype=np.float32)
            np.testing.assert_array_equal(worker.run({"x": x, "b": b})["y"], x.astype(np.float32) + b)
        stats = worker.stats()
    assert stats["prepared_plans_replayed"] == 0
    assert stats["plans_prepared_ahead"] == 2  # two rejected in a row: no more


@requires_gpu
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_nothing_is_prepared_for_a_single_plan_or_while_profiled(backend):
    model = _cache_model()
    with ws.Worker(model, backend, max_plans=1) as worker:
        _generate(worker, 7, on_device=False)
        assert worker.stats()["plans_prepared_ahead"] == 0
    with ws.Worker(model, backend, debug_groups=True) as worker:
        _generate(worker, 7, on_device=False)
        assert worker.stats()["plans_prepared_ahead"] == 0


def test_prepare_ahead_must_be_a_bool():
    with pytest.raises(ws.errors.InputError, match="prepare_ahead"):
        ws.Worker(_cache_model(), "cpu", prepare_ahead="yes")
