"""Device memory a GPU worker holds (issue 19): plans kept in a bounded LRU, intermediates laid out in arenas
by the planner, and everything a worker holds given back by ``close()``."""

from __future__ import annotations

import gc
import itertools
import subprocess
import sys

import numpy as np
import pytest
import soak
import worker_churn
from helpers import requires_gpu

import wgsentis as ws
from wgsentis.backends.gpu.planner import assign_offsets, live_peak, step_conflicts
from wgsentis.backends.gpu.tensors import Allocation

pytestmark = requires_gpu


def _wgpu_bytes(worker: ws.Worker) -> int:
    gc.collect()  # dropped plans are freed when their Python objects go
    return soak.gpu_counts(worker).get("wgpu total bytes", 0)


def test_fifty_shapes_keep_device_memory_bounded_by_the_plan_lru():
    """50 distinct input shapes in random order: at most ``max_plans`` plans are kept, device memory stops
    growing once the LRU is full, and it is a fraction of what keeping every plan holds."""
    model = soak.convnet()
    shapes = [(b, 3, h, w) for b, h, w in itertools.product((1, 2), range(8, 13), range(8, 13))]
    np.random.default_rng(5).shuffle(shapes)
    held: dict[int, list[int]] = {}
    for max_plans in (4, 50):
        with ws.Worker(model, "gpu-compute", max_plans=max_plans) as worker, ws.Worker(model, "cpu") as oracle:
            held[max_plans] = []
            for k, shape in enumerate(shapes):
                x = np.random.default_rng(k).random(shape, dtype=np.float32)
                np.testing.assert_allclose(worker.run({"x": x})["y"], oracle.run({"x": x})["y"], rtol=1e-4, atol=1e-5)
                stats = worker.stats()
                assert stats["cached_plans"] == min(k + 1, max_plans) and stats["max_plans"] == max_plans
                held[max_plans].append(_wgpu_bytes(worker))
    bounded, unbounded = held[4], held[50]
    # Every plan kept: memory grows with the shapes seen (less than each plan's full arenas: a size planned from its
    # structure's base trace shares the base's arenas and holds only what changed, backends/gpu/resize.py).
    assert unbounded[-1] > 3 * bounded[-1]
    # Once the LRU is full the level is stationary: the second half holds no more than the first.
    assert max(bounded[25:]) <= 1.25 * max(bounded[4:25]), bounded


def test_the_planner_packs_lifetimes_and_keeps_conflicting_tensors_apart():
    """Tensors whose lifetimes do not meet share bytes; tensors one step reads and writes get different arenas
    (WebGPU: a buffer is read-only or writable within a dispatch); the result is within 1.5x of the live set."""

    class FakeBuffer:
        size = 1 << 20

    def alloc(nbytes: int, born: int, dies: int) -> Allocation:
        a = Allocation(FakeBuffer(), nbytes, reserved=nbytes, born=born)
        a.dies = dies
        return a

    # A chain x -> a -> b -> c, each read by the next layer only, and c kept to the end.
    x, a, b, c = alloc(4096, -1, 0), alloc(8192, 0, 1), alloc(4096, 1, 2), alloc(8192, 2, 3)
    c.dies = None
    allocs = [x, a, b, c]

    class Step:
        def __init__(self, reads: list[Allocation], writes: list[Allocation]) -> None:
            self.storage = [(t, t.reserved) for t in [*reads, *writes]]
            self.reads = len(reads)

    steps = [Step([x], [a]), Step([a], [b]), Step([b], [c])]
    conflicts = step_conflicts(steps, allocs)
    assert conflicts[1] == {0, 2} and conflicts[3] == {2}
    where = assign_offsets(allocs, 3, 1 << 30, conflicts)
    for i, j in [(0, 1), (1, 2), (2, 3)]:
        assert where[i][0] != where[j][0], where  # producer and consumer never share an arena
    assert where[1] == where[3]  # a and c: same arena and offset, their lifetimes do not meet
    extent: dict[int, int] = {}
    for t, (arena, offset) in zip(allocs, where, strict=True):
        extent[arena] = max(extent.get(arena, 0), offset + t.reserved)
    assert sum(extent.values()) <= 1.5 * live_peak(allocs, 3, {})


