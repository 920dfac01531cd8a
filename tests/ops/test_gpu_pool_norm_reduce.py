"""gpu-compute vs cpu for the pool, norm and reduce families (pool_gpu, norm_gpu, reduce_gpu)."""

from __future__ import annotations

import gpu_check
import numpy as np
import pytest
from gpu_check import compare, node_model

pytestmark = gpu_check.requires_gpu

RNG = np.random.default_rng(7)


def rand(*shape, dtype=np.float32):
    if np.dtype(dtype).kind == "i":
        return RNG.integers(-20, 20, size=shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


# -- pools ---------------------------------------------------------------------------------------------
POOL_CASES = [
    ((2, 3, 9, 11), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 2, 10, 7), dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1], ceil_mode=1)),
    ((1, 2, 12, 12), dict(kernel_shape=[2, 2], dilations=[2, 3], strides=[1, 2])),
    ((1, 3, 9, 10), dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 3, 9, 10), dict(kernel_shape=[2, 3], strides=[3, 2], auto_pad="SAME_LOWER")),
    ((2, 3, 17), dict(kernel_shape=[4], strides=[3], pads=[2, 1])),
    ((1, 2, 5, 6, 7), dict(kernel_shape=[2, 3, 2], strides=[2, 1, 2], pads=[1, 0, 1, 0, 1, 1])),
    ((1, 70, 40, 40), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),  # many workgroups
]


@pytest.mark.parametrize("shape,attrs", POOL_CASES)
def test_max_pool(shape, attrs):
    x = rand(*shape)
    compare(node_model("MaxPool", {"x": x}, **attrs), {"x": x})


@pytest.mark.parametrize("shape,attrs", POOL_CASES[:7])
@pytest.mark.parametrize("storage_order", [0, 1])
def test_max_pool_indices(shape, attrs, storage_order):
    x = rand(*shape)
    compare(node_model("MaxPool", {"x": x}, n_outputs=2, storage_order=storage_order, **attrs), {"x": x})


def test_max_pool_int32_and_zero_batch():
    x = rand(2, 3, 8, 9, dtype=np.int32)
    compare(node_model("MaxPool", {"x": x}, kernel_shape=[3, 3], pads=[1, 1, 1, 1], opset=12), {"x": x})
    z = rand(0, 3, 8, 9)
    compare(node_model("MaxPool", {"x": z}, kernel_shape=[3, 3]), {"x": z})


@pytest.mark.parametrize("shape,attrs", POOL_CASES)
@pytest.mark.parametrize("include", [0, 1])
def test_average_pool(shape, attrs, include):
    x = rand(*shape)
    opset = 19 if "dilations" in attrs else 17
    compare(node_model("AveragePool", {"x": x}, count_include_pad=include, opset=opset, **attrs), {"x": x})


@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool(p):
    x = rand(1, 3, 9, 8)
    compare(node_model("LpPool", {"x": x}, kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1], p=p, opset=18),
            {"x": x}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
@pytest.mark.parametrize("shape", [(2, 3, 7, 7), (1, 300, 1, 1), (1, 2, 40, 40), (2, 5, 9)])
def test_global_pools(op, shape):
    x = rand(*shape)
    compare(node_model(op, {"x": x}), {"x": x})


# -- normalizations ------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,folded", [((2, 6, 9, 11), False), ((3, 6), False), ((1, 6, 70, 3), False),
                                          ((2, 6, 5, 4, 3), False), ((2, 6, 16, 16), True), ((1, 6, 20, 40), True)])
def test_batch_norm(shape, folded, shaders):
    """Constant parameters over planes of a multiple of 4 (at least 256) elements are folded on the host
    into a vec4 per-channel affine pass; other shapes take the general kernel."""
    x = rand(*shape)
    c = {k: rand(6) for k in "sbm"}
    c["v"] = RNG.random(6).astype(np.float32) + 0.5
    compare(node_model("BatchNormalization", {"x": x}, constants=c, input_order=["x", "s", "b", "m", "v"],
                       epsilon=1e-3), {"x": x})
    assert ("compute/channel_affine4.wgsl" in shaders) == folded


def test_batch_norm_params_as_inputs():
    x, s, b, m = rand(2, 4, 5, 5), rand(4), rand(4), rand(4)
    v = RNG.random(4).astype(np.float32) + 0.5
    feeds = {"x": x, "s": s, "b": b, "m": m, "v": v}
    compare(node_model("BatchNormalization", feeds), feeds)


@pytest.mark.parametrize("shape,axis,pshape", [
    ((2, 5, 40), -1, (40,)), ((1, 197, 96), -1, (96,)), ((2, 3, 4, 5), 1, (3, 4, 5)), ((2, 3, 4, 5), 2, (1, 5)),
    ((6, 7), -1, (7,)), ((3, 1, 50), 0, (1, 50)),
])
def test_layer_norm(shape, axis, pshape):
    x = rand(*shape)
    c = {"s": rand(*pshape), "b": rand(*pshape)}
    compare(node_model("LayerNormalization", {"x": x}, n_outputs=3, constants=c, axis=axis), {"x": x})
    compare(node_model("LayerNormalization", {"x": x}, constants={"s": c["s"]}, axis=axis), {"x": x})


@pytest.mark.parametrize("shape", [(2, 4, 9, 11), (1, 8, 3), (1, 3, 2, 3, 4)])
def test_instance_norm(shape):
    x = rand(*shape)
    c = {"s": rand(shape[1]), "b": rand(shape[1])}
    compare(node_model("InstanceNormalization", {"x": x}, constants=c), {"x": x})


