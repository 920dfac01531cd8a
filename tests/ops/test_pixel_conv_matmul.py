"""Conv, FusedConv, ConvTranspose, MatMul and Gemm on gpu-pixel (ops/conv_pixel.py, ops/matmul_pixel.py) vs the
cpu backend: odd channel counts, size-1 and zero-size dims, textures of many rows, every attribute, fused
activations and layout switches between producers and consumers that block different axes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from gpu_check import compare, node_model
from helpers import requires_gpu
from onnx import TensorProto, helper, numpy_helper

import wgsentis as ws
from wgsentis.backends.gpu.device import get_context
from wgsentis.ops import conv_pixel
from wgsentis.ops.matmul_pixel import rows_per_fragment

pytestmark = requires_gpu
RNG = np.random.default_rng(20)
F = TensorProto.FLOAT


def _rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _pixel(model: onnx.ModelProto, feeds: dict[str, np.ndarray], rtol: float = 1e-4, atol: float = 1e-4) -> None:
    compare(model, feeds, rtol=rtol, atol=atol, backend="gpu-pixel")


def _chain(nodes: list[onnx.NodeProto], feeds: dict[str, np.ndarray], constants: dict[str, np.ndarray],
           output: str = "y") -> onnx.ModelProto:
    """A model of ``nodes`` with graph inputs ``feeds`` and initializers ``constants``."""
    graph = helper.make_graph(
        nodes, "pixel", [helper.make_tensor_value_info(k, F, v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info(output, F, None)],
        [numpy_helper.from_array(v, k) for k, v in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


# -- Conv ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("x_shape,w_shape,bias,attrs", [
    ((2, 3, 7, 9), (5, 3, 3, 3), True, {"pads": [1, 1, 1, 1]}),  # odd channels, padding
    ((1, 1, 6, 5), (1, 1, 2, 2), False, {}),  # one channel in and out, no bias
    ((2, 7, 11, 10), (3, 7, 3, 2), True, {"strides": [2, 3], "dilations": [2, 1], "pads": [0, 1, 2, 1]}),
    ((1, 5, 9, 8), (7, 5, 3, 3), True, {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 5, 9, 8), (7, 5, 4, 4), False, {"auto_pad": "SAME_LOWER", "strides": [2, 1]}),
    ((1, 5, 9, 8), (7, 5, 3, 3), True, {"auto_pad": "VALID", "strides": [2, 2]}),
    ((1, 6, 5, 7), (9, 2, 3, 3), True, {"group": 3, "pads": [1, 1, 1, 1]}),  # groups of 2 in, 3 out
    ((2, 10, 6, 6), (4, 5, 3, 1), True, {"group": 2}),  # groups straddling channel blocks
    ((1, 5, 8, 7), (5, 1, 3, 3), True, {"group": 5, "pads": [1, 1, 1, 1], "strides": [2, 1]}),  # depthwise
    ((1, 3, 6, 6), (6, 1, 3, 3), False, {"group": 3, "pads": [1, 0, 1, 0]}),  # depthwise, channel multiplier 2
    ((1, 20, 5, 5), (12, 20, 1, 1), True, {}),  # 1x1, several blocks each way
    ((1, 1, 1, 1), (3, 1, 1, 1), True, {}),  # size-1 everything
    ((0, 3, 5, 5), (4, 3, 3, 3), True, {}),  # zero-size batch
    ((1, 3, 130, 130), (4, 3, 3, 3), True, {"pads": [1, 1, 1, 1]}),  # textures of many rows
    ((1, 33, 9, 13), (18, 33, 3, 3), True, {"pads": [2, 1, 0, 1], "strides": [1, 2]}),  # many blocks each way
    ((2, 3, 17), (5, 3, 3), True, {"strides": [2], "pads": [1, 2], "dilations": [2]}),  # 1-D
    ((1, 4, 17), (4, 1, 5), False, {"group": 4, "auto_pad": "SAME_UPPER"}),  # 1-D depthwise
    ((1, 3, 4, 5, 6), (5, 3, 2, 3, 3), True, {"pads": [1, 0, 1, 0, 1, 1], "strides": [1, 2, 1]}),  # 3-D
    ((2, 4, 5, 4, 6), (2, 2, 3, 1, 2), False, {"group": 2, "dilations": [2, 1, 2]}),  # 3-D groups, dilated
])
def test_conv(x_shape, w_shape, bias, attrs):
    feeds = {"x": _rand(*x_shape)}
    constants = {"w": _rand(*w_shape)}
    if bias:
        constants["b"] = _rand(w_shape[0])
    _pixel(node_model("Conv", feeds, constants=constants, kernel_shape=list(w_shape[2:]), **attrs), feeds)


@pytest.mark.parametrize("act,act_attrs", [("Relu", {}), ("LeakyRelu", {"alpha": 0.2}), ("Sigmoid", {})])
def test_conv_with_a_fused_activation(act, act_attrs):
    feeds = {"x": _rand(1, 3, 9, 9)}
    constants = {"w": _rand(6, 3, 3, 3), "b": _rand(6)}
    model = _chain([helper.make_node("Conv", ["x", "w", "b"], ["t"], pads=[1, 1, 1, 1]),
                    helper.make_node(act, ["t"], ["y"], **act_attrs)], feeds, constants)
    graph = ws.load_model(model).graph
    assert [layer.op_type for layer in graph.layers] == ["Conv"] and graph.layers[0].fused_activation
    _pixel(model, feeds)


@pytest.mark.parametrize("z_shape", [(1, 5, 6, 6), (1, 5, 1, 1), (6,)])
def test_fused_conv_adds_its_residual_then_the_activation(z_shape):
    feeds = {"x": _rand(1, 3, 6, 6), "z": _rand(*z_shape)}
    constants = {"w": _rand(5, 3, 3, 3), "b": _rand(5)}
    model = _chain([helper.make_node("Conv", ["x", "w", "b"], ["t"], pads=[1, 1, 1, 1]),
                    helper.make_node("Add", ["t", "z"], ["s"]), helper.make_node("Relu", ["s"], ["y"])],
                   feeds, constants)
    graph = ws.load_model(model).graph
    assert [layer.op_type for layer in graph.layers] == ["FusedConv"]
    _pixel(model, feeds)


def test_conv_output_feeds_consumers_blocking_other_axes():
    # The graph input is blocked along its last axis (a switch to channels for the Conv); the Conv's output,
    # blocked along channels, feeds a MatMul (blocked along K, its last axis) and a Gemm with transA (its first).
    feeds = {"x": _rand(2, 3, 5, 6)}
    constants = {"w": _rand(4, 3, 3, 3), "m": _rand(6, 7), "shape": np.array([8, 30], np.int64), "g": _rand(8, 5)}
    model = _chain([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                    helper.make_node("MatMul", ["c", "m"], ["p"]),
                    helper.make_node("Reshape", ["c", "shape"], ["r"]),
                    helper.make_node("Gemm", ["r", "g"], ["q"], transA=1),
                    helper.make_node("Conv", ["p", "w2"], ["y"])],
                   feeds, {**constants, "w2": _rand(2, 4, 1, 1)})
    _pixel(model, feeds)
    # The Gemm's result as an output too.
    model.graph.output.append(helper.make_tensor_value_info("q", F, None))
    _pixel(model, feeds)


@pytest.mark.parametrize("x_shape,w_shape,attrs,z", [
    ((1, 3, 40, 40), (16, 3, 3, 3), {"pads": [1, 1, 1, 1], "strides": [1, 1]}, False),
    ((2, 5, 24, 60), (20, 5, 1, 1), {}, False),  # batch 2: chunks cross the batch
    ((1, 16, 30, 30), (16, 1, 3, 3), {"group": 16, "pads": [1, 1, 1, 1]}, False),  # depthwise
    ((1, 4, 50, 37), (8, 4, 5, 5), {"pads": [2, 2, 2, 2]}, True),  # 37 columns: chunks of whole rows of Y
])
def test_conv_drawn_in_chunks_gives_what_one_draw_gives(x_shape, w_shape, attrs, z, monkeypatch):
    """A conv whose render targets would pass MAX_TARGET_BYTES draws Y in chunks of its rows, the targets reused by
    each: the result is bit for bit what one draw gives, replays included (and the cpu's, within tolerance)."""
    feeds = {"x": _rand(*x_shape)}
    constants = {"w": _rand(*w_shape), "b": _rand(w_shape[0])}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["t" if z else "y"], kernel_shape=list(w_shape[2:]), **attrs)]
    if z:
        oh, ow = x_shape[2], x_shape[3]  # these pads keep the size
        feeds["z"] = _rand(x_shape[0], w_shape[0], oh, ow)
        nodes += [helper.make_node("Add", ["t", "z"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    model = _chain(nodes, feeds, constants)
    with ws.Worker(ws.load_model(model), "gpu-pixel") as worker:
        whole = worker.run(feeds)["y"]
    chunks = []
    chunk_prefixes = conv_pixel.chunk_prefixes
    monkeypatch.setattr(conv_pixel, "MAX_TARGET_BYTES", 4096)
    monkeypatch.setattr(conv_pixel, "chunk_prefixes",
                        lambda prefix, *a: chunks.append((chunk_prefixes(prefix, *a), prefix)) or chunks[-1][0])
    with ws.Worker(ws.load_model(model), "gpu-pixel") as worker:
        first, again = worker.run(feeds)["y"], worker.run(feeds)["y"]
    assert chunks and all(chunk < prefix for chunk, prefix in chunks), chunks
    np.testing.assert_array_equal(first, whole)
    np.testing.assert_array_equal(again, whole)
    _pixel(model, feeds)


# -- Winograd (3x3, stride 1, one group; its channel thresholds lowered so that small layers take it) -------------

@pytest.fixture
def low_winograd_thresholds(monkeypatch):
    monkeypatch.setattr(conv_pixel, "WINOGRAD_MIN_CHANNELS", 8)
    monkeypatch.setattr(conv_pixel, "WINOGRAD_MIN_OUTPUT_CHANNELS", 1)


@pytest.mark.parametrize("x_shape,m,bias,pads", [
    ((1, 8, 6, 6), 5, True, [1, 1, 1, 1]),  # F(2x2): the output under WINOGRAD4_MIN_SIDE
    ((2, 13, 11, 9), 6, False, [1, 0, 2, 1]),  # F(4x4), odd sizes, sides not multiples of the tile, uneven pads
    ((1, 9, 7, 8), 7, True, [0, 0, 0, 0]),  # F(2x2) without padding, a partial last tile
    ((1, 8, 1, 1), 4, True, [1, 1, 1, 1]),  # 1x1 spatial
    ((1, 12, 2, 2), 3, False, [1, 1, 1, 1]),  # 2x2 spatial
    ((1, 40, 10, 12), 36, True, [1, 1, 1, 1]),  # many channel blocks each way, F(4x4)
])
def test_conv_winograd(x_shape, m, bias, pads, monkeypatch, low_winograd_thresholds):
    taken = []
    winograd = conv_pixel._winograd
    monkeypatch.setattr(conv_pixel, "_winograd", lambda *a, **k: taken.append(1) or winograd(*a, **k))
    feeds = {"x": _rand(*x_shape)}
    constants = {"w": _rand(m, x_shape[1], 3, 3)}
    if bias:
        constants["b"] = _rand(m)
    model = node_model("Conv", feeds, constants=constants, pads=pads)
    # F(4x4) (where the worker allows it) amplifies float32 rounding (sums of ~9C terms of unit variance here);
    # the default F(2x2) keeps within a direct sum's error.
    compare(model, feeds, rtol=1e-3, atol=1e-3, backend="gpu-pixel", options={"fast_winograd": True})
    assert taken  # the Winograd path, not the direct program
    taken.clear()
    _pixel(model, feeds)
    assert taken


@pytest.mark.parametrize("x_shape,z_shape", [((1, 16, 9, 10), (1, 6, 9, 10)), ((1, 8, 5, 7), (1, 6, 1, 1))])
def test_fused_conv_winograd_adds_its_residual_then_the_activation(x_shape, z_shape,
                                                                  low_winograd_thresholds):
    feeds = {"x": _rand(*x_shape), "z": _rand(*z_shape)}
    constants = {"w": _rand(6, x_shape[1], 3, 3), "b": _rand(6)}
    model = _chain([helper.make_node("Conv", ["x", "w", "b"], ["t"], pads=[1, 1, 1, 1]),
                    helper.make_node("Add", ["t", "z"], ["s"]),
                    helper.make_node("LeakyRelu", ["s"], ["y"], alpha=0.1)], feeds, constants)
    graph = ws.load_model(model).graph
    assert [layer.op_type for layer in graph.layers] == ["FusedConv"] and graph.layers[0].fused_activation
    _pixel(model, feeds, rtol=1e-3, atol=1e-3)


def test_winograd_transforms_match_the_direct_convolution():
    # The host-side algebra: A^T [(G g G^T) * (B^T d B)] A is the 3x3 correlation of d, for both tile sizes.
    g, d = _rand(3, 3).astype(np.float64), _rand(6, 6).astype(np.float64)
    for bt, gm, a_t in (conv_pixel._F2, conv_pixel._F4):
        a = bt.shape[0]
        side = a - 2
        tile = d[:a, :a]
        y = a_t @ ((gm @ g @ gm.T) * (bt @ tile @ bt.T)) @ a_t.T
        direct = np.array([[np.sum(tile[r:r + 3, c:c + 3] * g) for c in range(side)] for r in range(side)])
        np.testing.assert_allclose(y, direct, rtol=1e-9, atol=1e-9)


# -- ConvTranspose ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("x_shape,w_shape,bias,attrs", [
    ((2, 3, 5, 4), (3, 5, 3, 3), True, {"strides": [2, 2], "pads": [1, 0, 1, 1], "output_padding": [1, 1]}),
    ((1, 1, 4, 4), (1, 1, 2, 2), False, {"strides": [2, 2]}),  # kernel == stride: one tap each
    ((1, 4, 5, 5), (4, 3, 3, 3), True, {"group": 2, "dilations": [2, 1], "strides": [1, 2]}),
    ((1, 5, 4, 3), (5, 1, 3, 3), True, {"group": 5, "strides": [2, 2]}),  # depthwise
    ((1, 3, 4, 4), (3, 2, 3, 3), False, {"strides": [2, 2], "output_shape": [9, 8]}),
    ((1, 3, 4, 4), (3, 2, 3, 3), True, {"strides": [2, 2], "output_shape": [11, 12]}),  # negative pads
    ((1, 3, 4, 4), (3, 2, 3, 3), True, {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 3, 4, 4), (3, 2, 4, 4), True, {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 3, 4, 4), (3, 2, 1, 1), True, {"strides": [3, 3]}),  # stride past the kernel: gaps
    ((0, 3, 4, 4), (3, 2, 3, 3), True, {}),  # zero-size batch
    ((2, 3, 9), (3, 7, 4), True, {"strides": [3], "pads": [1, 2], "output_padding": [2]}),  # 1-D
    ((1, 2, 3, 4, 3), (2, 3, 2, 3, 2), True, {"strides": [2, 1, 2], "pads": [0, 1, 0, 1, 1, 0]}),  # 3-D
    ((1, 6, 3, 3), (6, 2, 3, 3), True, {"group": 3, "strides": [2, 2], "pads": [1, 1, 1, 1], "dilations": [1, 2]}),
])
def test_conv_transpose(x_shape, w_shape, bias, attrs):
    feeds = {"x": _rand(*x_shape)}
    constants = {"w": _rand(*w_shape)}
    if bias:
        constants["b"] = _rand(w_shape[1] * attrs.get("group", 1))
    _pixel(node_model("ConvTranspose", feeds, constants=constants, **attrs), feeds)


def test_conv_transpose_with_a_fused_relu():
    feeds = {"x": _rand(1, 3, 5, 5)}
    model = _chain([helper.make_node("ConvTranspose", ["x", "w", "b"], ["t"], strides=[2, 2]),
                    helper.make_node("Relu", ["t"], ["y"])], feeds, {"w": _rand(3, 5, 3, 3), "b": _rand(5)})
    assert ws.load_model(model).graph.layers[0].fused_activation
    _pixel(model, feeds)


# -- MatMul and Gemm ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("a_shape,b_shape", [
    ((5, 7), (7, 9)),  # odd sizes
    ((37, 64), (64, 41)),  # several fragments of many rows, a partial last one
    ((1, 16), (16, 12)),  # one row
    ((2, 1, 9, 13), (3, 13, 20)),  # broadcast batch dims
    ((2, 3, 4, 5, 6, 7), (3, 1, 5, 7, 3)),  # four batch dims
    ((13,), (13, 6)),  # 1-D A
    ((4, 13), (13,)),  # 1-D B
    ((13,), (13,)),  # both 1-D: a scalar
    ((0, 8), (8, 4)),  # zero-size
    ((3, 0), (0, 5)),  # K == 0: zeros
    ((3, 1), (1, 1)),  # size-1 dims
    ((130, 70), (70, 131)),  # textures of many rows
])
def test_matmul(a_shape, b_shape):
    feeds = {"a": _rand(*a_shape), "b": _rand(*b_shape)}
    _pixel(node_model("MatMul", feeds), feeds)