def test_later_plans_lay_out_arenas_in_the_order_that_won_the_first(monkeypatch):
    """A program's first plan is laid out in every planner order and keeps the smallest; a new size's plan only in
    that order (half the planner's work on a decoder's every step), with the same results as a program that saw
    only that size."""
    from wgsentis.backends.gpu import planner

    orders: list[str] = []

    def counting(allocs, end, capacity, conflicts=None, order=planner.ORDERS[0]):
        orders.append(order)
        return assign_offsets(allocs, end, capacity, conflicts, order)

    monkeypatch.setattr(planner, "assign_offsets", counting)
    model = soak.convnet()
    xs = [np.random.default_rng(k).random((1, 3, h, h), dtype=np.float32) for k, h in enumerate((9, 12, 10))]
    with ws.Worker(model, "gpu-compute") as worker:
        first = worker.run({"x": xs[0]})["y"]
        assert sorted(orders) == sorted(planner.ORDERS)
        orders.clear()
        later = [worker.run({"x": x})["y"] for x in xs[1:]]
        assert len(orders) == 2 and len(set(orders)) == 1 and orders[0] in planner.ORDERS, orders
    for x, got in zip(xs, [first, *later], strict=True):
        with ws.Worker(model, "gpu-compute") as alone:
            np.testing.assert_array_equal(got, alone.run({"x": x})["y"])


def test_small_tensors_alive_at_once_share_arenas():
    """3000 1 KiB tensors alive together (a quantized LSTM's kept states): appending to an arena costs the same
    bytes as opening one, so a handful of arenas hold them, not one buffer each (it was 435 for a 200-step
    BiLSTM, and the planner's time went with arenas x tensors)."""
    allocs = []
    for k in range(3000):
        a = Allocation(None, 1024, reserved=1024, born=k)
        a.dies = None
        allocs.append(a)
    where = assign_offsets(allocs, 3000, 1 << 30)
    assert len({arena for arena, _ in where}) <= 2
    assert len(set(where)) == len(where)  # every one its own bytes: they are all alive at the end


@pytest.mark.parametrize("backend,name", [("gpu-compute", "squeezenet"), ("gpu-pixel", "squeezenet"),
                                          ("gpu-pixel", "ppocr_cls"), ("gpu-pixel", "orientation"),
                                          ("gpu-pixel", "shufflenet"),
                                          pytest.param("gpu-pixel", "bvlc_alexnet", marks=pytest.mark.slow),
                                          pytest.param("gpu-pixel", "resnet50", marks=pytest.mark.slow),
                                          pytest.param("gpu-pixel", "zfnet512", marks=pytest.mark.slow),
                                          pytest.param("gpu-pixel", "ppocr_det", marks=pytest.mark.slow)])
def test_intermediates_fit_within_one_and_a_half_live_sets(backend, name):
    """The planner's target on a real network: arenas and scratch textures at most 1.5x the largest live set
    (live tensors plus the layer's own scratch), replayed results unchanged. gpu-pixel shares a texture between
    tensors of any size of one format (a tensor in the corner of a larger texture, drawn through a viewport of its
    own size); shared by exact size only, PP-OCR cls took 5.0x, and ResNet-50 and AlexNet 1.55x before the textures
    of a many-target draw could grow together; PP-OCR det 1.71x before its large convs drew in chunks."""
    import zoo

    proto = zoo.load_proto(name, dense=True)  # real-valued weights: the shipped ones make a flat softmax
    model = ws.load_model(proto)
    feeds = zoo.input_feeds(name, proto)
    with ws.Worker(model, backend) as worker, ws.Worker(model, "cpu") as oracle:
        first = worker.run(feeds)
        again = worker.run(feeds)  # the replay, on the planned arenas
        want = oracle.run(feeds)
        stats = worker.stats()
    for out, value in want.items():
        np.testing.assert_allclose(first[out], value, rtol=1e-3, atol=1e-4)
        np.testing.assert_array_equal(again[out], first[out])
    assert 0 < stats["intermediate_lower_bound_bytes"] <= stats["intermediate_bytes"]
    assert stats["intermediate_bytes"] <= 1.5 * stats["intermediate_lower_bound_bytes"], stats


