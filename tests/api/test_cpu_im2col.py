"""The cpu backend's im2col products and splits: the convolution gathered and multiplied in chunks of
output rows (a band of them per thread), ``par_matmul``'s row and column splits and ``run_split``'s
parts, against ONNX Runtime and numpy."""

from __future__ import annotations

import itertools
import threading

import numpy as np
import pytest
from helpers import F, make_model, ort_outputs, spy_scratch
from onnx import helper

import wgsentis as ws
from wgsentis.ops import conv_im2col
from wgsentis.ops.parallel import par_matmul, run_split


@pytest.mark.parametrize("x_shape,w_shape,attrs,bias", [
    ((1, 16, 64, 64), (64, 16, 3, 3), {"pads": [1, 1, 1, 1]}, True),  # SqueezeNet's expand 3x3
    ((1, 3, 160, 160), (32, 3, 7, 7), {"pads": [3, 2, 3, 1], "strides": [2, 2]}, False),  # a ResNet stem
    ((1, 24, 75, 67), (24, 24, 3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}, True),
    ((1, 64, 4000), (64, 64, 9), {"pads": [4, 4]}, True),  # 1-D
    ((1, 8, 16, 32, 32), (32, 8, 3, 3, 3), {"pads": [1] * 6}, False),  # 3-D
])
@pytest.mark.parametrize("chunk_bytes", [conv_im2col.IM2COL_CHUNK_BYTES, 1 << 16])  # whole bands, many chunks
def test_im2col_bands_match_onnxruntime(x_shape, w_shape, attrs, bias, chunk_bytes, monkeypatch):
    rng = np.random.default_rng(3)
    inits = {"w": rng.standard_normal(w_shape).astype(np.float32)}
    inputs = ["x", "w"]
    if bias:
        inits["b"] = rng.standard_normal(w_shape[0]).astype(np.float32)
        inputs.append("b")
    nodes = [helper.make_node("Conv", inputs, ["c"], **attrs), helper.make_node("Relu", ["c"], ["y"])]
    model = make_model(nodes, [("x", F, list(x_shape))], [("y", F, None)], inits)
    monkeypatch.setattr(conv_im2col, "IM2COL_CHUNK_BYTES", chunk_bytes)
    monkeypatch.setattr(conv_im2col, "IM2COL_MIN_CHUNK_COLUMNS", 1)  # the chunks that the bytes alone give
    banded = []
    original = conv_im2col.im2col_gemm_by_rows
    monkeypatch.setattr(conv_im2col, "im2col_gemm_by_rows", lambda *a: banded.append(a[4]) or original(*a))
    x = rng.standard_normal(x_shape).astype(np.float32)
    expected = ort_outputs(model, {"x": x})[0]
    for threads in (1, 2):
        got = ws.Worker(ws.load_model(model), "cpu", threads=threads, spin_wait=False).run({"x": x})["y"]
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-3)
        assert banded[-1] == threads  # chunked on one thread, a band per thread on two


@pytest.mark.parametrize("spin_wait", [True, False])
def test_im2col_chunks_keep_a_minimum_of_columns(spin_wait, monkeypatch):
    """Deep columns (128ch x 5x5 = 3200 rows) in few bytes would give products of one output row; each
    chunk's product keeps at least IM2COL_MIN_CHUNK_COLUMNS, and the results still match ONNX Runtime."""
    x_shape, w_shape = (1, 128, 12, 12), (96, 128, 5, 5)  # more than half the input channels: not kn2row
    rng = np.random.default_rng(4)
    inits = {"w": (rng.standard_normal(w_shape) / 56).astype(np.float32),
             "b": rng.standard_normal(96).astype(np.float32)}
    model = make_model([helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[2, 2, 2, 2])],
                       [("x", F, list(x_shape))], [("y", F, None)], inits)
    monkeypatch.setattr(conv_im2col, "IM2COL_CHUNK_BYTES", 1 << 18)  # one output row (12 columns) by the bytes alone
    monkeypatch.setattr(conv_im2col, "IM2COL_MIN_CHUNK_COLUMNS", 60)  # 5 output rows of 12
    requests = spy_scratch(monkeypatch)
    x = rng.standard_normal(x_shape).astype(np.float32)
    got = ws.Worker(ws.load_model(model), "cpu", threads=1, spin_wait=spin_wait).run({"x": x})["y"]
    np.testing.assert_allclose(got, ort_outputs(model, {"x": x})[0], rtol=1e-4, atol=1e-3)
    assert [shape[1] for key, shape in requests if key == "im2col_chunk"] == [60, 60, 24]  # rows 0-4, 5-9, 10-11


def test_im2col_bands_carry_a_residual():
    """FusedConv (conv + residual + Relu) on the banded path: each band adds its own part of the residual."""
    rng = np.random.default_rng(4)
    inits = {"w": rng.standard_normal((32, 16, 3, 3)).astype(np.float32),
             "b": rng.standard_normal(32).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "z"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    model = make_model(nodes, [("x", F, [1, 16, 80, 80]), ("z", F, [1, 32, 80, 80])], [("y", F, None)], inits)
    loaded = ws.load_model(model)
    assert [layer.op_type for layer in loaded.layers] == ["FusedConv"]
    feeds = {"x": rng.standard_normal((1, 16, 80, 80)).astype(np.float32),
             "z": rng.standard_normal((1, 32, 80, 80)).astype(np.float32)}
    expected = ort_outputs(model, feeds)[0]
    got = ws.Worker(loaded, "cpu", threads=2, spin_wait=False).run(feeds)["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("m,k,n", [(64, 147, 3001), (300, 256, 250), (1000, 512, 40), (8, 900, 9000)])
def test_par_matmul_splits_match_numpy(m, k, n):
    rng = np.random.default_rng(m)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    parts = []

    def epilogue(part, rows, cols):
        parts.append((rows, cols))
        part *= 2

    got = par_matmul(a, b, 2, epilogue)
    np.testing.assert_allclose(got, 2 * (a @ b), rtol=1e-4, atol=1e-3)
    assert len(parts) == 2
    split_rows = parts[0][0] != slice(None)
    assert split_rows == (m > n)  # along the larger of M and N


@pytest.mark.parametrize("count,threads,align", [(100, 2, 16), (33, 2, 16), (31, 2, 16), (7, 3, 1), (1000, 3, 16)])
def test_run_split_covers_the_range_on_aligned_bounds(count, threads, align):
    seen = []
    run_split(count, threads, lambda lo, hi: seen.append((lo, hi)), align=align)
    seen.sort()
    assert seen[0][0] == 0 and seen[-1][1] == count
    assert all(a[1] == b[0] for a, b in itertools.pairwise(seen))
    assert all(lo < hi for lo, hi in seen)
    assert all(lo % align == 0 for lo, _ in seen)
    assert len(seen) == max(1, min(threads, count // align))


def test_run_split_gives_the_calling_thread_the_larger_part():
    """The pool thread starts late and runs slower beside the caller, so the caller takes more."""
    caller = threading.current_thread()
    parts = {}
    run_split(1000, 2, lambda lo, hi: parts.__setitem__(threading.current_thread() is caller, hi - lo))
    assert parts[True] + parts[False] == 1000
    assert parts[True] > parts[False]
