"""The cpu backend's kn2row convolution against ONNX Runtime: stride-1 layers with at most half as many
output as input channels, and small-plane layers Winograd would take; kernels 3x3, 5x5 and 1x3, dilation,
asymmetric and no pads, batches, no bias, the fused residual and activation, one and two threads in both
thread modes, column blocks down to the minimum; the stacked weights built once per layer; and the
shapes it leaves to the other paths."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import F, kept_between_runs, make_model, ort_outputs
from onnx import helper

import wgsentis as ws
from wgsentis.ops import conv, conv_im2col


def _model(x_shape, w_shape, attrs, *, bias=True, residual=False, act="Relu"):
    rng = np.random.default_rng(41)
    inits = {"w": (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(np.float32)}
    inputs = ["x", "w"]
    if bias:
        inits["b"] = rng.standard_normal(w_shape[0]).astype(np.float32)
        inputs.append("b")
    nodes = [helper.make_node("Conv", inputs, ["c"], name="conv", **attrs)]
    graph_inputs = [("x", F, list(x_shape))]
    source = "c"
    if residual:
        nodes.append(helper.make_node("Add", ["c", "z"], ["s"], name="add"))
        graph_inputs.append(("z", F, None))
        source = "s"
    nodes.append(helper.make_node(act, [source], ["y"], name="act"))
    return make_model(nodes, graph_inputs, [("y", F, None)], inits)


def _spy(monkeypatch) -> list[int]:
    calls: list[int] = []
    original = conv.conv_kn2row
    monkeypatch.setattr(conv, "conv_kn2row", lambda *a, **k: calls.append(1) or original(*a, **k))
    return calls


@pytest.mark.parametrize("x_shape,w_shape,attrs,bias,residual", [
    ((1, 128, 28, 28), (32, 128, 3, 3), {"pads": [1, 1, 1, 1]}, True, False),  # DenseNet's layer
    ((2, 48, 13, 17), (24, 48, 3, 3), {"pads": [1, 1, 1, 1]}, True, False),  # a batch, odd sizes
    ((1, 40, 15, 15), (16, 40, 5, 5), {"pads": [2, 2, 2, 2]}, False, False),  # 5x5, no bias
    ((1, 32, 20, 20), (8, 32, 3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}, True, False),
    ((1, 32, 12, 14), (16, 32, 3, 3), {"pads": [0, 2, 1, 0]}, True, False),  # asymmetric pads
    ((1, 32, 12, 12), (16, 32, 3, 3), {}, True, False),  # no pads: outputs shrink
    ((1, 32, 9, 11), (16, 32, 1, 3), {"pads": [0, 1, 0, 1]}, True, False),  # 1x3
    ((1, 64, 16, 16), (32, 64, 3, 3), {"auto_pad": "SAME_UPPER"}, True, True),  # FusedConv
    ((1, 128, 14, 14), (128, 128, 3, 3), {"pads": [1, 1, 1, 1]}, True, False),  # Winograd's small plane
])
@pytest.mark.parametrize("threads,spin_wait", [(1, True), (2, True), (2, False)])
def test_kn2row_matches_onnxruntime(x_shape, w_shape, attrs, bias, residual, threads, spin_wait, monkeypatch):
    calls = _spy(monkeypatch)
    monkeypatch.setattr(conv_im2col, "KN2ROW_MIN_BLOCK_COLUMNS", 16)
    monkeypatch.setattr(conv_im2col, "KN2ROW_BLOCK_BYTES", 64 << 10)  # several column blocks per image
    model = _model(x_shape, w_shape, attrs, bias=bias, residual=residual)
    rng = np.random.default_rng(42)
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32)}
    if residual:
        feeds["z"] = rng.standard_normal((x_shape[0], w_shape[0], *x_shape[2:])).astype(np.float32)
    expected = ort_outputs(model, feeds)[0]
    wg = ws.load_model(model)
    if residual:
        assert [layer.op_type for layer in wg.layers] == ["FusedConv"]
    got = ws.Worker(wg, "cpu", threads=threads, spin_wait=spin_wait).run(feeds)["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    assert calls


@pytest.mark.parametrize("act", ["HardSwish", "Sigmoid"])  # applied by the engine after the layer
def test_kn2row_with_other_activations(act, monkeypatch):
    calls = _spy(monkeypatch)
    model = _model((1, 64, 10, 10), (16, 64, 3, 3), {"pads": [1, 1, 1, 1]}, act=act)
    x = np.random.default_rng(43).standard_normal((1, 64, 10, 10)).astype(np.float32)
    np.testing.assert_allclose(ws.Worker(ws.load_model(model), "cpu").run({"x": x})["y"],
                               ort_outputs(model, {"x": x})[0], rtol=1e-4, atol=1e-5)
    assert calls


def test_kn2row_weights_are_stacked_once_per_layer():
    model = _model((1, 64, 12, 12), (16, 64, 3, 3), {"pads": [1, 1, 1, 1]})
    x = np.random.default_rng(44).standard_normal((1, 64, 12, 12)).astype(np.float32)
    kept, first, second = kept_between_runs(model, {"x": x}, "kn2row_weights", 1)
    assert kept.shape == (9 * 16, 64)
    np.testing.assert_array_equal(first, second)


@pytest.mark.parametrize("x_shape,w_shape,attrs", [
    ((1, 32, 16, 16), (32, 32, 3, 3), {"pads": [1, 1, 1, 1]}),  # as many outputs as inputs: im2col
    ((1, 64, 28, 28), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]}),  # larger plane: Winograd
    ((1, 64, 16, 16), (16, 64, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),  # strided
    ((1, 64, 16, 16), (16, 64, 1, 1), {}),  # 1x1: one product
    ((1, 64, 16, 16), (16, 16, 3, 3), {"pads": [1, 1, 1, 1], "group": 4}),  # grouped
])
def test_kn2row_leaves_other_shapes(x_shape, w_shape, attrs, monkeypatch):
    calls = _spy(monkeypatch)
    model = _model(x_shape, w_shape, attrs)
    x = np.random.default_rng(45).standard_normal(x_shape).astype(np.float32)
    np.testing.assert_allclose(ws.Worker(ws.load_model(model), "cpu").run({"x": x})["y"],
                               ort_outputs(model, {"x": x})[0], rtol=1e-4, atol=1e-4)
    assert not calls
