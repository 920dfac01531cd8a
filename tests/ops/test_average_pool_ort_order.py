"""AveragePool bit-identical to ONNX Runtime's CPU kernel (MLAS) on random inputs, on every backend.

ONNX leaves the order in which an average sums its window open; wgsentis follows ORT's (pool.average_order):
column sums first where MLAS's vector kernel runs (2-D and 3-D, a last stride of at most 2), one row-major
running sum where its other kernels do (1-D, wider strides, a window over the whole input); then a division by
the count. Quantized models that re-round pooled values then stay with ORT.
Compared with exact equality on cpu, gpu-compute and gpu-pixel, with no fallback layer on a GPU, against ORT with
its graph optimizations off: with them on, its NCHWc transform gives pools of 16 channels or more its blocked-layout
kernels (``wide-channels`` below shows them differing from its own NCHW kernel), as quantized models are compared
with optimizations off anyway.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import BACKENDS, make_model, ort_outputs
from onnx import TensorProto, helper

import wgsentis as ws

RNG = np.random.default_rng(77)

# name -> (input shape, AveragePool attributes)
CASES: dict[str, tuple[tuple[int, ...], dict]] = {
    "3x3-s1-pad": ((1, 8, 20, 20), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    "3x3-s1-pad-include": ((1, 8, 20, 20), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    "2x2-s2": ((2, 8, 21, 19), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    "3x3-s2-pad": ((1, 8, 21, 19), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "5x5-s3-generic": ((1, 8, 21, 19), {"kernel_shape": [5, 5], "pads": [2, 2, 2, 2], "strides": [3, 3]}),
    "5x3-mixed-strides": ((1, 4, 20, 20), {"kernel_shape": [5, 3], "pads": [2, 1, 2, 1], "strides": [1, 3]}),
    "7x7-s1-wide": ((1, 4, 12, 40), {"kernel_shape": [7, 7], "pads": [3, 3, 3, 3]}),
    "1d": ((2, 6, 50), {"kernel_shape": [4], "pads": [1, 2], "strides": [2]}),
    "3d": ((1, 4, 6, 9, 10), {"kernel_shape": [3, 2, 3], "pads": [1, 0, 1, 1, 1, 1], "strides": [1, 2, 2]}),
    "whole-input": ((2, 16, 7, 9), {"kernel_shape": [7, 9]}),
    "ceil": ((1, 8, 20, 21), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    "wide-channels": ((2, 48, 40, 40), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
}


def _model(shape: tuple[int, ...], attrs: dict):
    node = helper.make_node("AveragePool", ["x"], ["y"], **attrs)
    return make_model([node], [("x", TensorProto.FLOAT, list(shape))], [("y", TensorProto.FLOAT, None)])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(CASES))
def test_average_pool_is_bit_identical_to_onnxruntime(backend, case):
    shape, attrs = CASES[case]
    x = RNG.standard_normal(shape).astype(np.float32)
    model = _model(shape, attrs)
    expected = ort_outputs(model, {"x": x}, optimize=False)[0]
    with ws.Worker(ws.load_model(model), backend) as worker:
        got = worker.run({"x": x})["y"]
        if backend != "cpu":
            assert worker.stats()["fallback_layers"] == [], f"{backend} fell back"
    assert got.shape == expected.shape
    differ = got != expected
    assert not differ.any(), (f"{int(differ.sum())} of {differ.size} elements differ from ORT, "
                              f"at most by {np.abs(got.astype(np.float64) - expected).max()}")
    if case == "wide-channels":  # ORT's own optimized graph sums otherwise (its NCHWc pooling kernel)
        assert (ort_outputs(model, {"x": x})[0] != expected).any()
