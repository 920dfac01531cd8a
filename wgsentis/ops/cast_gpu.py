"""gpu-compute programs of the cast family: Cast and CastLike between the types the device stores
(float32, int32/int64, bool); int32 <-> int64 is a view of the same words. Other types fall back to
the CPU kernels in cast.py."""

from __future__ import annotations

import numpy as np

from wgsentis.dtypes import ONNX_TO_NUMPY
from wgsentis.ops.cast import _onnx_type
from wgsentis.ops.elementwise_gpu import refusing, unary
from wgsentis.ops.registry import GPU_COMPUTE, register
from wgsentis.ops.tensor_gpu import STORAGE, device_tensor

# (source storage, target storage) -> WGSL expression of `v`; same storage (int32 <-> int64) is a view.
_CASTS = {
    # Truncates toward zero like numpy's astype; values beyond int32 saturate (numpy wraps them
    # for int32 and keeps them for int64, which the GPU stores as int32 anyway).
    ("f32", "i32"): "i32(v)",
    ("f32", "u32"): "select(0u, 1u, v != 0.0)",
    ("i32", "f32"): "f32(v)",
    ("i32", "u32"): "select(0u, 1u, v != 0)",
    ("u32", "f32"): "f32(v)",
    ("u32", "i32"): "i32(v)",
}


def _cast(rec, x, dtype):
    dtype = np.dtype(dtype)
    src_dtype = getattr(x, "dtype", None)
    if src_dtype not in STORAGE or dtype not in STORAGE:
        return NotImplemented
    x = device_tensor(rec, x)
    if x is None:
        return NotImplemented
    if STORAGE[src_dtype] == STORAGE[dtype]:  # int32 <-> int64 (or no change): same words
        y = rec.view(x, x.shape, dtype)
        if y.host is not None:
            y.host = y.host.astype(dtype)  # Recorder.view keeps the host copy's old dtype
        return y
    return unary(rec, x, _CASTS[(x.gpu_type, STORAGE[dtype])], [0.0] * 3, out_dtype=dtype)


@register("Cast", 1, backend=GPU_COMPUTE)
@refusing
def cast(rec, layer, x, *, to=None, **attrs):
    if to is None:
        return NotImplemented
    try:
        dtype = ONNX_TO_NUMPY[_onnx_type(to)]
    except (KeyError, ValueError):
        return NotImplemented
    return _cast(rec, x, dtype)


@register("CastLike", 15, backend=GPU_COMPUTE)
@refusing
def cast_like(rec, layer, x, target_type, **attrs):
    return _cast(rec, x, getattr(target_type, "dtype", None))
