"""Elementwise operators (numpy kernels): unary math, activations, broadcasting binary arithmetic,
logic and comparison, variadic Sum/Mean/Max/Min, Where, and the random generators.

Kernels keep the input's dtype (float32 stays float32: attributes arrive as Python floats, which
numpy treats as weak scalars). Narrow float types from ml_dtypes (bfloat16, float8) are computed
in float32 and cast back. The activations' kernels are their records' in activations.py (registered
here at each of their opsets); the executor also applies them as fused activations on a Conv/Gemm
output, with every attribute passed by keyword.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from wgsentis.dtypes import to_numpy_dtype
from wgsentis.ops.activations import ACTIVATIONS
from wgsentis.ops.numeric import erf, float_kernel, is_narrow
from wgsentis.ops.registry import register

# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def _same_dtype(result: Any, dtype: np.dtype) -> np.ndarray:
    """``result`` as an array of ``dtype`` (no copy when it already is one)."""
    return np.asarray(result).astype(dtype, copy=False)


def _legacy_broadcast(a: np.ndarray, b: np.ndarray, broadcast: int, axis: int | None) -> np.ndarray:
    """Opset < 7 broadcasting: with ``broadcast=1`` and ``axis``, B's dims align with A's from ``axis``."""
    if broadcast and axis is not None and b.ndim and b.ndim < a.ndim:
        axis = axis + a.ndim if axis < 0 else axis
        trailing = a.ndim - axis - b.ndim
        if trailing > 0:
            b = b.reshape(b.shape + (1,) * trailing)
    return b


# ---------------------------------------------------------------------------------------------
# Unary math
# ---------------------------------------------------------------------------------------------


def _register_unary(op_type: str, fn: Callable[[np.ndarray], np.ndarray], versions: tuple[int, ...],
                    legacy: bool = False, is_float: bool = True) -> None:
    """Register ``fn`` for ``op_type`` at each opset in ``versions``; the first one accepts the
    opset-1 ``consumed_inputs`` attribute when ``legacy``."""

    def plain(ctx, x):
        return np.asarray(fn(x))

    def with_consumed(ctx, x, *, consumed_inputs=None):
        return np.asarray(fn(x))

    for i, since in enumerate(versions):
        kernel = with_consumed if legacy and i == 0 else plain
        if is_float:
            kernel = float_kernel(kernel)
        kernel.__name__ = f"{op_type.lower()}_{since}"
        kernel.__doc__ = f"{op_type}: elementwise, same dtype as the input."
        register(op_type, since)(kernel)


def _reciprocal(x: np.ndarray) -> np.ndarray:
    return np.reciprocal(x) if x.dtype.kind == "f" else _same_dtype(1 / x, x.dtype)


def _sign(x: np.ndarray) -> np.ndarray:
    return np.sign(x) if x.dtype.kind != "b" else x.copy()


_LEGACY_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Abs": np.abs, "Neg": np.negative, "Exp": np.exp, "Log": np.log, "Sqrt": np.sqrt,
    "Reciprocal": _reciprocal, "Floor": np.floor, "Ceil": np.ceil,
}
for _op, _fn in _LEGACY_UNARY.items():
    _register_unary(_op, _fn, (1, 6, 13), legacy=True)

for _op, _fn in {"Sin": np.sin, "Cos": np.cos, "Tan": np.tan, "Asin": np.arcsin, "Acos": np.arccos,
                 "Atan": np.arctan}.items():
    _register_unary(_op, _fn, (7, 22))
for _op, _fn in {"Sinh": np.sinh, "Cosh": np.cosh, "Asinh": np.arcsinh, "Acosh": np.arccosh,
                 "Atanh": np.arctanh}.items():
    _register_unary(_op, _fn, (9, 22))
_register_unary("Round", np.rint, (11, 22))  # rint rounds half to even
_register_unary("Sign", _sign, (9, 13))
_register_unary("Erf", erf, (9, 13))
_register_unary("Not", np.logical_not, (1,), is_float=False)
_register_unary("BitwiseNot", np.invert, (18,), is_float=False)


def _isnan(ctx, x):
    """IsNaN: bool mask."""
    return np.asarray(np.isnan(x.astype(np.float32) if is_narrow(x.dtype) else x))


for _since in (9, 13, 20):
    register("IsNaN", _since)(_isnan)


@register("IsInf", 10)
@register("IsInf", 20)
def isinf(ctx, x, *, detect_negative=1, detect_positive=1):
    """IsInf: bool mask of infinities, optionally of one sign only."""
    if is_narrow(x.dtype):
        x = x.astype(np.float32)
    if detect_negative and detect_positive:
        return np.asarray(np.isinf(x))
    if detect_negative:
        return np.asarray(np.isneginf(x))
    if detect_positive:
        return np.asarray(np.isposinf(x))
    return np.zeros(x.shape, dtype=np.bool_)


# ---------------------------------------------------------------------------------------------
# Activations: the kernels of the records in activations.py, registered at each of their opsets
# ---------------------------------------------------------------------------------------------

for _act in ACTIVATIONS.values():
    for _since in _act.versions:
        register(_act.name, _since)(_act.onnx_kernel(_since))


def _prelu(ctx, x: np.ndarray, slope: np.ndarray) -> np.ndarray:
    # Opset < 7: a 1-D slope of size C applies per channel (axis 1), not along the last axis.
    if ctx.opset < 7 and slope.ndim == 1 and x.ndim > 2 and slope.size == x.shape[1] > 1:
        slope = slope.reshape((-1,) + (1,) * (x.ndim - 2))
    return np.where(x < 0, x * slope, x).astype(x.dtype, copy=False)


@register("PRelu", 1)
@float_kernel
def prelu_1(ctx, X, slope, *, consumed_inputs=None):
    return _prelu(ctx, X, slope)


@register("PRelu", 6)
@register("PRelu", 7)
@register("PRelu", 9)
@register("PRelu", 16)
@float_kernel
def prelu(ctx, X, slope):
    """PRelu: x if x >= 0 else slope * x (slope broadcasts to x)."""
    return _prelu(ctx, X, slope)


@register("Shrink", 9)
@float_kernel
def shrink(ctx, input, *, bias=0.0, lambd=0.5):
    """Shrink: x + bias if x < -lambd, x - bias if x > lambd, else 0 (keeps integer dtypes)."""
    x = input
    y = np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0))
    return _same_dtype(y, x.dtype)


# ---------------------------------------------------------------------------------------------
# Binary arithmetic, logic, comparison
# ---------------------------------------------------------------------------------------------


def _register_binary(op_type: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray],
                     versions: tuple[int, ...], legacy_until: int = 0, consumed_at_1: bool = False) -> None:
    """Register a numpy-broadcasting binary op; versions below ``legacy_until`` take the old
    ``broadcast``/``axis`` attributes (and opset 1 ``consumed_inputs`` when ``consumed_at_1``)."""

    # np.asarray: a ufunc on two 0-d arrays returns a numpy scalar.
    def plain(ctx, A, B):
        return np.asarray(fn(A, B))

    def legacy(ctx, A, B, *, broadcast=0, axis=None):
        return np.asarray(fn(A, _legacy_broadcast(A, B, broadcast, axis)))

    def legacy_consumed(ctx, A, B, *, broadcast=0, axis=None, consumed_inputs=None):
        return np.asarray(fn(A, _legacy_broadcast(A, B, broadcast, axis)))

    for since in versions:
        if since < legacy_until:
            kernel = legacy_consumed if since == 1 and consumed_at_1 else legacy
        else:
            kernel = plain
        kernel.__name__ = f"{op_type.lower()}_{since}"
        kernel.__doc__ = f"{op_type}: elementwise with numpy broadcasting."
        register(op_type, since)(kernel)


def _narrow_binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    """Compute ``fn`` in float32 for narrow floats and cast back to A's dtype."""

    def wrapped(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if is_narrow(a.dtype):
            return np.asarray(fn(a.astype(np.float32), b.astype(np.float32))).astype(a.dtype)
        return fn(a, b)

    return wrapped


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Division; integers truncate toward zero as in C."""
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        with np.errstate(all="ignore"):
            q = np.floor_divide(a, b)
            if a.dtype.kind == "i":
                # floor and trunc differ when the quotient is negative and inexact.
                fix = (np.fmod(a, b) != 0) & ((a < 0) != (b < 0))
                q = q + fix.astype(q.dtype)
        return q
    return np.divide(a, b)


def _pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Power with the result in the base's dtype."""
    if a.dtype.kind == "f" and b.size == 1:
        e = float(b.reshape(-1)[0])
        shape = np.broadcast_shapes(a.shape, b.shape)
        if e == 2.0:
            y = a * a
        elif e == 0.5:
            y = np.sqrt(a)
        elif e == 1.0:
            y = a.copy()
        else:
            y = np.power(a, np.asarray(e, dtype=a.dtype) if a.dtype != np.float64 else e)
        return np.broadcast_to(y, shape).copy() if y.shape != shape else y
    if a.dtype.kind in "iu" and b.dtype.kind in "iu" and np.any(b < 0):
        return _same_dtype(np.power(a.astype(np.float64), b.astype(np.float64)), a.dtype)
    if a.dtype.kind == "f" and b.dtype.kind in "iuf" and b.dtype != a.dtype:
        b = b.astype(a.dtype)  # keeps the computation in the base's precision
    return _same_dtype(np.power(a, b), a.dtype)


_register_binary("Add", _narrow_binary(np.add), (1, 6, 7, 13, 14), legacy_until=7, consumed_at_1=True)
_register_binary("Sub", _narrow_binary(np.subtract), (1, 6, 7, 13, 14), legacy_until=7, consumed_at_1=True)
_register_binary("Mul", _narrow_binary(np.multiply), (1, 6, 7, 13, 14), legacy_until=7, consumed_at_1=True)
_register_binary("Div", _narrow_binary(_div), (1, 6, 7, 13, 14), legacy_until=7, consumed_at_1=True)
_register_binary("Pow", _narrow_binary(_pow), (1, 7, 12, 13, 15), legacy_until=7)
_register_binary("And", np.logical_and, (1, 7), legacy_until=7)
_register_binary("Or", np.logical_or, (1, 7), legacy_until=7)
_register_binary("Xor", np.logical_xor, (1, 7), legacy_until=7)
_register_binary("BitwiseAnd", np.bitwise_and, (18,))
_register_binary("BitwiseOr", np.bitwise_or, (18,))
_register_binary("BitwiseXor", np.bitwise_xor, (18,))


def _compare(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    def wrapped(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if is_narrow(a.dtype):
            a, b = a.astype(np.float32), b.astype(np.float32)
        return np.asarray(fn(a, b), dtype=np.bool_)

    return wrapped


_register_binary("Equal", _compare(np.equal), (1, 7, 11, 13, 19), legacy_until=7)
_register_binary("Greater", _compare(np.greater), (1, 7, 9, 13), legacy_until=7)
_register_binary("Less", _compare(np.less), (1, 7, 9, 13), legacy_until=7)
_register_binary("GreaterOrEqual", _compare(np.greater_equal), (12, 16))
_register_binary("LessOrEqual", _compare(np.less_equal), (12, 16))


def _mod(a: np.ndarray, b: np.ndarray, fmod: int) -> np.ndarray:
    if is_narrow(a.dtype):
        return _mod(a.astype(np.float32), b.astype(np.float32), fmod).astype(a.dtype)
    with np.errstate(all="ignore"):
        # fmod=1: sign of the dividend (C fmod); fmod=0: sign of the divisor (Python %).
        return np.asarray(np.fmod(a, b) if fmod else np.mod(a, b))


@register("Mod", 10)
@register("Mod", 13)
@register("Mod", 28)
def mod(ctx, A, B, *, fmod=0):
    """Mod: remainder with the divisor's sign, or the dividend's when fmod=1."""
    return _mod(A, B, fmod)


@register("BitShift", 11)
@register("BitShift", 28)
def bit_shift(ctx, X, Y, *, direction=""):
    """BitShift: X shifted by Y bits; shifts of the bit width or more give 0 (or -1 for negative
    signed values shifted right)."""
    if direction not in ("LEFT", "RIGHT"):
        raise ValueError(f"BitShift: direction must be 'LEFT' or 'RIGHT', got {direction!r}")
    bits = X.dtype.itemsize * 8
    shift = np.asarray(Y).astype(np.int64)
    out_of_range = (shift < 0) | (shift >= bits)
    safe = np.where(out_of_range, 0, shift).astype(X.dtype if X.dtype.kind == "u" else np.int64)
    if direction == "RIGHT":
        y = np.right_shift(X, safe.astype(X.dtype))
        if out_of_range.any():
            fill = np.where(X < 0, -1, 0).astype(X.dtype) if X.dtype.kind == "i" else 0
            y = np.where(out_of_range, fill, y).astype(X.dtype)
        return np.asarray(y)
    if X.dtype.kind == "i":
        unsigned = np.dtype(f"u{X.dtype.itemsize}")
        y = np.left_shift(X.view(unsigned), safe.astype(unsigned)).view(X.dtype)
    else:
        y = np.left_shift(X, safe.astype(X.dtype))
    if out_of_range.any():
        y = np.where(out_of_range, 0, y).astype(X.dtype)
    return np.asarray(y)


# ---------------------------------------------------------------------------------------------
# Variadic Sum / Mean / Max / Min, Where
# ---------------------------------------------------------------------------------------------


def _fold(ufunc: np.ufunc, inputs: tuple[np.ndarray, ...]) -> np.ndarray:
    """Apply ``ufunc`` across all inputs with broadcasting, in place after the first result."""
    if not inputs:
        raise ValueError("expected at least one input")
    narrow = inputs[0].dtype if is_narrow(inputs[0].dtype) else None
    if narrow is not None:
        inputs = tuple(t.astype(np.float32) for t in inputs)
    if len(inputs) == 1:
        out = inputs[0].copy()
    else:
        out = np.asarray(ufunc(inputs[0], inputs[1]))
        for t in inputs[2:]:
            if np.broadcast_shapes(out.shape, t.shape) == out.shape:
                ufunc(out, t, out=out)
            else:
                out = np.asarray(ufunc(out, t))
    return out.astype(narrow) if narrow is not None else out


def _register_variadic(op_type: str, fn: Callable[[tuple[np.ndarray, ...]], np.ndarray],
                       versions: tuple[int, ...]) -> None:
    def plain(ctx, *inputs):
        return fn(inputs)

    def with_consumed(ctx, *inputs, consumed_inputs=None):
        return fn(inputs)

    for since in versions:
        kernel = with_consumed if since == 1 else plain
        kernel.__name__ = f"{op_type.lower()}_{since}"
        kernel.__doc__ = f"{op_type}: elementwise across all inputs, with numpy broadcasting."
        register(op_type, since)(kernel)


def _mean(inputs: tuple[np.ndarray, ...]) -> np.ndarray:
    out = _fold(np.add, inputs)
    if is_narrow(out.dtype) or out.dtype.kind in "iub":
        return (out.astype(np.float64) / len(inputs)).astype(out.dtype)
    out /= len(inputs)
    return out


_register_variadic("Sum", functools.partial(_fold, np.add), (1, 6, 8, 13))
_register_variadic("Mean", _mean, (1, 6, 8, 13))
# np.maximum/np.minimum propagate NaN, as the spec requires.
_register_variadic("Max", functools.partial(_fold, np.maximum), (1, 6, 8, 12, 13))
_register_variadic("Min", functools.partial(_fold, np.minimum), (1, 6, 8, 12, 13))


@register("Where", 9)
@register("Where", 16)
def where(ctx, condition, X, Y):
    """Where: X where condition else Y, broadcasting all three."""
    return np.asarray(np.where(condition, X, Y))


# ---------------------------------------------------------------------------------------------
# Random generators (never constant-folded)
# ---------------------------------------------------------------------------------------------


def _random_dtype(dtype: int | None, like: np.ndarray | None) -> np.dtype:
    if dtype is None or dtype == 0:
        if like is None:
            raise ValueError("a dtype is required")
        return like.dtype
    return to_numpy_dtype(dtype)


@register("RandomNormal", 1, deterministic=False)
@register("RandomNormal", 22, deterministic=False)
def random_normal(ctx, *, shape=None, dtype=1, seed=None, mean=0.0, scale=1.0):
    """RandomNormal: samples of N(mean, scale^2) with the given shape."""
    if shape is None:
        raise ValueError("RandomNormal: the shape attribute is required")
    rng = ctx.random(seed)
    return rng.normal(mean, scale, size=tuple(shape)).astype(_random_dtype(dtype, None))


@register("RandomUniform", 1, deterministic=False)
@register("RandomUniform", 22, deterministic=False)
def random_uniform(ctx, *, shape=None, dtype=1, seed=None, low=0.0, high=1.0):
    """RandomUniform: samples of U[low, high) with the given shape."""
    if shape is None:
        raise ValueError("RandomUniform: the shape attribute is required")
    rng = ctx.random(seed)
    return rng.uniform(low, high, size=tuple(shape)).astype(_random_dtype(dtype, None))


@register("RandomNormalLike", 1, deterministic=False)
@register("RandomNormalLike", 22, deterministic=False)
def random_normal_like(ctx, input, *, dtype=None, seed=None, mean=0.0, scale=1.0):
    """RandomNormalLike: RandomNormal with the input's shape (and dtype unless given)."""
    rng = ctx.random(seed)
    return rng.normal(mean, scale, size=input.shape).astype(_random_dtype(dtype, input))


@register("RandomUniformLike", 1, deterministic=False)
@register("RandomUniformLike", 22, deterministic=False)
def random_uniform_like(ctx, input, *, dtype=None, seed=None, low=0.0, high=1.0):
    """RandomUniformLike: RandomUniform with the input's shape (and dtype unless given)."""
    rng = ctx.random(seed)
    return rng.uniform(low, high, size=input.shape).astype(_random_dtype(dtype, input))


@register("Bernoulli", 15, deterministic=False)
@register("Bernoulli", 22, deterministic=False)
def bernoulli(ctx, input, *, dtype=None, seed=None):
    """Bernoulli: 1 with probability input[i], else 0."""
    rng = ctx.random(seed)
    draws = rng.random(size=input.shape) < input
    return draws.astype(_random_dtype(dtype, input))


@register("Multinomial", 7, deterministic=False)
@register("Multinomial", 22, deterministic=False)
def multinomial(ctx, input, *, dtype=6, sample_size=1, seed=None):
    """Multinomial: per batch row, ``sample_size`` class indices drawn from the distribution whose
    unnormalised log-probabilities are the row. input (B, C) -> (B, sample_size)."""
    rng = ctx.random(seed)
    logits = input.astype(np.float64)
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    cdf = np.cumsum(probs, axis=1)
    cdf /= cdf[:, -1:]
    u = rng.random(size=(input.shape[0], sample_size))
    out = np.empty((input.shape[0], sample_size), dtype=np.int64)
    for row in range(input.shape[0]):
        out[row] = np.searchsorted(cdf[row], u[row], side="right")
    np.minimum(out, input.shape[1] - 1, out=out)
    return out.astype(_random_dtype(dtype, None))