@pytest.mark.parametrize("b_shape", [(24, 37), (24,), (2, 24, 5)])
def test_matmul_with_a_constant_b_and_a_fused_relu(b_shape):
    feeds = {"a": _rand(2, 9, 24)}
    model = _chain([helper.make_node("MatMul", ["a", "b"], ["t"]), helper.make_node("Relu", ["t"], ["y"])], feeds,
                   {"b": _rand(*b_shape)})
    assert ws.load_model(model).graph.layers[0].fused_activation
    _pixel(model, feeds)


@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("c_shape", [None, (11, 6), (6,)])
def test_gemm_transposes(trans_a, trans_b, c_shape):
    m, k, n = 11, 7, 6
    feeds = {"a": _rand(*((k, m) if trans_a else (m, k))), "b": _rand(*((n, k) if trans_b else (k, n)))}
    constants = {} if c_shape is None else {"c": _rand(*c_shape)}
    model = node_model("Gemm", feeds, constants=constants, transA=trans_a, transB=trans_b, alpha=0.5, beta=1.5)
    _pixel(model, feeds)


@pytest.mark.parametrize("c_shape", [(), (1,), (1, 6), (11, 1), (1, 1)])
def test_gemm_broadcasts_c(c_shape):
    feeds = {"a": _rand(11, 7), "b": _rand(7, 6)}
    _pixel(node_model("Gemm", feeds, constants={"c": _rand(*c_shape)}, beta=-2.0), feeds)