@pytest.mark.parametrize("opset,per_channel", [(18, False), (18, True), (21, True)])
@pytest.mark.parametrize("shape", [(2, 6, 7, 5), (1, 6, 2)])
def test_group_norm(opset, per_channel, shape):
    x = rand(*shape)
    n = 6 if per_channel else 3
    compare(node_model("GroupNormalization", {"x": x}, constants={"s": rand(n), "b": rand(n)}, num_groups=3,
                       opset=opset), {"x": x})


@pytest.mark.parametrize("size,beta", [(5, 0.75), (4, 0.5), (1, 0.75)])
@pytest.mark.parametrize("shape", [(1, 7, 9, 10), (2, 5, 3)])
def test_lrn(size, beta, shape):
    x = rand(*shape)
    compare(node_model("LRN", {"x": x}, size=size, beta=beta, alpha=0.001, bias=2.0), {"x": x})


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("p", [1, 2])
def test_lp_normalization(axis, p):
    x = rand(3, 4, 50)
    x[0, 0] = 0.0  # a zero norm gives zeros
    compare(node_model("LpNormalization", {"x": x}, axis=axis, p=p), {"x": x})


@pytest.mark.parametrize("axes", [(0, 2, 3), (2, 3), (1,), (0, 1, 2, 3)])
@pytest.mark.parametrize("shape", [(2, 3, 6, 7), (2, 3, 16, 17)])
def test_mean_variance_normalization(axes, shape):
    x = rand(*shape) + 1.0
    compare(node_model("MeanVarianceNormalization", {"x": x}, axes=list(axes)), {"x": x}, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("shape,axis", [((2, 5, 40), -1), ((2, 3, 4, 5), 1), ((4, 6), -1)])
def test_rms_norm(shape, axis):
    x = rand(*shape)
    compare(node_model("RMSNormalization", {"x": x}, constants={"s": rand(*shape[axis:])}, axis=axis, opset=23),
            {"x": x})


# -- reductions ----------------------------------------------------------------------------------------
REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]


def _reduce_model(op, x, axes, keepdims=1, noop=None):
    feeds = {"x": x}
    if axes is None:
        return node_model(op, feeds, keepdims=keepdims, opset=18), feeds
    attrs = {"keepdims": keepdims}
    if noop is not None:
        attrs["noop_with_empty_axes"] = noop
    return node_model(op, feeds, constants={"axes": np.array(axes, np.int64)}, opset=18, **attrs), feeds


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("axes,keepdims", [([1], 1), ([0, 2], 0), ([-1], 0), (None, 1), ([1, 3], 1)])
def test_reduce(op, axes, keepdims):
    x = RNG.random((3, 4, 5, 6)).astype(np.float32) + 0.5  # positive: log-sums stay defined
    model, feeds = _reduce_model(op, x, axes, keepdims)
    compare(model, feeds, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_split_and_empty(op):
    x = (RNG.random((3, 3000)).astype(np.float32) * 0.01 + 0.995)  # long rows: the staged path
    model, feeds = _reduce_model(op, x, [1])
    compare(model, feeds, rtol=1e-4, atol=1e-4)
    model, feeds = _reduce_model(op, x, None, 0)
    compare(model, feeds, rtol=1e-4, atol=1e-4)
    empty = np.zeros((2, 0, 3), np.float32)
    model, feeds = _reduce_model(op, empty, [1])
    with np.errstate(all="ignore"):
        compare(model, feeds)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceL2", "ReduceMax"])
def test_reduce_noop_with_empty_axes(op):
    x = rand(2, 3, 4)
    model, feeds = _reduce_model(op, x, [], noop=1)
    compare(model, feeds)
    model, feeds = _reduce_model(op, x, [], noop=0)
    compare(model, feeds)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare"])
def test_reduce_int(op):
    x = RNG.integers(-3, 4, size=(3, 4, 5)).astype(np.int32)
    model, feeds = _reduce_model(op, x, [1])
    compare(model, feeds)
    if op in ("ReduceMax", "ReduceMin"):
        x64 = x.astype(np.int64)
        model, feeds = _reduce_model(op, x64, [0, 2])
        compare(model, feeds)
        b = x > 0
        model, feeds = _reduce_model(op, b, [2])
        compare(model, feeds)


def test_reduce_attribute_form():
    x = rand(2, 3, 4)
    compare(node_model("ReduceSum", {"x": x}, axes=[0, 2], keepdims=0, opset=11), {"x": x})
    compare(node_model("ReduceMean", {"x": x}, axes=[1], opset=13), {"x": x})


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis,keepdims,last", [(0, 1, 0), (1, 0, 1), (-1, 1, 1), (2, 0, 0)])
def test_arg_reduce(op, axis, keepdims, last):
    x = RNG.integers(0, 4, size=(3, 5, 7)).astype(np.float32)  # ties: first vs last index matters
    compare(node_model(op, {"x": x}, axis=axis, keepdims=keepdims, select_last_index=last), {"x": x})
    xi = x.astype(np.int32)
    compare(node_model(op, {"x": xi}, axis=axis, keepdims=keepdims, select_last_index=last), {"x": xi})


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_family(op, opset, axis):
    x = rand(3, 4, 70)
    if op == "Hardmax":
        x = np.round(x)  # ties
    compare(node_model(op, {"x": x}, axis=axis, opset=opset), {"x": x})


def test_softmax_large_and_empty():
    x = rand(2, 1000) * 10
    compare(node_model("Softmax", {"x": x}), {"x": x})
    e = np.zeros((0, 5), np.float32)
    compare(node_model("Softmax", {"x": e}), {"x": e})


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cumsum(exclusive, reverse, axis):
    for x in (rand(3, 4, 5), rand(3, 4, 5, dtype=np.int32)):
        feeds = {"x": x}
        compare(node_model("CumSum", feeds, constants={"axis": np.array(axis, np.int64)}, exclusive=exclusive,
                           reverse=reverse), feeds)
