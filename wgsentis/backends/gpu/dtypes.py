"""How logical dtypes live on the GPU: every one in 4-byte words (int64 range-checked to int32, bool as u32),
and the conversions between host arrays and those words.

The narrow types are widened: int8, uint8, int16 and uint16 values sit in i32 words (exactly), float16 values in
f32 words (each one a float16 value: every layer with a float16 output rounds its float32 result to float16, see
``NARROW_TYPES``). Packing them four or two to a word would save memory and bandwidth but make every program
that indexes elements unpack them; widening lets one set of programs serve every type."""

from __future__ import annotations

import math

import numpy as np

from wgsentis.errors import DeviceError

# Logical dtype -> how it is stored on the GPU (4 bytes per element for all of them).
GPU_TYPES: dict[np.dtype, str] = {
    np.dtype(np.float32): "f32",
    np.dtype(np.int32): "i32",
    np.dtype(np.int64): "i32",  # range-checked at upload; most adapters lack 64-bit integers
    np.dtype(np.bool_): "u32",
    np.dtype(np.int8): "i32",
    np.dtype(np.uint8): "i32",
    np.dtype(np.int16): "i32",
    np.dtype(np.uint16): "i32",
    np.dtype(np.float16): "f32",
}
# Narrow logical dtype -> the wide dtype whose words hold it: programs that know nothing of narrow types see
# such tensors as this wide type, and their results are narrowed back (float16 rounding, integer wrap-around).
NARROW_TYPES: dict[np.dtype, np.dtype] = {
    np.dtype(np.int8): np.dtype(np.int32),
    np.dtype(np.uint8): np.dtype(np.int32),
    np.dtype(np.int16): np.dtype(np.int32),
    np.dtype(np.uint16): np.dtype(np.int32),
    np.dtype(np.float16): np.dtype(np.float32),
}
PRECISIONS = ("float32", "float16")  # Worker(precision=...): how constant matmul operands are held
_I32_MIN, _I32_MAX = -(2**31), 2**31 - 1


class TooLargeForDevice(Exception):  # noqa: N818 - internal: past a device limit; the layer falls back
    """A tensor or kernel past a device limit (binding size, loop passes, int32 range): the layer it belongs
    to runs on the host instead. Never reaches users."""


def narrowing_expr(dtype: np.dtype, value: str = "v") -> str:
    """The WGSL expression (wgsl/common/math.wgsl) bringing a wide word ``value`` into narrow ``dtype``."""
    dtype = np.dtype(dtype)
    if dtype == np.float16:
        return f"round_to_f16({value})"
    if dtype in NARROW_TYPES:
        return f"wrap_int({value}, {8 * dtype.itemsize}u, {int(dtype.kind == 'i')}u)"
    raise ValueError(f"{dtype} is not a narrow type")


def gpu_type_of(dtype: np.dtype) -> str | None:
    """The WGSL storage type of a logical dtype, or None when it cannot live on the GPU."""
    return GPU_TYPES.get(np.dtype(dtype))


def to_device_array(value: np.ndarray, what: str) -> np.ndarray:
    """The 4-byte representation of a host array (int64 range-checked to int32, bool as u32, narrow types
    widened)."""
    value = np.asarray(value)
    if value.dtype == np.float32 or value.dtype == np.int32:
        return np.ascontiguousarray(value)
    if value.dtype == np.int64:
        if value.size and (value.min() < _I32_MIN or value.max() > _I32_MAX):
            raise TooLargeForDevice(f"{what}: int64 values outside the int32 range cannot live on the GPU")
        return value.astype(np.int32)
    if value.dtype == np.bool_:
        return value.astype(np.uint32)
    if value.dtype in NARROW_TYPES:
        return value.astype(NARROW_TYPES[value.dtype])
    raise DeviceError(f"{what}: dtype {value.dtype.name} cannot live on the GPU")


def from_device_array(raw: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Inverse of ``to_device_array`` for ``raw`` 4-byte words."""
    gpu = GPU_TYPES[np.dtype(dtype)]
    view = raw.view({"f32": np.float32, "i32": np.int32, "u32": np.uint32}[gpu])[: math.prod(shape)]
    if dtype == np.bool_:
        return (view != 0).reshape(shape)
    return view.astype(dtype, copy=True).reshape(shape)
