"""The cpu backend's Winograd F(4x4, 3x3) convolution against ONNX Runtime: exact and partial edge tiles,
asymmetric pads, batches, no bias, the fused residual; the weights transformed once per layer; and the
shapes it leaves to im2col."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from helpers import F, make_model
from onnx import helper

import wgsentis as ws
from wgsentis.ops import conv


def _model(x_shape, m, attrs, *, bias=True, residual=False):
    rng = np.random.default_rng(21)
    c = x_shape[1]
    inits = {"w": (rng.standard_normal((m, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)}
    inputs = ["x", "w"]
    if bias:
        inits["b"] = rng.standard_normal(m).astype(np.float32)
        inputs.append("b")
    nodes = [helper.make_node("Conv", inputs, ["c"], name="conv", **attrs)]
    graph_inputs = [("x", F, list(x_shape))]
    if residual:
        nodes.append(helper.make_node("Add", ["c", "z"], ["s"], name="add"))
        nodes.append(helper.make_node("Relu", ["s"], ["y"], name="relu"))
        graph_inputs.append(("z", F, None))
    else:
        nodes.append(helper.make_node("Relu", ["c"], ["y"], name="relu"))
    return make_model(nodes, graph_inputs, [("y", F, None)], inits)


@pytest.mark.parametrize("x_shape,m,attrs,bias,residual", [
    ((1, 64, 28, 28), 64, {"pads": [1, 1, 1, 1]}, True, False),  # whole tiles
    ((2, 64, 26, 29), 48, {"pads": [1, 1, 1, 1]}, True, False),  # partial edge tiles, a batch
    ((1, 64, 28, 27), 32, {"pads": [0, 2, 1, 0]}, False, False),  # asymmetric pads, no bias
    ((1, 64, 27, 27), 32, {"auto_pad": "SAME_UPPER"}, True, True),  # FusedConv (residual add)
    ((1, 64, 30, 30), 32, {}, True, False),  # no padding at all
    ((1, 128, 12, 12), 64, {"pads": [1, 1, 1, 1]}, True, False),  # 9 tiles, no overhang, weights in cache
    ((1, 64, 14, 14), 16, {"pads": [1, 1, 1, 1]}, True, False),  # 16 tiles, 31% overhang
])
def test_winograd_matches_onnxruntime(x_shape, m, attrs, bias, residual, monkeypatch):
    calls = []
    original = conv._conv_winograd_3x3
    monkeypatch.setattr(conv, "_conv_winograd_3x3", lambda *a, **k: calls.append(1) or original(*a, **k))
    model = _model(x_shape, m, attrs, bias=bias, residual=residual)
    rng = np.random.default_rng(22)
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32)}
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    if residual:  # SAME_UPPER keeps the spatial size
        feeds["z"] = rng.standard_normal((x_shape[0], m, x_shape[2], x_shape[3])).astype(np.float32)
    expected = session.run(None, feeds)[0]
    wg = ws.load_model(model)
    if residual:
        assert [layer.op_type for layer in wg.layers] == ["FusedConv"]
    for threads in (1, 2):
        got = ws.Worker(wg, "cpu", threads=threads).run(feeds)["y"]
        rel = np.linalg.norm(got - expected) / np.linalg.norm(expected)
        assert rel < 1e-5, rel
        np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-4)
    assert calls


def test_winograd_weights_are_transformed_once_per_layer(monkeypatch):
    transforms = []
    original = conv.winograd_weights
    monkeypatch.setattr(conv, "winograd_weights", lambda w: transforms.append(1) or original(w))
    model = _model((1, 64, 28, 28), 32, {"pads": [1, 1, 1, 1]})
    x = np.random.default_rng(23).standard_normal((1, 64, 28, 28)).astype(np.float32)
    with ws.Worker(ws.load_model(model), "cpu") as worker:
        first = worker.run({"x": x})["y"]
        second = worker.run({"x": x})["y"]
    np.testing.assert_array_equal(first, second)
    assert len(transforms) == 1


@pytest.mark.parametrize("x_shape,m,attrs", [
    ((1, 64, 7, 7), 64, {"pads": [1, 1, 1, 1]}),  # 4 tiles: the transformed weights would not be reused
    ((1, 128, 13, 13), 128, {"pads": [1, 1, 1, 1]}),  # 13x13 outputs computed as 16x16: 51% overhang
    ((1, 512, 12, 12), 512, {"pads": [1, 1, 1, 1]}),  # 9 tiles, 38 MB of transformed weights
    ((1, 64, 28, 28), 8, {"pads": [1, 1, 1, 1]}),  # too few output channels
    ((1, 32, 28, 28), 64, {"pads": [1, 1, 1, 1]}),  # too few input channels
    ((1, 64, 16, 16), 64, {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ((1, 64, 16, 16), 64, {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
])
def test_winograd_leaves_other_shapes_to_im2col(x_shape, m, attrs, monkeypatch):
    calls = []
    original = conv._conv_winograd_3x3
    monkeypatch.setattr(conv, "_conv_winograd_3x3", lambda *a, **k: calls.append(1) or original(*a, **k))
    model = _model(x_shape, m, attrs)
    x = np.random.default_rng(24).standard_normal(x_shape).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(ws.Worker(ws.load_model(model), "cpu").run({"x": x})["y"],
                               session.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
    assert not calls
