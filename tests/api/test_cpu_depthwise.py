"""The cpu backend's three depthwise convolution forms (tap by tap, gathered columns times a product
per channel, and channels-last) against ONNX Runtime, on the shapes that pick each form."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import F, make_model, ort_outputs, spy_scratch
from onnx import helper

import wgsentis as ws
from wgsentis.ops import conv, conv_depthwise, conv_windows


@pytest.mark.parametrize("x_shape,kernel,attrs,form", [
    ((1, 12, 14, 14), 5, {"pads": [2, 2, 2, 2]}, "cols"),  # PP-LCNet's 5x5
    ((2, 6, 9, 11), 3, {"pads": [1, 0, 2, 1], "strides": [2, 1], "dilations": [1, 2]}, "cols"),
    ((1, 5, 7, 7), 3, {"auto_pad": "SAME_UPPER"}, "cols"),
    ((1, 4, 70, 70), 3, {"pads": [1, 1, 1, 1]}, "taps"),  # 4900 outputs a plane: tap by tap
    ((1, 4, 90, 90), 3, {"pads": [1, 1, 1, 1], "strides": [2, 2]}, "taps"),  # 2025, strided
    ((1, 64, 7, 7), 5, {"pads": [2, 2, 2, 2]}, "channels_last"),  # PP-LCNet's 512ch@7, fewer channels
    ((2, 72, 13, 11), 3, {"pads": [1, 0, 2, 1], "strides": [2, 1], "dilations": [1, 2]}, "channels_last"),
    ((1, 128, 9, 9), 3, {"auto_pad": "SAME_LOWER", "strides": [2, 2]}, "channels_last"),
    ((1, 80, 11, 12), 3, {"pads": [2, 1, 2, 3], "dilations": [2, 2]}, "channels_last"),  # dilated, stride 1
    # 5x5 on a 40x40 plane: each thread's passes are long enough to split over two threads
    ((1, 128, 40, 40), 5, {"pads": [2, 2, 2, 2]}, "channels_last"),
])
def test_depthwise_forms_match_onnxruntime(x_shape, kernel, attrs, form, monkeypatch):
    c = x_shape[1]
    rng = np.random.default_rng(11)
    inits = {"w": rng.standard_normal((c, 1, kernel, kernel)).astype(np.float32),
             "b": rng.standard_normal(c).astype(np.float32)}
    model = make_model([helper.make_node("Conv", ["x", "w", "b"], ["y"], group=c, **attrs)],
                       [("x", F, list(x_shape))], [("y", F, None)], inits)
    used = []
    forms = {"conv_depthwise_2d_cols": "cols", "conv_depthwise_2d": "taps",
             "conv_depthwise_2d_channels_last": "channels_last"}
    for name in forms:
        original = getattr(conv, name)
        monkeypatch.setattr(conv, name, lambda *a, _o=original, _n=name, **k: used.append(_n) or _o(*a, **k))
    x = rng.standard_normal(x_shape).astype(np.float32)
    expected = ort_outputs(model, {"x": x})[0]
    for threads in (1, 2):
        got = ws.Worker(ws.load_model(model), "cpu", threads=threads, spin_wait=False).run({"x": x})["y"]
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    assert used and {forms[name] for name in used} == {form}


@pytest.mark.parametrize("activation", ["Relu", "HardSwish"])
def test_channels_last_depthwise_with_residual_and_activation(activation):
    """FusedConv (depthwise + residual + activation) on the channels-last form, batch 2, 1 and 2 threads."""
    c, shape = 96, (2, 96, 10, 10)
    rng = np.random.default_rng(5)
    inits = {"w": rng.standard_normal((c, 1, 3, 3)).astype(np.float32),
             "b": rng.standard_normal(c).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=c, pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "x"], ["s"]),
             helper.make_node(activation, ["s"], ["y"])]
    model = make_model(nodes, [("x", F, list(shape))], [("y", F, None)], inits, opset=14)
    loaded = ws.load_model(model)
    assert [layer.op_type for layer in loaded.layers] == ["FusedConv"]
    assert conv_depthwise.depthwise_channels_last_applies(c, (3, 3), (10, 10))
    x = rng.standard_normal(shape).astype(np.float32)
    expected = ort_outputs(model, {"x": x})[0]
    for threads in (1, 2):
        got = ws.Worker(loaded, "cpu", threads=threads, spin_wait=False).run({"x": x})["y"]
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("spin_wait", [True, False])
@pytest.mark.parametrize("block_channels", [1, 3, 64])  # one channel, a ragged last block, all at once
def test_tap_by_tap_depthwise_in_blocks_of_channels(block_channels, spin_wait, monkeypatch):
    """The tap-by-tap form runs each thread's channels in blocks (DEPTHWISE_BLOCK_BYTES of accumulator);
    every block size gives ONNX Runtime's result, bias and fused activation included, batch 2."""
    c, shape = 8, (2, 8, 66, 66)
    rng = np.random.default_rng(12)
    inits = {"w": rng.standard_normal((c, 1, 3, 3)).astype(np.float32),
             "b": rng.standard_normal(c).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=c, pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c"], ["y"])]
    model = make_model(nodes, [("x", F, list(shape))], [("y", F, None)], inits)
    geo = conv_windows.FlatWindows((66, 66), (3, 3), (2, 2), (1, 1), (1, 1), (33, 33))
    monkeypatch.setattr(conv_depthwise, "DEPTHWISE_BLOCK_BYTES", block_channels * geo.length * 4)
    requests = spy_scratch(monkeypatch)
    x = rng.standard_normal(shape).astype(np.float32)
    expected = ort_outputs(model, {"x": x})[0]
    for threads in (1, 2):
        requests.clear()
        got = ws.Worker(ws.load_model(model), "cpu", threads=threads, spin_wait=spin_wait).run({"x": x})["y"]
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
        blocks = [shape[0] for key, shape in requests if key == "dw_tmp"]
        assert blocks and max(blocks) == min(block_channels, 2 * c) and sum(blocks) == 2 * c
