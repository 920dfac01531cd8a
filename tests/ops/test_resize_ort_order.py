"""Linear and cubic Resize bit-identical to ONNX Runtime's CPU kernels on random inputs, on every backend.

ONNX leaves the float evaluation order of Resize open; wgsentis follows ORT's (ops/resize.py says how), so a model that
re-quantizes resized tensors many times does not drift away from ORT. Every case here is compared with exact
equality (np.array_equal), on cpu, gpu-compute and gpu-pixel (lavapipe: its shaders do not contract a * b + c,
and the programs keep the products apart from the sums for drivers that would), with no fallback layer on a GPU.
Integer inputs (ORT's float path with truncation, and its fixed-point path for int8/uint8 NHWC-like tensors) are
checked on the cpu backend, which runs them.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import BACKENDS, make_model, ort_outputs
from onnx import helper

import wgsentis as ws
from wgsentis.dtypes import NUMPY_TO_ONNX

RNG = np.random.default_rng(2024)
CTMS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn",
        "half_pixel_symmetric"]
NO_ROI = np.zeros(0, np.float32)


def _run(model, x: np.ndarray, backend: str) -> np.ndarray:
    """wgsentis' output on ``backend``; a GPU backend must run the layer itself."""
    with ws.Worker(ws.load_model(model), backend) as worker:
        y = worker.run({"x": x})["y"]
        if backend != "cpu":
            assert worker.stats()["fallback_layers"] == [], f"{backend} fell back"
    return y


def _check(model, x: np.ndarray, backend: str) -> None:
    expected = ort_outputs(model, {"x": x})[0]
    got = _run(model, x, backend)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    differ = got != expected
    assert not differ.any(), (f"{int(differ.sum())} of {differ.size} elements differ from ORT, "
                              f"at most by {np.abs(got.astype(np.float64) - expected).max()}")


def _model(op: str, x: np.ndarray, constants: dict[str, np.ndarray], opset: int, **attrs):
    """One ``op`` node from x and ``constants`` (initializers, "" for an omitted input) to y of x's type."""
    node = helper.make_node(op, ["x", *constants], ["y"], **attrs)
    kind = NUMPY_TO_ONNX[x.dtype]
    return make_model([node], [("x", kind, x.shape)], [("y", kind, None)],
                      {k: v for k, v in constants.items() if k}, opset=opset)


def _resize(x: np.ndarray, *, scales=None, sizes=None, roi=NO_ROI, **attrs):
    """Resize-19 of x by scales or sizes."""
    constants = {"roi": np.asarray(roi, np.float32), "s": np.asarray(scales if scales is not None else [],
                                                                     np.float32)}
    if sizes is not None:
        constants["z"] = np.asarray(sizes, np.int64)
    return _model("Resize", x, constants, 19, **attrs)


def _random(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) * 4).astype(np.float32)


# (shape, scales or None, sizes or None): NCHW bilinear (both axes, one axis), NHWC-like bilinear, 2-D, 3-D and
# 5-D trilinear; align_corners only where in * scale is whole (elsewhere the spec and ORT disagree on its divisor).
LINEAR_CASES = [
    ((2, 3, 7, 9), (1, 1, 2, 2), None),
    ((2, 3, 7, 8), (1, 1, 3, 0.5), None),
    ((1, 2, 10, 8), (1, 1, 1.5, 1.25), None),
    ((2, 3, 7, 9), (1, 1, 1, 2), None),
    ((2, 3, 7, 9), None, (2, 3, 10, 13)),
    ((2, 3, 12, 9), None, (2, 3, 5, 4)),
    ((2, 7, 8, 3), (1, 2, 0.5, 1), None),
    ((2, 6, 4, 3), None, (2, 9, 11, 3)),
    ((7, 8), (2, 1.5), None),
    ((4, 5, 6), (1.5, 2, 0.5), None),
    ((1, 2, 4, 5, 6), None, (1, 2, 7, 3, 9)),
]
CUBIC_CASES = [
    ((2, 3, 7, 9), (1, 1, 2, 2), None),
    ((2, 3, 8, 12), (1, 1, 0.5, 0.25), None),
    ((1, 2, 10, 8), (1, 1, 1.5, 1.25), None),
    ((2, 3, 7, 9), None, (2, 3, 11, 5)),
    ((7, 9), (2, 1), None),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("ctm", CTMS)
def test_linear(backend, ctm):
    for shape, scales, sizes in LINEAR_CASES:
        x = _random(*shape)
        _check(_resize(x, scales=scales, sizes=sizes, mode="linear", coordinate_transformation_mode=ctm), x, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("ctm", CTMS)
def test_cubic(backend, ctm):
    for shape, scales, sizes in CUBIC_CASES:
        x = _random(*shape)
        _check(_resize(x, scales=scales, sizes=sizes, mode="cubic", coordinate_transformation_mode=ctm), x, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cubic_exclude_outside_and_coefficient(backend):
    x = _random(2, 3, 7, 9)
    for a in (-0.75, -0.5):
        for scales in ((1, 1, 2, 2), (1, 1, 0.6, 1.7)):
            _check(_resize(x, scales=scales, mode="cubic", exclude_outside=1, cubic_coeff_a=a), x, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_crop_and_resize(backend, mode):
    x = _random(2, 3, 7, 9)
    roi = [0, 0, 0.1, -0.2, 1, 1, 0.8, 1.3]
    _check(_resize(x, sizes=(2, 3, 10, 13), roi=roi, mode=mode, coordinate_transformation_mode="tf_crop_and_resize",
                   extrapolation_value=-3.0), x, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_axes_and_aspect_ratio_policy(backend):
    x = _random(2, 3, 7, 9)
    for policy in ("not_larger", "not_smaller"):
        _check(_resize(x, sizes=(10, 13), axes=[2, 3], keep_aspect_ratio_policy=policy, mode="linear"), x, backend)
    _check(_resize(x, scales=(3, 2.5), axes=[3, 2], mode="cubic"), x, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_older_opsets(backend):
    """Resize-10 and Upsample-9 linear: asymmetric coordinates, scales only."""
    x = _random(2, 3, 5, 6)
    scales = np.array([1, 1, 2, 1.5], np.float32)
    _check(_model("Resize", x, {"s": scales}, 10, mode="linear"), x, backend)
    _check(_model("Upsample", x, {"s": scales}, 9, mode="linear"), x, backend)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int32])
@pytest.mark.parametrize("shape,scales,sizes", [
    ((2, 3, 7, 9), (1, 1, 1.5, 2.5), None),  # float weights, truncated
    ((2, 7, 9, 3), (1, 1.5, 2.5, 1), None),  # NHWC-like: the fixed-point path for int8 / uint8
    ((2, 6, 5, 4), None, (2, 4, 11, 4)),
    ((1, 2, 4, 5, 6), (1, 1, 2, 1.5, 0.5), None),
])
def test_integer_linear_on_cpu(dtype, shape, scales, sizes):
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)
    for ctm in ("half_pixel", "pytorch_half_pixel", "asymmetric"):
        _check(_resize(x, scales=scales, sizes=sizes, mode="linear", coordinate_transformation_mode=ctm), x, "cpu")
