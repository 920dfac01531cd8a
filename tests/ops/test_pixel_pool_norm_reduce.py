"""gpu-pixel vs cpu for the pool, norm and reduce families (pool_pixel, norm_pixel, reduce_pixel): every axis
(the blocked one too), keepdims, odd and size-1 dims, textures of many rows, reductions longer than lavapipe's
65535 loop passes, and inputs arriving blocked on another axis than the op's."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_check import compare, node_model
from helpers import requires_gpu
from onnx import TensorProto, helper

import wgsentis as ws

pytestmark = requires_gpu

RNG = np.random.default_rng(11)
PIXEL = "gpu-pixel"


def rand(*shape, dtype=np.float32):
    if np.dtype(dtype).kind in "iu":
        return RNG.integers(-20, 20, size=shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def check(op, inputs, rtol=1e-4, atol=1e-5, **kw):
    return compare(node_model(op, inputs, **kw), inputs, rtol=rtol, atol=atol, backend=PIXEL)


# -- reductions -----------------------------------------------------------------------------------------------
REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("axes", [[-1], [1], [0, 2], [1, 3], None])
def test_reduce_every_op_and_axis(op, axes):
    """(2, 3, 5, 7): the last (blocked) axis, another one, several, all; keepdims both ways."""
    x = rand(2, 3, 5, 7)
    if op in ("ReduceLogSum", "ReduceProd"):
        x = np.abs(x) + 0.5  # log of a positive sum; products away from 0 and overflow
    attrs = {} if axes is None else {"axes": axes}
    for keepdims in (0, 1):
        check(op, {"x": x}, opset=12, keepdims=keepdims, **attrs)


@pytest.mark.parametrize("shape,axes", [
    ((1, 1, 9), [1]),  # size-1 dims
    ((3, 70, 41), [1]),  # texels over many rows
    ((3, 70, 41), [0, 2]),
    ((5, 1, 6), [0, 1]),  # reduced dims merge across a size-1 dim
    ((2, 3, 4, 5, 6, 7), [0, 2, 4]),  # rank 6, three groups
    ((2, 3, 4, 5, 6, 7), [1, 3, 5]),
    ((6,), [0]),  # a vector to a scalar
    ((4, 1), [1]),  # the blocked axis of one element
])
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceLogSumExp"])
def test_reduce_shapes(shape, axes, op):
    x = rand(*shape)
    check(op, {"x": x}, opset=12, axes=axes, keepdims=0)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceLogSumExp"])
def test_reduce_zero_size(op):
    """A zero-size reduced axis gives the identity (NaN for the mean); a zero-size kept axis an empty output."""
    x = np.zeros((3, 0, 5), np.float32)
    check(op, {"x": x}, opset=12, axes=[1], keepdims=1)
    check(op, {"x": x}, opset=12, axes=[2], keepdims=0)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceL2", "ReduceMax"])
def test_reduce_axes_input(op):
    x = rand(3, 4, 6)
    opset = 13 if op == "ReduceSum" else 18
    for axes, noop in (([0, -1], 0), ([], 0), ([], 1), ([-2], 1)):
        check(op, {"x": x}, constants={"axes": np.array(axes, np.int64)}, opset=opset, keepdims=0,
              noop_with_empty_axes=noop)
    check(op, {"x": x}, input_order=["x", ""], opset=opset)  # axes left out: every axis


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceSumSquare"])
def test_reduce_int32(op):
    x = rand(3, 5, 7, dtype=np.int32)
    if op == "ReduceProd":
        x = np.clip(x, -3, 3)
    check(op, {"x": x}, opset=12, axes=[1], keepdims=1)
    check(op, {"x": x}, opset=12, axes=[2], keepdims=0)


def test_reduce_int64_and_bool_max():
    x = rand(3, 5, 6, dtype=np.int64)
    check("ReduceMax", {"x": x}, opset=12, axes=[2])
    check("ReduceMin", {"x": x}, opset=12, axes=[0, 1])
    b = RNG.random((4, 9)) > 0.5
    check("ReduceMax", {"x": b}, opset=12, axes=[1])


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceLogSumExp", "ReduceMean"])
def test_reduce_longer_than_a_shader_loops(op):
    """300000 elements along the blocked axis (75000 texels) and 70001 along another: split in chunks."""
    x = rand(300000)
    check(op, {"x": x}, opset=12, axes=[0], keepdims=0, rtol=1e-3, atol=1e-3)
    y = rand(70001, 2)
    check(op, {"y": y}, opset=12, axes=[0], keepdims=1, rtol=1e-3, atol=1e-3)


def test_reduce_split_by_the_loop_limit_alone():
    """Enough outputs to keep the cores busy, each too long for one invocation: chunks as long as fit."""
    x = rand(70001, 70)
    check("ReduceSum", {"x": x}, opset=12, axes=[0], keepdims=0, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("op", ["ReduceLogSum", "ReduceL2", "ReduceProd", "ReduceSumSquare"])
def test_reduce_empty_region_and_scalar(op):
    z = np.zeros((2, 0, 3), np.float32)
    check(op, {"x": z}, opset=12, axes=[1], keepdims=0)
    s = np.array(1.5, np.float32)
    check(op, {"x": s}, opset=12, keepdims=1)


def test_reduce_nan_wins_in_max():
    x = rand(3, 9)
    x[1, 4] = np.nan
    check("ReduceMax", {"x": x}, opset=12, axes=[1])
    check("ReduceMin", {"x": x}, opset=12, axes=[0])


# -- ArgMax / ArgMin ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_reduce(op, axis, last):
    x = RNG.integers(-3, 3, size=(3, 6, 9)).astype(np.float32)  # ties
    for keepdims in (0, 1):
        check(op, {"x": x}, opset=13, axis=axis, keepdims=keepdims, select_last_index=last)


def test_arg_reduce_int_and_nan():
    x = rand(4, 7, dtype=np.int32)
    check("ArgMax", {"x": x}, opset=13, axis=1)
    f = rand(4, 7)
    f[2, 3] = np.nan
    check("ArgMin", {"x": f}, opset=13, axis=1, select_last_index=1)


# -- softmax family -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_softmax_axis(op, axis):
    x = rand(3, 5, 7) * 4
    if op == "Hardmax":
        x = np.round(x)  # ties: the first maximum
    check(op, {"x": x}, opset=13, axis=axis, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("axis", [1, 0, 3, -2])
def test_softmax_coerced_2d(op, axis):
    x = rand(2, 3, 4, 5) * 3
    check(op, {"x": x}, opset=11, axis=axis, rtol=1e-5, atol=1e-6)


def test_softmax_long_rows_and_empty():
    x = rand(2, 100003) * 5
    check("Softmax", {"x": x}, opset=13, axis=-1, rtol=1e-4, atol=1e-7)
    check("LogSoftmax", {"x": x}, opset=13, axis=0, rtol=1e-5, atol=1e-5)
    z = np.zeros((3, 0), np.float32)
    check("Softmax", {"x": z}, opset=13, axis=-1)


# -- pools ----------------------------------------------------------------------------------------------------
POOL_CASES = [
    ((2, 3, 9, 11), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 6, 10, 7), dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1], ceil_mode=1)),
    ((1, 5, 12, 12), dict(kernel_shape=[2, 2], dilations=[2, 3], strides=[1, 2])),
    ((1, 3, 9, 10), dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 3, 9, 10), dict(kernel_shape=[2, 3], strides=[3, 2], auto_pad="SAME_LOWER")),
    ((2, 3, 17), dict(kernel_shape=[4], strides=[3], pads=[2, 1])),  # 1-D
    ((1, 2, 5, 6, 7), dict(kernel_shape=[2, 3, 2], strides=[2, 1, 2], pads=[1, 0, 1, 0, 1, 1])),  # 3-D
    ((1, 70, 40, 40), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),  # many rows
]


@pytest.mark.parametrize("shape,attrs", POOL_CASES)
def test_max_pool(shape, attrs):
    x = rand(*shape)
    check("MaxPool", {"x": x}, opset=12, **attrs)


@pytest.mark.parametrize("shape,attrs", POOL_CASES[:7])
@pytest.mark.parametrize("storage_order", [0, 1])
def test_max_pool_indices(shape, attrs, storage_order):
    x = rand(*shape)
    check("MaxPool", {"x": x}, n_outputs=2, opset=12, storage_order=storage_order, **attrs)


def test_max_pool_int32_and_empty():
    x = rand(2, 5, 8, 9, dtype=np.int32)
    check("MaxPool", {"x": x}, opset=12, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    z = rand(0, 3, 8, 9)
    check("MaxPool", {"x": z}, opset=12, kernel_shape=[3, 3])


@pytest.mark.parametrize("shape,attrs", POOL_CASES)
@pytest.mark.parametrize("include", [0, 1])
def test_average_pool(shape, attrs, include):
    x = rand(*shape)
    check("AveragePool", {"x": x}, count_include_pad=include, opset=19, **attrs)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool(p):
    x = rand(1, 5, 9, 8)
    check("LpPool", {"x": x}, kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1], p=p, opset=18, rtol=1e-4,
          atol=1e-4)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
@pytest.mark.parametrize("shape", [(2, 3, 7, 7), (1, 300, 1, 1), (1, 2, 40, 40), (2, 5, 9), (1, 3, 2, 3, 4)])
def test_global_pools(op, shape):
    x = rand(*shape)
    check(op, {"x": x})


def test_global_lp_pool_any_p():
    x = rand(2, 5, 6, 7)
    check("GlobalLpPool", {"x": x}, p=3, rtol=1e-4, atol=1e-4)


# -- normalizations -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(2, 6, 9, 11), (3, 6), (1, 6, 70, 3), (2, 6, 5, 4, 3)])
def test_batch_norm(shape):
    c = shape[1]
    x = rand(*shape)
    consts = {"s": rand(c), "b": rand(c), "m": rand(c), "v": np.abs(rand(c)) + 0.1}
    compare(node_model("BatchNormalization", {"x": x}, constants=consts, opset=15), {"x": x}, backend=PIXEL)


def test_batch_norm_computed_parameters_and_spatial0():
    x = rand(2, 5, 4, 3)
    feeds = {"x": x, "s": rand(5), "b": rand(5), "m": rand(5), "v": np.abs(rand(5)) + 0.1}
    compare(node_model("BatchNormalization", feeds, opset=15), feeds, backend=PIXEL)
    consts = {"s": rand(5, 4, 3), "b": rand(5, 4, 3), "m": rand(5, 4, 3), "v": np.abs(rand(5, 4, 3)) + 0.1}
    compare(node_model("BatchNormalization", {"x": x}, constants=consts, opset=7, spatial=0), {"x": x},
            backend=PIXEL)


def test_batch_norm_with_fused_relu_after_a_channels_blocked_producer():
    """MaxPool leaves channels blocked; BatchNormalization + Relu (fused) reads it texel by texel."""
    c = 6
    x = rand(1, c, 9, 9)
    inits = {"s": rand(c), "b": rand(c), "m": rand(c), "v": np.abs(rand(c)) + 0.1}
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[3, 3], strides=[2, 2]),
             helper.make_node("BatchNormalization", ["p", "s", "b", "m", "v"], ["n"]),
             helper.make_node("Relu", ["n"], ["y"])]
    _compare_graph(nodes, {"x": x}, inits)


@pytest.mark.parametrize("shape", [(2, 3, 9, 11), (1, 5, 70), (2, 4, 3, 4, 5)])
def test_instance_norm(shape):
    c = shape[1]
    x = rand(*shape)
    check("InstanceNormalization", {"x": x}, constants={"s": rand(c), "b": rand(c)})


def test_instance_norm_of_planes_longer_than_a_shader_loops():
    """Channels-blocked planes of 260 x 260 texels: the moments are split in chunks."""
    x = rand(1, 3, 260, 260)
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[1, 1]),
             helper.make_node("InstanceNormalization", ["p", "s", "b"], ["y"])]
    _compare_graph(nodes, {"x": x}, {"s": rand(3), "b": rand(3)}, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("shape,axis", [((4, 10), -1), ((2, 3, 33), 1), ((2, 3, 5, 6), 2), ((3, 7), 0)])
def test_layer_norm(shape, axis):
    x = rand(*shape)
    norm = shape[axis:]
    check("LayerNormalization", {"x": x}, constants={"s": rand(*norm), "b": rand(*norm)}, axis=axis, n_outputs=3,
          rtol=1e-4, atol=1e-4)
    check("LayerNormalization", {"x": x}, constants={"s": rand(*norm)}, axis=axis)


@pytest.mark.parametrize("shape,axis,scale", [((4, 10), -1, (10,)), ((2, 3, 33), 1, (3, 33)), ((2, 3, 5, 6), 2, (5, 6)),
                                              ((3, 7), 0, (3, 7)), ((2, 5, 7), -1, (1, 7)), ((2, 4, 6), 1, (1,)),
                                              ((1, 3, 70, 70), 1, (3, 1, 70))])
def test_rms_norm(shape, axis, scale):
    """The last (blocked) axis, from an outer axis on, scales broadcast onto the normalized dims."""
    x = rand(*shape)
    check("RMSNormalization", {"x": x}, constants={"s": rand(*scale)}, axis=axis, opset=23, rtol=1e-4, atol=1e-5)


def test_rms_norm_scale_as_input_after_a_channels_blocked_producer():
    """x arrives channels blocked (MaxPool's output), scale is a graph input: normalized over the last two axes."""
    x, s = rand(2, 6, 9, 8), rand(8, 7)
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[1, 1]),
             helper.make_node("RMSNormalization", ["p", "s"], ["y"], axis=-2, epsilon=1e-3)]
    graph = helper.make_graph(nodes, "pixel", [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape))
                                               for k, v in (("x", x), ("s", s))],
                              [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 8
    compare(model, {"x": x, "s": s}, rtol=1e-4, atol=1e-5, backend=PIXEL)


@pytest.mark.parametrize("shape,groups,opset", [((2, 6, 5, 4), 3, 18), ((2, 6, 5, 4), 2, 21), ((1, 8, 7), 4, 21),
                                                ((3, 4), 2, 18)])
def test_group_norm(shape, groups, opset):
    c = shape[1]
    n = c if opset == 21 else groups
    x = rand(*shape)
    check("GroupNormalization", {"x": x}, constants={"s": rand(n), "b": rand(n)}, num_groups=groups, opset=opset,
          rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("size,beta", [(5, 0.75), (3, 0.6), (2, 0.75), (9, 0.75)])
def test_lrn(size, beta):
    x = rand(2, 11, 6, 5)
    check("LRN", {"x": x}, size=size, beta=beta, alpha=1e-3, bias=1.5)


@pytest.mark.parametrize("axes", [(0, 2, 3), (1,), (3,)])
def test_mvn(axes):
    x = rand(2, 5, 6, 7)
    check("MeanVarianceNormalization", {"x": x}, axes=list(axes), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_lp_norm(p, axis):
    x = rand(3, 5, 6)
    x[1, :, 2] = 0  # a zero norm gives 0 along axis 1
    check("LpNormalization", {"x": x}, axis=axis, p=p)


# -- layout switches ------------------------------------------------------------------------------------------
def _compare_graph(nodes, feeds, inits=None, rtol=1e-4, atol=1e-5, opset=17):
    graph = helper.make_graph(nodes, "pixel", [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape))
                                               for k, v in feeds.items()],
                              [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
                              [helper.make_tensor(k, TensorProto.FLOAT, v.shape, v.reshape(-1).tolist())
                               for k, v in (inits or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    compare(model, feeds, rtol=rtol, atol=atol, backend=PIXEL)


@pytest.mark.parametrize("second", [
    helper.make_node("ReduceMean", ["p"], ["y"], axes=[-1], keepdims=1),  # along the last axis, channels blocked
    helper.make_node("ReduceMax", ["p"], ["y"], axes=[1], keepdims=0),  # along the blocked channels
    helper.make_node("GlobalAveragePool", ["p"], ["y"]),  # texel by texel
    helper.make_node("Softmax", ["p"], ["y"], axis=-1),
    helper.make_node("ArgMax", ["p"], ["y"], axis=1),
    helper.make_node("LayerNormalization", ["p", "s"], ["y"], axis=-1),
    helper.make_node("LpNormalization", ["p"], ["y"], axis=1),
    helper.make_node("LRN", ["p"], ["y"], size=3),
])
def test_input_blocked_on_another_axis(second):
    """MaxPool's output is channels blocked; the next op reduces or normalizes along whatever axis it needs."""
    x = rand(2, 7, 11, 10)
    first = helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[1, 1])
    _compare_graph([first, second], {"x": x}, {"s": rand(9)})


def test_a_pool_after_a_last_axis_producer():
    """Relu leaves its output blocked on the last axis; MaxPool switches it to channels blocked."""
    x = rand(1, 6, 13, 12)
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("AveragePool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["p"], ["y"])]
    _compare_graph(nodes, {"x": x})


def test_no_fallback_and_no_host_sync_in_a_small_cnn_tail():
    """Pool -> BatchNormalization -> GlobalAveragePool -> Softmax all draw on the GPU."""
    x = rand(1, 8, 12, 12)
    c = 8
    inits = {"s": rand(c), "b": rand(c), "m": rand(c), "v": np.abs(rand(c)) + 0.1}
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["p", "s", "b", "m", "v"], ["n"]),
             helper.make_node("GlobalAveragePool", ["n"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Softmax", ["f"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "tail", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
                              [helper.make_tensor(k, TensorProto.FLOAT, v.shape, v.reshape(-1).tolist())
                               for k, v in inits.items()])
    model = ws.load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    want = ws.Worker(model, "cpu").run({"x": x})["y"]
    with ws.Worker(model, PIXEL) as worker:
        got = worker.run({"x": x})["y"]
        placements = {p["op"]: p["device"] for p in worker.stats()["placements"]}
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert all(placements[op] != "fallback" for op in ("MaxPool", "BatchNormalization", "GlobalAveragePool",
                                                        "Softmax")), placements
