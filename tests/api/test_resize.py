"""A new input size of a structure already traced is planned from that trace (backends/gpu/resize.py, issue 31
point 1): the layers it leaves as they were keep the base plan's steps and memory, the others are built again, and
every plan gives the bits of a program that saw only its size, however sizes come and go. Also: the shape values a
run that stopped part way computed are not taken for the next run's (backends/cpu.ShapeValues)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import F, make_model, requires_gpu
from onnx import TensorProto, helper

import wgsentis as ws
from wgsentis.errors import WgSentisError

I64 = TensorProto.INT64


def _attention_model():
    """q (1, n, 16), kv (1, s, 16): attention of q over s + n keys (what a new s changes: scores, softmax, the past's
    Concat), then a fixed 16-wide MLP and LayerNormalization (what it leaves as it was)."""
    rng = np.random.default_rng(7)
    weights = {"wq": rng.standard_normal((16, 16), dtype=np.float32),
               "w1": rng.standard_normal((16, 64), dtype=np.float32),
               "b1": rng.standard_normal(64, dtype=np.float32),
               "w2": rng.standard_normal((64, 16), dtype=np.float32),
               "g": rng.standard_normal(16, dtype=np.float32),
               "beta": rng.standard_normal(16, dtype=np.float32),
               "scale": np.array(0.25, np.float32)}
    nodes = [
        helper.make_node("MatMul", ["q", "wq"], ["qw"]),
        helper.make_node("Concat", ["kv", "qw"], ["keys"], axis=1),  # (1, s + 1, 16): the "present"
        helper.make_node("Transpose", ["keys"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["qw", "kt"], ["scores"]),
        helper.make_node("Mul", ["scores", "scale"], ["scaled"]),
        helper.make_node("Softmax", ["scaled"], ["probs"], axis=-1),
        helper.make_node("MatMul", ["probs", "keys"], ["attended"]),  # (1, n, 16) whatever s is
        helper.make_node("MatMul", ["attended", "w1"], ["h1"]),
        helper.make_node("Add", ["h1", "b1"], ["h2"]),
        helper.make_node("Relu", ["h2"], ["h3"]),
        helper.make_node("MatMul", ["h3", "w2"], ["h4"]),
        helper.make_node("Add", ["h4", "attended"], ["h5"]),
        helper.make_node("LayerNormalization", ["h5", "g", "beta"], ["y"], axis=-1),
    ]
    proto = make_model(nodes, [("q", F, [1, "n", 16]), ("kv", F, [1, "s", 16])], [("y", F, None), ("keys", F, None)],
                       weights)
    return ws.load_model(proto)


@requires_gpu
@pytest.mark.parametrize("backend", ["gpu-compute", "gpu-pixel"])
def test_a_resized_plan_gives_the_bits_of_a_program_that_saw_only_that_size(backend):
    model = _attention_model()
    rng = np.random.default_rng(8)
    lengths = [4, 9, 3, 17, 9, 4, 6]
    feeds = {s: {"q": rng.standard_normal((1, 1, 16), dtype=np.float32),
                 "kv": rng.standard_normal((1, s, 16), dtype=np.float32)} for s in sorted(set(lengths))}
    expected = {}
    for s, f in feeds.items():
        with ws.Worker(model, backend) as alone:
            expected[s] = alone.run(f)
    with ws.Worker(model, backend) as worker:
        kept = []
        for s in lengths:  # new lengths planned from the first one's trace, seen ones replayed, in any order
            outputs = worker.run(feeds[s])
            for name in ("y", "keys"):
                assert np.array_equal(outputs[name], expected[s][name]), (s, name)
            stats = worker.stats()
            kept.append((stats["plans_resized"], stats["gpu_layers_kept"]))
        # Four new lengths after the first were planned from its trace, each keeping the MLP past the attention.
        assert kept[-1][0] == 4, kept
        assert all(k >= 5 for resized, k in kept[1:4]), kept
        # The first length's plan, whose arenas the others share, still replays its own bits.
        again = worker.run(feeds[4])
        assert np.array_equal(again["y"], expected[4]["y"])


@requires_gpu
@pytest.mark.parametrize("backend", ["gpu-compute", "gpu-pixel"])
def test_a_prompt_then_one_token_a_step(backend):
    """A decoder's steps: a prompt of 3 queries, then one query a step over a cache that grows and, once, shrinks.
    The second step changes nearly every layer against the prompt's trace, so the third is traced in full and the
    later ones are planned from it (one of them smaller than it: its tensors lie in the larger ones' places, and the
    templates its builders leave must not bind more than their own tensors, as a later full trace stamps them);
    every step gives the bits of a program that saw only it."""
    model = _attention_model()
    rng = np.random.default_rng(10)
    steps = [(3, 2), (1, 5), (1, 6), (1, 4), (1, 8), (1, 9)]
    feeds = [{"q": rng.standard_normal((1, n, 16), dtype=np.float32),
              "kv": rng.standard_normal((1, s, 16), dtype=np.float32)} for n, s in steps]
    with ws.Worker(model, backend) as worker:
        resized = []
        for f in feeds:
            outputs = worker.run(f)
            with ws.Worker(model, backend) as alone:
                expected = alone.run(f)
            for name in ("y", "keys"):
                assert np.array_equal(outputs[name], expected[name]), (f["kv"].shape, name)
            resized.append(worker.stats()["plans_resized"])
        assert resized[-1] >= 3, resized



@requires_gpu
@pytest.mark.parametrize("backend", ["gpu-compute", "gpu-pixel"])
def test_runs_kept_as_the_last_resize_kept_them_until_something_else_changes(backend, monkeypatch):
    """The layers the last resize from a trace kept are kept run by run at the next (recording.keep_base_run), and
    a size that changes what they read (here the second chain's input, left as it was before) is decided layer by
    layer again: every size gives the bits of a program that saw only it."""
    from wgsentis.backends.gpu.recording import Recording

    kept_runs = []
    original = Recording.keep_base_run
    monkeypatch.setattr(Recording, "keep_base_run", lambda self, run: (kept_runs.append(run), original(self, run)))
    rng = np.random.default_rng(3)
    w = rng.standard_normal((8, 8), dtype=np.float32)
    nodes = [helper.make_node("MatMul", ["a", "w"], ["a1"]), helper.make_node("Relu", ["a1"], ["a2"]),
             helper.make_node("Mul", ["a2", "two"], ["ya"]),
             helper.make_node("MatMul", ["b", "w"], ["b1"]), helper.make_node("Sigmoid", ["b1"], ["b2"]),
             helper.make_node("Add", ["b2", "two"], ["b3"]), helper.make_node("Relu", ["b3"], ["yb"])]
    model = ws.load_model(make_model(nodes, [("a", F, ["n", 8]), ("b", F, ["m", 8])], [("ya", F, None),
                                     ("yb", F, None)], {"w": w, "two": np.array(2.0, np.float32)}))
    sizes = [(3, 3), (4, 3), (5, 3), (6, 3), (7, 4), (8, 4), (9, 5)]
    with ws.Worker(model, backend) as worker:
        used = []
        for n, m in sizes:
            feeds = {"a": rng.standard_normal((n, 8), dtype=np.float32),
                     "b": rng.standard_normal((m, 8), dtype=np.float32)}
            outputs = worker.run(feeds)
            with ws.Worker(model, backend) as alone:
                expected = alone.run(feeds)
            for name in ("ya", "yb"):
                assert np.array_equal(outputs[name], expected[name]), ((n, m), name)
            used.append(len(kept_runs))
        assert worker.stats()["plans_resized"] >= 3
    assert used[2] > used[1] and used[3] > used[2]  # (5, 3) and (6, 3): the second chain kept as one run


def _shape_chain_model():
    """x (1, s): its length through Shape, Gather, Unsqueeze and Concat into a Reshape target, with a Gather over a
    run input (``idx``) between the first shape layers and the rest, which an index past the table stops."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["length"], axis=0),
        helper.make_node("Gather", ["table", "idx"], ["picked"], axis=0),
        helper.make_node("Unsqueeze", ["length", "zero"], ["length1"]),
        helper.make_node("Concat", ["minus_one", "length1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
        helper.make_node("Add", ["y", "picked"], ["z"]),
    ]
    weights = {"one": np.array(1, np.int64), "zero": np.array([0], np.int64), "minus_one": np.array([-1], np.int64),
               "table": np.arange(8, dtype=np.float32)}
    proto = make_model(nodes, [("x", F, [1, "s"]), ("idx", I64, [])], [("z", F, None)], weights)
    return ws.load_model(proto)


@pytest.mark.parametrize("backend", ["cpu", pytest.param("gpu-compute", marks=requires_gpu),
                                     pytest.param("gpu-pixel", marks=requires_gpu)])
def test_shape_values_of_a_run_that_stopped_part_way_are_not_kept(backend):
    """A run at a new length that stops at a bad index (after the length's first shape layers ran again, before the
    rest) leaves those layers' values changed for the next run at that length: its Reshape target is the new
    length's, not the one of the run before."""
    model = _shape_chain_model()
    with ws.Worker(model, backend, threads=1) as worker:
        short = np.arange(3, dtype=np.float32).reshape(1, 3)
        assert np.array_equal(worker.run({"x": short, "idx": np.array(2, np.int64)})["z"], short + 2)
        longer = np.arange(5, dtype=np.float32).reshape(1, 5)
        with pytest.raises(WgSentisError):
            worker.run({"x": longer, "idx": np.array(99, np.int64)})
        assert np.array_equal(worker.run({"x": longer, "idx": np.array(1, np.int64)})["z"], longer + 1)
