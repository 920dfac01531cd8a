"""Numpy helpers the elementwise kernels and the activation records share: narrow float types (bfloat16,
float8 from ml_dtypes) computed in float32, a vectorised erf, the accumulator of long sums (``sum_dtype``), and
ONNX Runtime's order of a row sum (``ort_row_sums``)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np


def is_narrow(dtype: np.dtype) -> bool:
    """True for the types the kernels compute in float32 and round back: ml_dtypes types (bfloat16, float8, int4,
    ...) that numpy's ufuncs handle poorly, and float16, whose numpy ufuncs round after every internal step (exp
    overflows past 11, so a float16 Sigmoid gave 0 at -12) where ONNX Runtime, and the GPU backends, compute in
    float32 and round once, at the output."""
    return dtype.kind == "V" or dtype == np.float16


def float_kernel(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn(ctx, x, *args, **kwargs)`` run in float32 when its first input is a narrow float, then cast
    back; a 0-d input runs as shape (1,) so the in-place ``out=`` patterns never meet a numpy scalar.
    Returns the wrapped kernel."""

    @functools.wraps(fn)
    def wrapper(ctx, x, *args, **kwargs):
        if x.ndim == 0:
            return np.asarray(wrapper(ctx, x.reshape(1), *args, **kwargs)).reshape(())
        if is_narrow(x.dtype):
            narrow = x.dtype
            args = tuple(a.astype(np.float32) if isinstance(a, np.ndarray) and is_narrow(a.dtype) else a
                         for a in args)
            return np.asarray(fn(ctx, x.astype(np.float32), *args, **kwargs)).astype(narrow)
        return fn(ctx, x, *args, **kwargs)

    return wrapper


# A sum of at least this many elements per output accumulates in float64 (``sum_dtype``). numpy sums a float32
# axis pairwise only where it is contiguous; along a strided axis (axis 0 of an (N, 4) tensor) it accumulates in
# order, an error that grows with N: a Softmax over axis 0 of (9e6, 4) had column sums of 1.0156. Below the bound
# the sums keep numpy's float32 order (the fast path, and the order the tests matching ONNX Runtime pin); above it
# float64 makes the error independent of the length (measured 1e3..9e6: ~1e-7 relative) for ~1.5x the sum's time.
LONG_SUM = 4096


def sum_dtype(x: np.ndarray, axes: int | tuple[int, ...] | None) -> np.dtype | None:
    """The accumulator for summing ``x`` over ``axes`` (None: all): float64 where x is a float of at most 32 bits
    and each output sums ``LONG_SUM`` elements or more, else None (numpy's own, the input's float type); the
    caller rounds the result back to its type once."""
    if x.dtype.kind != "f" or x.dtype.itemsize > 4:
        return None
    if axes is None:
        count = x.size
    else:
        count = math.prod(x.shape[a] for a in ((axes,) if isinstance(axes, int) else axes))
    return np.dtype(np.float64) if count >= LONG_SUM else None


# Rational approximation of erf on [-4, 4] (Eigen's float32 erf): x * P(x^2) / Q(x^2), highest
# power first; beyond |x| = 4, erf is +-1 in float32. Max error about 4e-7 against math.erf.
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
          -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
          -1.42647390514189e-02)


def erf(x: np.ndarray) -> np.ndarray:
    """Error function, vectorised: exact (math.erf) for float64, a float32 rational approximation
    for every other type (narrower floats are computed in float32)."""
    x = np.asarray(x)
    if x.dtype == np.float64:
        return np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64)
    if x.dtype != np.float32:
        return erf(x.astype(np.float32)).astype(x.dtype)
    xc = np.clip(x, -4.0, 4.0)
    x2 = xc * xc
    num = np.full_like(xc, _ERF_P[0])
    for c in _ERF_P[1:]:
        num *= x2
        num += c
    num *= xc
    den = np.full_like(xc, _ERF_Q[0])
    for c in _ERF_Q[1:]:
        den *= x2
        den += c
    num /= den
    return num


def ort_row_sums(rows: np.ndarray) -> np.ndarray:
    """The float32 sum of each row of ``rows`` (R, n) in ONNX Runtime's order, bit for bit: its CPU ReduceSum and
    ReduceMean over trailing axes sum each row with Eigen's vectorised redux (SSE packets of 4 floats): the row's
    first elements up to a 16-byte boundary (its buffer is aligned, so row i starts i * n floats in) are set
    aside, two packet accumulators take alternate packets of 4 in order, an odd last packet joins the first, the
    two are added lane by lane and the lanes reduced as (l0 + l2) + (l1 + l3), and the set-aside head, then the
    tail past the last whole packet, are added one by one; a row too short for one packet sums in order. numpy's
    pairwise sum rounds differently, and a dynamically quantized transformer re-quantizes every mean it feeds an
    RMS or layer norm with (a code one step off there carried a T5 encoder 2e-2 from ORT). Measured identical to
    ORT 1.31 on rows of 3 to 4095 elements at every alignment."""
    rows = np.asarray(rows, np.float32)
    count, n = rows.shape
    out = np.empty(count, np.float32)
    if n % 4 == 0:
        groups: list[tuple[int, Any]] = [(0, slice(None))]
    else:
        starts = (-(np.arange(count) * n)) % 4  # floats before each row's first 16-byte boundary
        groups = [(int(start), starts == start) for start in np.unique(starts)]
    for start, which in groups:
        part = rows[which]
        packets = (n - start) // 4
        if packets <= 0:  # (a row shorter than its head: no packet either)
            total = part[:, 0].copy()
            for j in range(1, n):
                total += part[:, j]
            out[which] = total
            continue
        pairs = packets // 2 * 2
        if packets > 1:
            # (k, 8): packets 2k and 2k + 1 side by side; summed over k in order, the two accumulators.
            both = np.add.reduce(part[:, start:start + 4 * pairs].reshape(len(part), pairs // 2, 8), axis=1)
            lanes = both[:, :4] + both[:, 4:]
            if packets > pairs:
                lanes += part[:, start + 4 * pairs:start + 4 * pairs + 4]
        else:
            lanes = part[:, start:start + 4]
        total = (lanes[:, 0] + lanes[:, 2]) + (lanes[:, 1] + lanes[:, 3])
        for j in (*range(start), *range(start + 4 * packets, n)):
            total += part[:, j]
        out[which] = total
    return out
