"""The cpu backend's ConvTranspose against ONNX Runtime where its taps never overlap (stride beyond the
dilated kernel): taps that cover every output (the 2x2/2 upsampling), taps that leave gaps, output
padding, cropping pads, groups, batches, 1-D and 3-D, with and without a bias; and the overlapping form."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import F, make_model, ort_outputs
from onnx import helper

import wgsentis as ws


@pytest.mark.parametrize("x_shape,w_shape,attrs", [
    ((1, 24, 16, 16), (24, 24, 2, 2), {"strides": [2, 2]}),  # every output from one tap
    ((2, 6, 7, 5), (6, 4, 3, 3), {"strides": [3, 3]}),  # batch, kernel == stride, odd sizes
    ((1, 4, 6, 6), (4, 3, 2, 2), {"strides": [3, 3]}),  # gaps no tap reaches: bias alone there
    ((1, 4, 6, 6), (4, 3, 2, 2), {"strides": [2, 2], "output_padding": [1, 1]}),  # a row and column beyond the taps
    ((1, 4, 6, 6), (4, 3, 2, 2), {"strides": [2, 2], "pads": [1, 0, 0, 1]}),  # cropped
    ((1, 4, 6, 6), (4, 3, 2, 2), {"strides": [4, 4], "dilations": [2, 2]}),  # dilated, disjoint
    ((1, 6, 5, 5), (6, 2, 2, 2), {"strides": [2, 2], "group": 3}),
    ((1, 3, 9), (3, 5, 2), {"strides": [2]}),  # 1-D
    ((1, 2, 3, 4, 5), (2, 3, 2, 2, 2), {"strides": [2, 2, 2]}),  # 3-D
    ((1, 4, 6, 6), (4, 3, 3, 3), {"strides": [2, 2]}),  # overlapping taps: added
])
@pytest.mark.parametrize("bias", [True, False])
def test_conv_transpose_matches_onnxruntime(x_shape, w_shape, attrs, bias):
    rng = np.random.default_rng(31)
    m = w_shape[1] * attrs.get("group", 1)
    inits = {"w": rng.standard_normal(w_shape).astype(np.float32)}
    if bias:
        inits["b"] = rng.standard_normal(m).astype(np.float32)
    node = helper.make_node("ConvTranspose", ["x", "w", "b"] if bias else ["x", "w"], ["y"], name="up", **attrs)
    model = make_model([node], [("x", F, list(x_shape))], [("y", F, None)], inits)
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32)}
    expected = ort_outputs(model, feeds)[0]
    got = ws.Worker(ws.load_model(model), "cpu").run(feeds)["y"]
    assert got.shape == expected.shape and got.flags.c_contiguous
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
