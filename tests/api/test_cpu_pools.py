"""The cpu backend's 2-D pools (separable on flat planes at stride 1, separable on the input when
strided, a plain reduction for a whole-plane MaxPool; averages in ONNX Runtime's order, bit for bit) and LRN split
over rows, against ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import F, I64, make_model, ort_outputs
from onnx import helper

import wgsentis as ws
from wgsentis.ops import pool

CASES = [
    ("MaxPool", (1, 8, 28, 28), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),  # Inception's, separable
    ("MaxPool", (1, 64, 112, 112), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),  # ResNet stem
    ("MaxPool", (2, 3, 13, 11), {"kernel_shape": [3, 2], "strides": [2, 3], "ceil_mode": 1}),
    ("MaxPool", (1, 4, 12, 12), {"kernel_shape": [2, 3], "dilations": [2, 1], "pads": [1, 0, 1, 2]}),
    ("MaxPool", (1, 5, 9, 9), {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ("AveragePool", (1, 8, 17, 17), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ("AveragePool", (1, 8, 17, 17), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    ("AveragePool", (1, 6, 15, 15), {"kernel_shape": [5, 5], "strides": [3, 3], "ceil_mode": 1}),
    ("AveragePool", (2, 2048, 7, 7), {"kernel_shape": [7, 7]}),  # ResNet's final pool: ORT sums it row-major
    ("MaxPool", (1, 16, 6, 6), {"kernel_shape": [6, 6]}),
    ("MaxPool", (1, 3, 10, 9), {"kernel_shape": [3, 2], "dilations": [2, 2], "pads": [2, 1, 2, 1]}),  # dilated, s1
    # strided: dilated, and kernels one tap wide in either direction
    ("MaxPool", (1, 6, 21, 19), {"kernel_shape": [3, 3], "strides": [2, 3], "dilations": [2, 2], "pads": [2, 1, 1, 2]}),
    ("AveragePool", (1, 5, 14, 13), {"kernel_shape": [3, 1], "strides": [2, 2], "pads": [1, 0, 1, 0]}),
    ("MaxPool", (1, 5, 14, 13), {"kernel_shape": [1, 3], "strides": [2, 2]}),
    # big enough to split over two threads: stride 1 (passes over the planes as one flat run) and strided
    ("AveragePool", (2, 48, 80, 80), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ("AveragePool", (1, 40, 96, 160), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
]


@pytest.mark.parametrize("op,x_shape,attrs", CASES)
def test_flat_pools_match_onnxruntime(op, x_shape, attrs, monkeypatch):
    used = []
    original = pool._flat_pool_2d
    monkeypatch.setattr(pool, "_flat_pool_2d", lambda *a, **k: used.append(1) or original(*a, **k))
    model = make_model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", F, list(x_shape))], [("y", F, None)])
    x = np.random.default_rng(5).standard_normal(x_shape).astype(np.float32)
    # (AveragePool: against ORT's own kernel, its graph optimizations off: docs/numerics.md)
    expected = ort_outputs(model, {"x": x}, optimize=op != "AveragePool")[0]
    for threads in (1, 2):
        got = ws.Worker(ws.load_model(model), "cpu", threads=threads, spin_wait=False).run({"x": x})["y"]
        assert got.shape == expected.shape
        if op == "AveragePool":  # summed in ONNX Runtime's order (pool.average_order): bit for bit
            np.testing.assert_array_equal(got, expected)
        else:
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    if op == "AveragePool" and (attrs.get("strides", [1, 1])[-1] > 2 or attrs["kernel_shape"] == list(x_shape[2:])):
        assert not used  # MLAS's generic kernel's order: one row-major running sum, not a separable pass
    else:
        assert used  # the flat form ran (it never returned None on these shapes)


def test_maxpool_indices_keep_the_general_loop():
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    model = make_model([node], [("x", F, [1, 3, 9, 9])], [("y", F, None), ("i", I64, None)])
    x = np.random.default_rng(6).standard_normal((1, 3, 9, 9)).astype(np.float32)
    expected_y, expected_i = ort_outputs(model, {"x": x})
    got = ws.Worker(ws.load_model(model), "cpu").run({"x": x})
    np.testing.assert_array_equal(got["y"], expected_y)
    np.testing.assert_array_equal(got["i"], expected_i)


@pytest.mark.parametrize("shape,size", [((1, 96, 55, 55), 5), ((2, 7, 9, 4), 3), ((1, 6, 1, 5), 3)])
def test_lrn_split_over_rows_matches_onnxruntime(shape, size):
    model = make_model([helper.make_node("LRN", ["x"], ["y"], size=size, alpha=2e-4, beta=0.75, bias=1.5)],
                       [("x", F, list(shape))], [("y", F, None)])
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    expected = ort_outputs(model, {"x": x})[0]
    for threads in (1, 2):
        got = ws.Worker(ws.load_model(model), "cpu", threads=threads, spin_wait=False).run({"x": x})["y"]
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
