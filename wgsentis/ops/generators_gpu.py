"""gpu-compute programs of the generators (generators.py): ConstantOfShape, EyeLike, Range and Trilu, each one
dispatch of compute/generate.wgsl (or compute/trilu.wgsl) that writes its values from their positions."""

from __future__ import annotations


import numpy as np

from wgsentis.dtypes import ONNX_TO_NUMPY
from wgsentis.ops.generators_spec import device_range_count
from wgsentis.ops import tensor as _tensor
from wgsentis.ops.tensor_gpu import (FILL_EYE, FILL_RANGE_FLOAT, FILL_RANGE_INT, I32_MAX, I32_MIN, STORAGE,
                                     device_tensor, filled_tensor, gpu, host_ints, storage_bits)


@gpu("ConstantOfShape", 9, host_inputs=(0,))
def constant_of_shape(rec, layer, shape, *, value=None, **attrs):
    dims = host_ints(shape)
    if any(d < 0 for d in dims):
        return NotImplemented
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    if fill.size != 1 or fill.dtype not in STORAGE:
        return NotImplemented
    try:
        return filled_tensor(rec, dims, fill.dtype, fill[0])
    except OverflowError:
        return NotImplemented


@gpu("EyeLike", 9)
def eye_like(rec, layer, x, *, dtype=None, k=0, **attrs):
    if len(x.shape) != 2:
        return NotImplemented
    out_dtype = np.dtype(x.dtype if dtype is None else ONNX_TO_NUMPY[dtype])
    if out_dtype not in STORAGE:
        return NotImplemented
    y = rec.alloc(x.shape, out_dtype)
    params = [y.size, max(x.shape[1], 1), int(k), storage_bits(1, out_dtype), storage_bits(0, out_dtype)]
    rec.dispatch("compute/generate.wgsl", [], [y], params, y.size, workgroup=256, subs={"T": y.gpu_type},
                 constants={"FILL": FILL_EYE})
    return y


@gpu("Range", 11, host_inputs=(0, 1, 2))
def range_(rec, layer, start, limit, delta, **attrs):
    dtype = np.asarray(start).dtype
    if dtype not in STORAGE or dtype == np.bool_:
        return NotImplemented
    s, lim, d = (np.asarray(v).reshape(()) for v in (start, limit, delta))
    count = device_range_count(s, lim, d, dtype.kind == "i")
    if count is None:
        return NotImplemented
    if dtype.kind == "i":
        params, fill = [0, int(s), int(d)], FILL_RANGE_INT
    else:
        # start + i * delta rounded once (an fma), as the CPU kernel's float64 sum rounded to float32.
        params, fill = [0, float(s), float(d)], FILL_RANGE_FLOAT
    y = rec.alloc([count], dtype)
    params[0] = count
    rec.dispatch("compute/generate.wgsl", [], [y], params, count, workgroup=256,
                 subs={"T": y.gpu_type}, constants={"FILL": fill})
    return y


@gpu("Trilu", 14, host_inputs=(1,))
def trilu(rec, layer, data, k=None, *, upper=1, **attrs):
    x = device_tensor(rec, data)
    if x is None or len(x.shape) < 2:
        return NotImplemented
    shift = 0 if k is None else _tensor.int_scalar(k)
    shift = min(max(shift, I32_MIN + 1), I32_MAX)  # beyond any matrix either way
    y = rec.alloc(x.shape, x.dtype)
    params = [y.size, max(x.shape[-2], 1), max(x.shape[-1], 1), shift, int(bool(upper))]
    rec.dispatch("compute/trilu.wgsl", [x], [y], params, y.size, workgroup=256, subs={"T": x.gpu_type})
    return y
