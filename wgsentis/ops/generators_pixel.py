"""gpu-pixel programs of the generators (generators.py): ConstantOfShape, EyeLike, Range and Trilu, each one draw
that writes its values from their coordinates."""

from __future__ import annotations


import numpy as np

from wgsentis.backends.pixel_layout import MAX_RANK, texel_kind
from wgsentis.dtypes import ONNX_TO_NUMPY
from wgsentis.ops.generators_spec import device_range_count
from wgsentis.ops import tensor as _tensor
from wgsentis.ops.tensor_gpu import host_ints, storage_bits
from wgsentis.ops.tensor_pixel import filled_texture, pixel, pixel_tensor


@pixel("ConstantOfShape", 9, host_inputs=(0,))
def constant_of_shape(rec, layer, shape, *, value=None, **attrs):
    dims = host_ints(shape)
    if any(d < 0 for d in dims) or len(dims) > MAX_RANK:
        return NotImplemented
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    if fill.size != 1 or texel_kind(fill.dtype) is None:
        return NotImplemented
    return filled_texture(rec, dims, fill.dtype, fill[0])


@pixel("EyeLike", 9)
def eye_like(rec, layer, x, *, dtype=None, k=0, **attrs):
    if len(x.shape) != 2:
        return NotImplemented
    out_dtype = np.dtype(x.dtype if dtype is None else ONNX_TO_NUMPY[dtype])
    kind = texel_kind(out_dtype)
    if kind is None:
        return NotImplemented
    return rec.map([], x.shape, out_dtype, -1, "pixel/body/eye_like.wgsl",
                   [int(k), storage_bits(1, out_dtype), storage_bits(0, out_dtype)], subs={"T": kind})


@pixel("Range", 11, host_inputs=(0, 1, 2))
def range_(rec, layer, start, limit, delta, **attrs):
    dtype = np.asarray(start).dtype
    if texel_kind(dtype) is None or dtype == np.bool_:
        return NotImplemented
    s, lim, d = (np.asarray(v).reshape(()) for v in (start, limit, delta))
    count = device_range_count(s, lim, d, dtype.kind == "i")
    if count is None:
        return NotImplemented
    if dtype.kind == "i":
        words, body = [int(s), int(d)], "pixel/body/range_int.wgsl"
    else:
        # fma rounds start + i * delta once, as the CPU kernel's float64 sum rounded to float32.
        words, body = [float(s), float(d)], "pixel/body/range_float.wgsl"
    return rec.map([], [count], dtype, 0, body, words)


@pixel("Trilu", 14, host_inputs=(1,))
def trilu(rec, layer, data, k=None, *, upper=1, **attrs):
    x = pixel_tensor(rec, data)
    if x is None or len(x.shape) < 2:
        return NotImplemented
    shift = 0 if k is None else _tensor.int_scalar(k)
    shift = min(max(shift, -(2**31) + 1), 2**31 - 1)  # beyond any matrix either way
    return rec.map([x], x.shape, x.dtype, x.layout.axis, "pixel/body/trilu.wgsl", [shift],
                   helpers="pixel/body/trilu_upper.wgsl", subs={"T": x.layout.kind}, constants={"UPPER": bool(upper)})
