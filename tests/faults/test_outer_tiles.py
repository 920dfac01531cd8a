"""Layers past the storage binding limit that tile along their leading axes (backends/gpu/outer_tiles.py): Softmax,
Hardmax, LayerNormalization, the reductions and arg-reductions, Transpose, Slice, Resize, the pools,
BatchNormalization and InstanceNormalization (per-channel parameters sliced with their channels), LRN, DepthToSpace,
Gather, Split, TopK and CumSum run on gpu-compute tile by tile instead of falling back, and match the CPU kernels,
recorded and replayed. The device binds at most 1 MiB per storage buffer (a second device on the same adapter), so
that tensors of a few MB need tiles; the cases' tensors are 1.2-2.6 MB."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import F, make_model, requires_gpu
from onnx import TensorProto, helper

import wgsentis as ws
from wgsentis.backends.gpu.device import GPUContext
from wgsentis.errors import IndexOutOfRangeError
from wgsentis.backends.gpu.steps import Copy
from wgsentis.backends.gpu_compute import ComputeProgram

pytestmark = requires_gpu

MiB = 1 << 20
RNG = np.random.default_rng(12)


def _r(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.fixture(scope="module")
def small_binding() -> GPUContext:
    return GPUContext(limits={"max-storage-buffer-binding-size": MiB, "max-buffer-size": 16 * MiB})


def _case(op: str, x: np.ndarray, inits: dict | None = None, outputs: int = 1, extra_inputs: tuple = (), **attrs):
    node = helper.make_node(op, ["x", *extra_inputs], [f"y{k}" for k in range(outputs)], name="node", **attrs)
    model = make_model([node], [("x", F, list(x.shape))],
                       [(f"y{k}", TensorProto.UNDEFINED, None) for k in range(outputs)], inits or {})
    return model, {"x": x}


CASES = {
    "softmax-rows": _case("Softmax", _r(1000, 400), axis=-1),
    "softmax-3d-axis1": _case("Softmax", _r(6, 300, 200), axis=1),
    "log-softmax-heads": _case("LogSoftmax", _r(2, 4, 100, 400), axis=-1),
    # a scale as long as the rows are many: lined up with the normalized axis, never tiled with the rows
    "layer-norm-square": _case("LayerNormalization", _r(600, 600), {"g": _r(600), "b": _r(600)},
                               extra_inputs=("g", "b"), axis=-1),
    "layer-norm": _case("LayerNormalization", _r(1000, 400), {"g": _r(400), "b": _r(400)}, extra_inputs=("g", "b"),
                        axis=-1),
    "reduce-mean-inner": _case("ReduceMean", _r(1000, 400), axes=[1], keepdims=0),
    "reduce-max-two-axes": _case("ReduceMax", _r(5, 300, 300), axes=[1, 2]),
    "reduce-sum-axes-input": _case("ReduceSum", _r(5, 300, 300), {"ax": np.array([2], np.int64)},
                                   extra_inputs=("ax",)),
    "argmax": _case("ArgMax", _r(1000, 400), axis=1, keepdims=1),
    "transpose-inner": _case("Transpose", _r(4, 300, 300), perm=[0, 2, 1]),
    "slice-inner": _case("Slice", _r(4, 300, 300), {"s": np.array([1, 3], np.int64),
                                                     "e": np.array([250, 290], np.int64),
                                                     "a": np.array([1, 2], np.int64)}, extra_inputs=("s", "e", "a")),
    "resize-upsample": _case("Resize", _r(1, 4, 200, 200), {"sc": np.array([1, 1, 2, 2], np.float32)},
                             extra_inputs=("", "sc"), mode="linear"),
    "resize-to-sizes": _case("Resize", _r(1, 4, 200, 200), {"sz": np.array([1, 4, 330, 410], np.int64)},
                             extra_inputs=("", "", "sz"), mode="cubic"),
    "maxpool-channels": _case("MaxPool", _r(1, 16, 130, 140), kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    "averagepool-images": _case("AveragePool", _r(3, 8, 100, 140), kernel_shape=[2, 2], strides=[2, 2]),
    "batchnorm-channels": _case("BatchNormalization", _r(1, 16, 130, 140),
                                {"g": _r(16), "b": _r(16), "m": _r(16), "v": np.abs(_r(16)) + 1},
                                extra_inputs=("g", "b", "m", "v")),
    "instancenorm-channels": _case("InstanceNormalization", _r(1, 16, 130, 140), {"g": _r(16), "b": _r(16)},
                                   extra_inputs=("g", "b")),
    "lrn-images": _case("LRN", _r(4, 16, 70, 70), size=3),
    "depth-to-space-images": _case("DepthToSpace", _r(4, 16, 70, 70), blocksize=2),
    "hardmax-rows": _case("Hardmax", _r(1000, 400), axis=-1),
    "gather-inner-axis": _case("Gather", _r(3000, 100), {"i": RNG.integers(0, 100, 70).astype(np.int64)},
                               extra_inputs=("i",), axis=1),
    "gather-elements-rows": _case("GatherElements", _r(1000, 400),
                                  {"i": RNG.integers(-400, 400, (1000, 50)).astype(np.int64)}, extra_inputs=("i",),
                                  axis=1),
    "scatter-elements-rows": _case("ScatterElements", _r(1000, 400),
                                   {"i": np.argsort(RNG.random((1000, 400)), axis=1)[:, :50].astype(np.int64),
                                    "u": _r(1000, 50)}, extra_inputs=("i", "u"), axis=1),
    "expand-broadcast-row": _case("Expand", _r(400), {"s": np.array([1000, 400], np.int64)}, extra_inputs=("s",)),
    "expand-columns": _case("Expand", _r(1000, 1), {"s": np.array([1000, 400], np.int64)}, extra_inputs=("s",)),
    "expand-new-leading-axes": _case("Expand", _r(300, 1), {"s": np.array([4, 300, 300], np.int64)},
                                     extra_inputs=("s",)),
    "split-inner": _case("Split", _r(1000, 400), outputs=2, axis=1),
    "topk-rows": _case("TopK", _r(1000, 400), {"k": np.array([5], np.int64)}, outputs=2, extra_inputs=("k",),
                       axis=-1),
    "cumsum-rows": _case("CumSum", _r(1000, 400), {"ax": np.array(1, np.int64)}, extra_inputs=("ax",)),
}


def _run(ctx: GPUContext, model, feeds):
    program = ComputeProgram(ws.load_model(model).graph, ctx=ctx)
    try:
        first = program.run(feeds).wait()
        again = program.run(feeds).wait()  # replayed on the planner's arenas
        copies = sum(1 for s in program.last_plan.steps if type(s) is Copy)
        return first, again, program.stats()["fallback_layers"], copies
    finally:
        program.close()


@pytest.mark.parametrize("case", list(CASES))
def test_an_op_past_the_binding_limit_runs_in_tiles(small_binding, case):
    model, feeds = CASES[case]
    first, again, fallback, copies = _run(small_binding, model, feeds)
    assert fallback == [], fallback
    assert copies > 0  # tiles staged in and out
    with ws.Worker(ws.load_model(model), "cpu") as worker:
        want = worker.run(feeds)
    for name, value in want.items():
        np.testing.assert_array_equal(again[name], first[name], err_msg=f"{name}: the replay differs")
        if value.dtype.kind in "iub":
            np.testing.assert_array_equal(first[name], value, err_msg=name)
        else:
            np.testing.assert_allclose(first[name], value, rtol=1e-5, atol=1e-4, err_msg=name)  # sums of 400


@pytest.mark.parametrize("table", ["device", "constant"])
def test_a_gather_of_rows_of_a_table_past_the_binding_limit_runs_block_by_block(small_binding, table):
    """A 1.2 MB table (an embedding past the limit): each dispatch binds one block of rows (a window of a device
    tensor, or one of the row blocks a constant is uploaded in) and writes the outputs whose index falls in it;
    every dispatch checks the indices, so a bad one still raises."""
    values = _r(3000, 100)
    index = np.concatenate([RNG.integers(0, 3000, 500), [0, 2999, -1, -3000]]).astype(np.int64)
    nodes = [helper.make_node("Identity", ["t"], ["table"]), helper.make_node("Cast", ["xi"], ["i"], to=7),
             helper.make_node("Gather", ["table", "i"], ["y0"], axis=0)]
    if table == "device":
        model = make_model(nodes, [("t", F, [3000, 100]), ("xi", F, [index.size])], [("y0", F, None)])
        feeds = {"t": values, "xi": index.astype(np.float32)}
    else:
        model = make_model(nodes[1:], [("xi", F, [index.size])], [("y0", F, None)], {"table": values})
        feeds = {"xi": index.astype(np.float32)}
    first, again, fallback, _copies = _run(small_binding, model, feeds)
    assert fallback == [], fallback
    np.testing.assert_array_equal(first["y0"], values[index])
    np.testing.assert_array_equal(again["y0"], values[index])
    program = ComputeProgram(ws.load_model(model).graph, ctx=small_binding)
    try:
        bad = dict(feeds, xi=np.where(np.arange(index.size) == 7, 3000, index).astype(np.float32))
        with pytest.raises(IndexOutOfRangeError, match="3000 is out of range"):
            program.run(bad).wait()
    finally:
        program.close()


@pytest.mark.parametrize("op", ["GatherND", "ScatterND"])
def test_gather_nd_and_scatter_nd_on_data_past_the_binding_limit_run_block_by_block(small_binding, op):
    """Data (3000, 100) past 1 MiB: GatherND reads it block by block, ScatterND writes its output block by block (a
    key/value cache updated in place), each dispatch masked to the elements in its block."""
    values = _r(3000, 100)
    rows = RNG.choice(3000, 40, replace=False).astype(np.int64)[:, None]
    nodes = [helper.make_node("Identity", ["t"], ["data"])]
    if op == "GatherND":
        nodes.append(helper.make_node("GatherND", ["data", "i"], ["y0"]))
        inits, want = {"i": rows}, values[rows[:, 0]]
    else:
        updates = _r(40, 100)
        nodes.append(helper.make_node("ScatterND", ["data", "i", "u"], ["y0"]))
        inits, want = {"i": rows, "u": updates}, values.copy()
        want[rows[:, 0]] = updates
    model = make_model(nodes, [("t", F, [3000, 100])], [("y0", F, None)], inits)
    first, again, fallback, _copies = _run(small_binding, model, {"t": values})
    assert fallback == [], fallback
    np.testing.assert_array_equal(first["y0"], want)
    np.testing.assert_array_equal(again["y0"], want)


@pytest.mark.parametrize("nodes, x, inits", [
    # a softmax over the first axis: nothing leads it
    ([helper.make_node("Softmax", ["x"], ["y0"], axis=0)], _r(1000, 400), {}),
])
def test_an_op_with_no_independent_leading_axis_falls_back_cleanly(small_binding, nodes, x, inits):
    model = make_model(nodes, [("x", F, list(x.shape))], [("y0", TensorProto.UNDEFINED, None)], inits)
    first, _again, fallback, _copies = _run(small_binding, model, {"x": x})
    assert len(fallback) == 1
    with ws.Worker(ws.load_model(model), "cpu") as worker:
        np.testing.assert_allclose(first["y0"], worker.run({"x": x})["y0"], rtol=1e-5, atol=1e-6)