def test_gemm_with_device_c_constant_operands_and_a_fused_activation():
    feeds = {"a": _rand(9, 13), "c": _rand(9, 5)}
    model = _chain([helper.make_node("Gemm", ["a", "b", "c"], ["t"], transB=1, alpha=2.0),
                    helper.make_node("Tanh", ["t"], ["y"])], feeds, {"b": _rand(5, 13)})
    assert ws.load_model(model).graph.layers[0].fused_activation
    _pixel(model, feeds)
    feeds = {"b": _rand(13, 5)}
    _pixel(node_model("Gemm", feeds, constants={"a": _rand(13, 9), "c": _rand(5)}, input_order=["a", "b", "c"],
                      transA=1, beta=0.0), feeds)


def test_gemm_column_vector():
    feeds = {"a": _rand(3, 4), "b": _rand(4, 1)}
    _pixel(node_model("Gemm", feeds, constants={"c": _rand(3, 1)}), feeds)


def test_rows_per_fragment_keep_within_the_device_limits():
    limits = get_context().limits
    targets = min(limits["max-color-attachments"], limits["max-color-attachment-bytes-per-sample"] // 16)

    class Rec:
        class ctx:  # noqa: N801 (stands in for the recorder's context)
            limits = {"max-color-attachments": 8, "max-color-attachment-bytes-per-sample": 32}

    assert rows_per_fragment(Rec, 100) == 2  # WebGPU's default limits: two rgba32float targets
    Rec.ctx.limits = limits
    assert rows_per_fragment(Rec, 100) <= min(8, targets) and rows_per_fragment(Rec, 1) == 1
    assert rows_per_fragment(Rec, 3) == min(2, targets)