def test_texture_packing_keeps_lifetimes_apart_and_draws_one_size():
    """The packing's rules on a made-up plan: tensors alive at once never share a texture, nor do a tensor and
    one a draw renders while reading it; every tensor fits its texture; the tensors of a many-target draw get
    textures of one size that no later tensor grows; a small tensor takes a free larger texture."""
    from wgsentis.backends.gpu_pixel import _TexturePacking
    from wgsentis.backends.pixel_layout import TextureLayout

    def layout(w, h):
        return TextureLayout((h, 4 * w), 1, np.dtype(np.float32), w, h)

    items = [
        (layout(64, 64), 0, 1, [0]),
        (layout(32, 16), 1, 2, [1, 2, 3]),  # three tiles of one draw
        (layout(16, 16), 2, 3, [4]),  # fits in tensor 0's texture, free from tick 2
        (layout(128, 8), 3, 4, [5]),  # wider than every texture: grows one, or gets its own
        (layout(16, 16), 3, 3, [6]),  # reads nothing but conflicts with 4 (drawn from it)
        (layout(32, 16), 5, 5, [7, 8, 9]),  # three tiles again: the first set, free by now
    ]
    packed = _TexturePacking(items, {4: {6}, 6: {4}})
    home = {tensor: t for t in packed.textures for tensor in t.members}
    assert sorted(home) == list(range(10))
    spans = {tensor: (born, dies) for _l, born, dies, bundle in items for tensor in bundle}
    sizes = {tensor: (lay.width, lay.height) for lay, _b, _d, bundle in items for tensor in bundle}
    for a, b in itertools.combinations(range(10), 2):
        if home[a] is home[b]:
            (a0, a1), (b0, b1) = spans[a], spans[b]
            assert a1 < b0 or b1 < a0, (a, b)
            assert {a, b} != {4, 6}
    for tensor, texture in home.items():
        assert sizes[tensor][0] <= texture.width and sizes[tensor][1] <= texture.height
    for bundle in ([1, 2, 3], [7, 8, 9]):
        assert len({id(home[t]) for t in bundle}) == 3
        assert len({(home[t].width, home[t].height) for t in bundle}) == 1
        assert all(home[t].locked for t in bundle)
    assert [id(home[t]) for t in [7, 8, 9]] == [id(home[t]) for t in [1, 2, 3]] or \
        {id(home[t]) for t in [7, 8, 9]} == {id(home[t]) for t in [1, 2, 3]}
    assert home[4] is home[0]  # the free larger texture, not a new one
    assert len(packed.textures) < 10


def test_textures_drawn_together_grow_together():
    """A many-target draw's textures stay one size, but grow as a group: a lone tensor a row taller than them
    takes one (all of them grow by a row, less than a texture of its own), and a later bundle a row taller
    still takes the set; a tensor alive beside them gets its own."""
    from wgsentis.backends.gpu_pixel import _TexturePacking
    from wgsentis.backends.pixel_layout import TextureLayout

    def layout(w, h):
        return TextureLayout((h, 4 * w), 1, np.dtype(np.float32), w, h)

    items = [
        (layout(64, 30), 0, 0, [0, 1, 2, 3]),  # four tiles of one draw
        (layout(64, 31), 1, 2, [4]),  # a row taller: grows the four, not a texture of its own
        (layout(64, 32), 3, 3, [5, 6, 7, 8]),  # another draw, a row taller again: the same four
        (layout(64, 8), 3, 3, [9]),  # alive beside them: its own texture
    ]
    packed = _TexturePacking(items, {})
    home = {tensor: t for t in packed.textures for tensor in t.members}
    tiles = {id(home[t]) for t in range(4)}
    assert id(home[4]) in tiles and {id(home[t]) for t in range(5, 9)} == tiles
    assert {(home[t].width, home[t].height) for t in range(9)} == {(64, 32)}
    assert all(home[t].locked for t in range(9)) and id(home[9]) not in tiles
    assert packed.texels == 4 * 64 * 32 + 64 * 8


@pytest.mark.parametrize("model,workers,limit_mb", [
    ("squeezenet", 4, 40),
    pytest.param("vgg19", 6, 150, marks=pytest.mark.slow),
])
def test_closed_workers_give_their_memory_back(model, workers, limit_mb):
    """Workers made, run and closed in turn: the process grows by at most ``limit_mb`` after the first (before
    programs owned their caches, six VGG-19 workers grew it by 7.6 GB). In a child process: its RSS is its own."""
    done = subprocess.run([sys.executable, worker_churn.__file__, "--model", model, "--workers", str(workers),
                           "--limit-mb", str(limit_mb)], capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr[-3000:]}"
