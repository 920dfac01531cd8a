"""Numpy helpers the elementwise kernels and the activation records share: narrow float types (bfloat16,
float8 from ml_dtypes) computed in float32, a vectorised erf, and the accumulator of long sums (``sum_dtype``)."""

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
