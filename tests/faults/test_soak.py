"""A short soak (issue 18): a few hundred runs cycling input shapes keep the process RSS and the GPU objects
flat once every shape has been seen. ``tools/soak.py`` is the long version (10,000 runs by default).

Each soak runs in its own process, so that its RSS is its own and not the test session's."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import BACKENDS, requires_gpu
import soak




@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("model,shapes", [("sample", "1,2,3,4"), ("convnet", "1x16x16,2x24x20,1x32x32,3x8x12")])
def test_memory_and_gpu_objects_stay_flat_over_runs_of_varying_shapes(tmp_path, backend, model, shapes):
    report = tmp_path / "soak.json"
    done = subprocess.run([sys.executable, soak.__file__, "--backend", backend, "--model", model, "--shapes", shapes,
                           "--runs", "300", "--every", "100", "--json", str(report)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}"
    (result,) = json.loads(report.read_text())
    samples = result["samples"]
    assert [s["run"] for s in samples] == [0, 100, 200, 300]
    assert all(s["rss"] > 0 for s in samples)
    if backend != "cpu":
        counts = samples[-1]["gpu"]
        # One recorded plan per shape, replayed since, and at most one prepared ahead (backends/gpu/lookahead.py: the
        # batches 1, 2, 3, 4 predict a 5 that never comes; it stays the one prepared, nothing is traced again).
        assert len(shapes.split(",")) <= counts["plans"] <= len(shapes.split(",")) + 1, counts
        assert counts.get("wgpu Buffer", 0) > 0, counts  # wgpu's own counts were read


def test_the_soak_flags_growth():
    first = soak.Sample(0, 0.0, 100 << 20, {"wgpu Buffer": 20, "plans": 4})
    flat = soak.Sample(300, 1.0, 104 << 20, {"wgpu Buffer": 20, "plans": 4})
    grown = soak.Sample(300, 1.0, 106 << 20, {"wgpu Buffer": 22, "plans": 4})

    def result(last: soak.Sample) -> soak.SoakResult:
        out = soak.SoakResult("gpu-compute", 300, [(1, 3, 32, 32)], [first, last], 0.05)
        out.growth = soak.grown(first, last, 0.05)
        return out

    assert result(flat).ok
    bad = result(grown)
    assert not bad.ok and set(bad.growth) == {"rss", "wgpu Buffer"}
    assert "GREW" in soak.summary(bad) and "flat" in soak.summary(result(flat))


@requires_gpu
def test_plans_are_a_bounded_lru_so_ever_new_shapes_do_not_grow_device_memory():
    """A plan per input signature holds its own device buffers: past MAX_PLANS the least recently used goes,
    so a model fed ever new batch sizes keeps a bounded set (before: 100 sizes kept 100 plans, 134 MB)."""
    import numpy as np

    import wgsentis as ws
    from wgsentis.backends.gpu.planner import DEFAULT_MAX_PLANS as MAX_PLANS

    model = soak.convnet()
    # (Batches 1, 2, 3... in step would have the next prepared ahead, beside the LRU: see test_lookahead.py.)
    with ws.Worker(model, "gpu-compute", prepare_ahead=False) as worker, ws.Worker(model, "cpu") as oracle:
        program = worker.program
        for batch in range(1, MAX_PLANS + 5):
            x = np.random.default_rng(batch).random((batch, 3, 8, 8), dtype=np.float32)
            ref = oracle.run({"x": x})["y"]
            np.testing.assert_allclose(worker.run({"x": x})["y"], ref, rtol=1e-4, atol=1e-5)
        assert len(program.plans) == MAX_PLANS
        kept = list(program.plans)
        worker.run({"x": np.zeros((MAX_PLANS + 4, 3, 8, 8), np.float32)})  # the newest: a hit, moved last
        assert list(program.plans) == kept
        worker.run({"x": np.zeros((1, 3, 8, 8), np.float32)})  # evicted earlier: recorded again, evicts batch 5
        assert len(program.plans) == MAX_PLANS and next(iter(program.plans)) != kept[0]
