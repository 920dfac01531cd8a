"""Generator operators (numpy kernels), whose values come from attributes, shapes and positions rather than from
moving input data: Constant, ConstantOfShape, Range, EyeLike and Trilu. Their GPU programs are generators_gpu.py's
and generators_pixel.py's.
"""

from __future__ import annotations


import numpy as np

from wgsentis.dtypes import ONNX_TO_NUMPY
from wgsentis.ops.generators_spec import range_count
from wgsentis.ops.registry import register, register_flops
from wgsentis.ops.tensor import int_list, int_scalar


@register("Constant", 1)
def constant_v1(ctx, *, value=None):
    return constant(ctx, value=value)


@register("Constant", 11)
def constant_v11(ctx, *, value=None, sparse_value=None):
    return constant(ctx, value=value, sparse_value=sparse_value)


@register("Constant", 12)
def constant(ctx, *, value=None, value_float=None, value_floats=None, value_int=None, value_ints=None,
             value_string=None, value_strings=None, sparse_value=None):
    if value is not None:
        return value
    if sparse_value is not None:
        return sparse_value
    if value_float is not None:
        return np.array(value_float, dtype=np.float32)
    if value_floats is not None:
        return np.array(value_floats, dtype=np.float32)
    if value_int is not None:
        return np.array(value_int, dtype=np.int64)
    if value_ints is not None:
        return np.array(value_ints, dtype=np.int64)
    if value_string is not None:
        return np.array(value_string, dtype=object)
    if value_strings is not None:
        return np.array(value_strings, dtype=object)
    raise ValueError("Constant has no value attribute")


@register("ConstantOfShape", 9)
def constant_of_shape(ctx, shape, *, value=None):
    dims = int_list(shape)
    if any(d < 0 for d in dims):
        raise ValueError(f"ConstantOfShape: negative dimension in {dims}")
    if value is None:
        return np.zeros(dims, dtype=np.float32)
    fill = np.asarray(value)
    if fill.size != 1:
        raise ValueError("ConstantOfShape: value must hold exactly one element")
    return np.full(dims, fill.reshape(-1)[0], dtype=fill.dtype)


@register("Range", 11)
def range_v11(ctx, start, limit, delta):
    return range_(ctx, start, limit, delta)


@register("Range", 27)
def range_(ctx, start, limit, delta, *, stash_type=1):
    dtype = np.asarray(start).dtype
    s, lim, d = (np.asarray(v).reshape(()) for v in (start, limit, delta))
    if d == 0:
        raise ValueError("Range: delta cannot be 0")
    if dtype.kind in "iu":
        count = range_count(s, lim, d, True)
        return (int(s) + np.arange(count, dtype=np.int64) * int(d)).astype(dtype)
    # Compute in float64 (at least the stash precision) and round once at the end.
    s64, lim64, d64 = float(s), float(lim), float(d)
    count = range_count(s64, lim64, d64, False)
    return (s64 + np.arange(count, dtype=np.float64) * d64).astype(dtype)


@register("EyeLike", 9)
def eye_like(ctx, x, *, dtype=None, k=0):
    if x.ndim != 2:
        raise ValueError("EyeLike: input must be 2-D")
    out_dtype = x.dtype if dtype is None else ONNX_TO_NUMPY[dtype]
    return np.eye(x.shape[0], x.shape[1], k=k, dtype=out_dtype)


@register("Trilu", 14)
def trilu(ctx, x, k=None, *, upper=1):
    shift = 0 if k is None else int_scalar(k)
    if x.ndim < 2:
        raise ValueError("Trilu: input must have rank >= 2")
    return np.triu(x, shift) if upper else np.tril(x, shift)


@register_flops("Constant", "ConstantOfShape", "EyeLike", "Trilu")
def generator_flops(layer, in_shapes, out_shapes) -> int:
    """0: these ops write values they are given or positions they are told, they do no arithmetic."""
    return 0
