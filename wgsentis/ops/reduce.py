"""Reduction operators (ReduceSum ... ReduceLogSumExp, ArgMax/ArgMin) and the softmax family.

Reduce ops take ``axes`` as an attribute up to opset 12 (ReduceSum) or 17 (the others) and as an
optional input afterwards, with ``noop_with_empty_axes`` deciding what an empty/missing list means.
Reducing an empty set gives the reduction's identity (0 for sums, 1 for products, -inf for max
and log-sums, +inf for min), as the spec requires.
"""

from __future__ import annotations

import math

import numpy as np

from wgsentis.ops.numeric import LONG_SUM, ort_row_sums, sum_dtype
from wgsentis.ops.reduce_spec import softmax_axis
from wgsentis.ops.registry import register, register_flops

# -- shared helpers ---------------------------------------------------------------------------


def _axis(axis: int, rank: int) -> int:
    axis = int(axis)
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _resolve_axes(data: np.ndarray, axes, noop_with_empty_axes: int) -> tuple[int, ...]:
    """Normalized reduction axes. An empty tuple reduces nothing, yet composite reductions still
    apply their elementwise steps (ReduceL2 gives |x|, ReduceLogSum log(x)), as the spec says."""
    if axes is None or len(axes) == 0:
        return () if noop_with_empty_axes else tuple(range(data.ndim))
    out = tuple(sorted({_axis(a, data.ndim) for a in axes}))
    if len(out) != len(axes):
        raise ValueError(f"axes {list(axes)} repeat an axis")
    return out


def _axes_input(axes) -> list[int] | None:
    return None if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]


def _min_of(dtype: np.dtype):
    if dtype == np.bool_:
        return False
    if dtype.kind in "iu":
        return np.iinfo(dtype).min
    return -np.inf


def _max_of(dtype: np.dtype):
    if dtype == np.bool_:
        return True
    if dtype.kind in "iu":
        return np.iinfo(dtype).max
    return np.inf


def _is_narrow_float(dtype: np.dtype) -> bool:
    """ml_dtypes floats (bfloat16, float8...): compute in float32, round back at the end."""
    return dtype.kind == "V" or (dtype.kind == "f" and dtype.itemsize == 1) or dtype.name == "bfloat16"


