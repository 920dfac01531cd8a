"""The cpu backend's two depthwise convolution forms (tap by tap, and gathered columns times a product
per channel) against ONNX Runtime, on the shapes that pick each form."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from helpers import F, make_model
from onnx import helper

import wgsentis as ws
from wgsentis.ops import conv


@pytest.mark.parametrize("x_shape,kernel,attrs,form", [
    ((1, 12, 14, 14), 5, {"pads": [2, 2, 2, 2]}, "cols"),  # PP-LCNet's 5x5
    ((2, 6, 9, 11), 3, {"pads": [1, 0, 2, 1], "strides": [2, 1], "dilations": [1, 2]}, "cols"),
    ((1, 5, 7, 7), 3, {"auto_pad": "SAME_UPPER"}, "cols"),
    ((1, 4, 70, 70), 3, {"pads": [1, 1, 1, 1]}, "taps"),  # 4900 outputs a plane: tap by tap
    ((1, 4, 90, 90), 3, {"pads": [1, 1, 1, 1], "strides": [2, 2]}, "taps"),  # 2025, strided
])
def test_depthwise_forms_match_onnxruntime(x_shape, kernel, attrs, form, monkeypatch):
    c = x_shape[1]
    rng = np.random.default_rng(11)
    inits = {"w": rng.standard_normal((c, 1, kernel, kernel)).astype(np.float32),
             "b": rng.standard_normal(c).astype(np.float32)}
    model = make_model([helper.make_node("Conv", ["x", "w", "b"], ["y"], group=c, **attrs)],
                       [("x", F, list(x_shape))], [("y", F, None)], inits)
    used = []
    for name in ("_conv_depthwise_2d_cols", "_conv_depthwise_2d"):
        original = getattr(conv, name)
        monkeypatch.setattr(conv, name, lambda *a, _o=original, _n=name, **k: used.append(_n) or _o(*a, **k))
    x = rng.standard_normal(x_shape).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": x})[0]
    for threads in (1, 2):
        got = ws.Worker(ws.load_model(model), "cpu", threads=threads).run({"x": x})["y"]
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    assert used and set(used) == {"_conv_depthwise_2d_cols" if form == "cols" else "_conv_depthwise_2d"}
