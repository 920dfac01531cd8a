"""gpu-compute programs of the cast family: Cast and CastLike between the types the device stores
(float32, int32/int64, bool, and the narrow float16, int8, uint8, int16, uint16 held widened); int32 <-> int64
is a view of the same words. Other types fall back to the CPU kernels in cast.py. ``narrow_cast`` serves
gpu-pixel's Cast too."""

from __future__ import annotations

import numpy as np

from wgsentis.backends.gpu.dtypes import NARROW_TYPES
from wgsentis.backends.gpu.shader_gen import snippet
from wgsentis.ops.cast import cast_target
from wgsentis.ops.elementwise_gpu import refusing, unary
from wgsentis.ops.registry import GPU_COMPUTE, register
from wgsentis.ops.tensor_gpu import STORAGE, device_tensor

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
    # Between storages, an expression of `v` per (source, target) pair: compute/expr/cast_<source>_<target>.wgsl
    # (a cast to int64 of a device float is left to the host, placement.int64_range_reason: it can pass int32).
    expr = snippet(f"compute/expr/cast_{x.gpu_type}_{STORAGE[dtype]}.wgsl")
    return unary(rec, x, expr, [0.0] * 3, out_dtype=dtype)


def narrow_cast(rec, x, dtype, wide_cast):
    """Cast ``x`` to ``dtype`` where either side may be a narrow type: the wide cast (``wide_cast(rec, x, dtype)``,
    the backend's own) between the wide types that hold them, then the result rounded (float16) or wrapped
    (8/16-bit integers) into the target, as numpy's astype does."""
    if dtype is None:
        return NotImplemented
    dtype = np.dtype(dtype)
    src = getattr(x, "dtype", None)
    if src not in NARROW_TYPES and dtype not in NARROW_TYPES:
        return wide_cast(rec, x, dtype)
    if src == dtype:
        return x
    if isinstance(x, np.ndarray):
        x = x.astype(NARROW_TYPES.get(src, src))
    elif src in NARROW_TYPES:
        x = rec.retype(x, NARROW_TYPES[src])
    y = wide_cast(rec, x, NARROW_TYPES.get(dtype, dtype))
    if y is NotImplemented or dtype not in NARROW_TYPES:
        return y
    return rec.narrowed(y, dtype)


@register("Cast", 1, backend=GPU_COMPUTE, narrow_types=True)
@refusing
def cast(rec, layer, x, *, to=None, **attrs):
    return narrow_cast(rec, x, cast_target(to), _cast)


@register("CastLike", 15, backend=GPU_COMPUTE, narrow_types=True)
@refusing
def cast_like(rec, layer, x, target_type, **attrs):
    return narrow_cast(rec, x, getattr(target_type, "dtype", None), _cast)