def _reduce_kernel(kind: str):
    """The numpy computation of one reduce op: ``fn(x, axes_tuple, keepdims) -> array``."""

    def run(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
        dtype = x.dtype
        work = x.astype(np.float32) if _is_narrow_float(dtype) else x
        empty = any(x.shape[a] == 0 for a in axes)
        acc = sum_dtype(work, axes) or work.dtype  # float64 for long float sums: rounded back once, at the end
        last = work.ndim - 1
        if kind in ("sum", "mean") and work.dtype == np.float32 and axes == (last,) and 0 < work.shape[-1] < LONG_SUM:
            # Over the last axis (RMS and layer norms' means): ONNX Runtime's order, bit for bit.
            sums = ort_row_sums(np.ascontiguousarray(work).reshape(-1, work.shape[-1])).reshape(work.shape[:-1])
            out = sums if kind == "sum" else sums / np.float32(work.shape[-1])
            return (out[..., None] if keepdims else out).astype(dtype, copy=False)
        if kind == "sum":
            out = np.sum(work, axis=axes, keepdims=keepdims, dtype=acc)
        elif kind == "mean" and empty:  # the mean of nothing: NaN, as numpy has it, without its warning
            shape = np.sum(work, axis=axes, keepdims=keepdims, dtype=work.dtype).shape
            out = np.full(shape, np.nan, dtype=work.dtype if work.dtype.kind == "f" else np.float64)
        elif kind == "mean":
            out = np.mean(work, axis=axes, keepdims=keepdims, dtype=sum_dtype(work, axes))
        elif kind == "max":
            out = np.max(work, axis=axes, keepdims=keepdims, initial=_min_of(work.dtype)) if empty else \
                np.max(work, axis=axes, keepdims=keepdims)
        elif kind == "min":
            out = np.min(work, axis=axes, keepdims=keepdims, initial=_max_of(work.dtype)) if empty else \
                np.min(work, axis=axes, keepdims=keepdims)
        elif kind == "prod":
            out = np.prod(work, axis=axes, keepdims=keepdims, dtype=work.dtype)
        elif kind == "l1":
            out = np.sum(np.abs(work), axis=axes, keepdims=keepdims, dtype=acc)
        elif kind == "l2":
            out = np.sqrt(np.sum(np.square(work), axis=axes, keepdims=keepdims, dtype=acc))
        elif kind == "sumsquare":
            out = np.sum(np.square(work), axis=axes, keepdims=keepdims, dtype=acc)
        elif kind == "logsum":
            out = np.log(np.sum(work, axis=axes, keepdims=keepdims, dtype=acc))
        elif kind == "logsumexp":
            if empty:
                out = np.log(np.sum(work, axis=axes, keepdims=keepdims, dtype=work.dtype))
            else:
                peak = np.max(work, axis=axes, keepdims=True)
                peak = np.where(np.isfinite(peak), peak, 0).astype(work.dtype)  # all -inf rows stay -inf
                total = np.sum(np.exp(work - peak), axis=axes, keepdims=True, dtype=sum_dtype(work, axes))
                out = np.log(total) + peak
                if not keepdims:
                    out = np.squeeze(out, axis=axes)
        else:  # pragma: no cover - programming error
            raise AssertionError(kind)
        return np.asarray(out).astype(dtype, copy=False)

    return run


def _make_reduce(op_type: str, kind: str, axes_input_since: int) -> None:
    """Register ``op_type``: axes as attribute from opset 1, as input from ``axes_input_since``."""
    compute = _reduce_kernel(kind)

    def reduce_attr(ctx, data, *, axes=None, keepdims=1):
        resolved = _resolve_axes(data, axes, 0)
        return compute(data, resolved, bool(keepdims))

    def reduce_input(ctx, data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
        resolved = _resolve_axes(data, _axes_input(axes), noop_with_empty_axes)
        if not resolved and kind in ("sum", "mean", "max", "min", "prod"):
            return data  # plain reductions over no axes are the identity
        return compute(data, resolved, bool(keepdims))

    reduce_attr.__doc__ = f"{op_type} with ``axes`` as an attribute."
    reduce_input.__doc__ = f"{op_type} with ``axes`` as an optional input."
    register(op_type, 1)(reduce_attr)
    register(op_type, axes_input_since)(reduce_input)


_make_reduce("ReduceSum", "sum", 13)
_make_reduce("ReduceMean", "mean", 18)
_make_reduce("ReduceMax", "max", 18)
_make_reduce("ReduceMin", "min", 18)
_make_reduce("ReduceProd", "prod", 18)
_make_reduce("ReduceL1", "l1", 18)
_make_reduce("ReduceL2", "l2", 18)
_make_reduce("ReduceLogSum", "logsum", 18)
_make_reduce("ReduceLogSumExp", "logsumexp", 18)
_make_reduce("ReduceSumSquare", "sumsquare", 18)


# -- ArgMax / ArgMin ------------------------------------------------------------------------------


def _arg_reduce(data: np.ndarray, axis: int, keepdims: int, select_last_index: int, fn) -> np.ndarray:
    axis = _axis(axis, data.ndim)
    if select_last_index:
        # Search the reversed axis: the first hit there is the last hit in the original order.
        n = data.shape[axis]
        idx = (n - 1) - fn(np.flip(data, axis), axis=axis)
    else:
        idx = fn(data, axis=axis)
    idx = np.asarray(idx, dtype=np.int64)
    return np.expand_dims(idx, axis) if keepdims else idx


@register("ArgMax", 1)
def arg_max_v1(ctx, data, *, axis=0, keepdims=1):
    return _arg_reduce(data, axis, keepdims, 0, np.argmax)


@register("ArgMax", 12)
def arg_max(ctx, data, *, axis=0, keepdims=1, select_last_index=0):
    return _arg_reduce(data, axis, keepdims, select_last_index, np.argmax)


@register("ArgMin", 1)
def arg_min_v1(ctx, data, *, axis=0, keepdims=1):
    return _arg_reduce(data, axis, keepdims, 0, np.argmin)


@register("ArgMin", 12)
def arg_min(ctx, data, *, axis=0, keepdims=1, select_last_index=0):
    return _arg_reduce(data, axis, keepdims, select_last_index, np.argmin)


# -- softmax family -------------------------------------------------------------------------------


def _softmax_work(x: np.ndarray) -> np.ndarray:
    """float32/float64 stay as they are (fast path); narrower floats are computed in float32."""
    return x if x.dtype in (np.float32, np.float64) else x.astype(np.float32)


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    """Numerically stable softmax along ``axis``, computed in place in the input's float type."""
    if x.size == 0:
        return x.copy()  # an empty tensor (a zero-size axis or batch): nothing to normalise
    work = _softmax_work(x)
    # The ufuncs' own reductions: np.max and np.sum reduce the same way behind a Python wrapper that cost an
    # attention row of a decoder step (a few dozen values) more than its arithmetic.
    out = np.subtract(work, np.maximum.reduce(work, axis=axis, keepdims=True))
    np.exp(out, out=out)
    out /= np.add.reduce(out, axis=axis, keepdims=True, dtype=sum_dtype(out, axis)).astype(out.dtype, copy=False)
    return out.astype(x.dtype, copy=False)


def _log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    if x.size == 0:
        return x.copy()
    work = _softmax_work(x)
    out = np.subtract(work, np.max(work, axis=axis, keepdims=True))
    out -= np.log(np.sum(np.exp(out), axis=axis, keepdims=True, dtype=sum_dtype(out, axis))).astype(out.dtype)
    return out.astype(x.dtype, copy=False)


def _hardmax(x: np.ndarray, axis: int) -> np.ndarray:
    """1 at the first maximum along ``axis``, 0 elsewhere."""
    if x.size == 0:
        return np.zeros_like(x)
    idx = np.expand_dims(np.argmax(x, axis=axis), axis)
    out = np.zeros_like(x)
    np.put_along_axis(out, idx, np.ones((), dtype=x.dtype), axis=axis)
    return out


def _normalized(fn, x: np.ndarray, axis: int, opset: int) -> np.ndarray:
    """``fn`` over the axes the op normalizes (reduce_spec.softmax_axis): before opset 13, ``x`` flattened to
    (prod(shape[:axis]), prod(shape[axis:])) and ``fn`` applied on dim 1; from 13, ``fn`` along ``axis``."""
    found = softmax_axis(opset, axis, x.ndim)
    if found is None:
        raise ValueError(f"axis {axis} is out of range for rank {x.ndim}")
    axis, flattened = found
    if not flattened:
        return fn(x, axis)
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    flat = x.reshape(rows, -1) if x.size else x.reshape(rows, int(np.prod(x.shape[axis:], dtype=np.int64)))
    return fn(flat, 1).reshape(x.shape)


@register("Softmax", 1)
def softmax_v1(ctx, x, *, axis=1):
    return _normalized(_softmax, x, axis, 1)


@register("Softmax", 13)
def softmax(ctx, x, *, axis=-1):
    return _normalized(_softmax, x, axis, 13)


@register("LogSoftmax", 1)
def log_softmax_v1(ctx, x, *, axis=1):
    return _normalized(_log_softmax, x, axis, 1)


@register("LogSoftmax", 13)
def log_softmax(ctx, x, *, axis=-1):
    return _normalized(_log_softmax, x, axis, 13)


@register("Hardmax", 1)
def hardmax_v1(ctx, x, *, axis=1):
    return _normalized(_hardmax, x, axis, 1)


@register("Hardmax", 13)
def hardmax(ctx, x, *, axis=-1):
    return _normalized(_hardmax, x, axis, 13)


_REDUCE_OPS = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
               "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin")


@register_flops(*_REDUCE_OPS)
def reduce_flops(layer, in_shapes, out_shapes) -> int:
    """One FLOP per input element (each is combined into its reduction once); the elementwise
    pre/post steps of L2, LogSumExp and friends are not counted."""
    shape = in_shapes[0] if in_shapes else None
    return math.prod(shape) if shape is not None else 0


@register_flops("Softmax", "LogSoftmax", "Hardmax")
def softmax_flops(layer, in_shapes, out_shapes) -> int:
    """Per input element: Softmax/LogSoftmax 4 (max, subtract+exp, sum, divide or subtract),
    Hardmax 1 (the argmax comparison)."""
    shape = in_shapes[0] if in_shapes else None
    if shape is None:
        return 0
    return math.prod(shape) * (1 if layer.op_type == "Hardmax" else 4)
