"""gpu-pixel programs of the cast family (cast.py): Cast and CastLike between float32, int32/int64 and bool as
one unary draw (or none: int32 and int64, and bool to an integer type, share their texel words), narrow types
through cast_gpu.narrow_cast as on gpu-compute."""

from __future__ import annotations

import numpy as np

from wgsentis.backends.gpu.tensors import GTensor
from wgsentis.backends.pixel_layout import texel_kind
from wgsentis.ops.cast import cast_target
from wgsentis.ops.cast_gpu import narrow_cast
from wgsentis.ops.tensor_gpu import INT_TYPES
from wgsentis.ops.tensor_pixel import pixel, pixel_tensor


# (source kind, target dtype) -> the lane file converting `a` (bool lives as i32 0/1).
_CASTS = {
    ("f32", np.dtype(np.int32)): "pixel/body/cast_f32_to_int.wgsl",
    ("f32", np.dtype(np.int64)): "pixel/body/cast_f32_to_int.wgsl",
    ("f32", np.dtype(np.bool_)): "pixel/body/cast_f32_to_bool.wgsl",
    ("i32", np.dtype(np.float32)): "pixel/body/cast_int_to_f32.wgsl",
    ("i32", np.dtype(np.bool_)): "pixel/body/cast_int_to_bool.wgsl",
}


def _cast(rec, x, dtype):
    dtype = np.dtype(dtype) if dtype is not None else None
    src = getattr(x, "dtype", None)
    if src is None or dtype is None or texel_kind(src) is None or texel_kind(dtype) is None:
        return NotImplemented
    t = pixel_tensor(rec, x)
    if t is None:
        return NotImplemented
    if src == dtype or (src in INT_TYPES and dtype in INT_TYPES) or (src == np.bool_ and dtype in INT_TYPES):
        v = GTensor(t.alloc, t.shape, dtype, t.name, host=None if t.host is None else t.host.astype(dtype))
        v.layout = t.layout  # the same words: int32 <-> int64, bool (0/1) -> int
        return v
    # (a bool, i32 0/1, converts to float32 as an integer does)
    return rec.lanes([t], t.shape, dtype, t.layout.axis if t.shape else 0, _CASTS[(t.layout.kind, dtype)])


@pixel("Cast", 1, narrow_types=True)
def cast(rec, layer, x, *, to=None, **attrs):
    return narrow_cast(rec, x, cast_target(to), _cast)


@pixel("CastLike", 15, narrow_types=True)
def cast_like(rec, layer, x, target_type, **attrs):
    return narrow_cast(rec, x, getattr(target_type, "dtype", None), _cast)
