"""Type conversion operators (numpy kernels): Cast, CastLike and BitCast (the linear quantizers are
``quant.py``'s).

Narrow types (bfloat16, float8, float4, int4/uint4, int2/uint2, float8e8m0) are ml_dtypes numpy
dtypes holding one element per byte, so conversions to and from them are plain ``astype`` calls
plus the spec's saturation and rounding rules.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
from onnx import TensorProto

from wgsentis.dtypes import NUMPY_TO_ONNX, to_numpy_dtype
from wgsentis.ops.registry import register

FLOAT8_TYPES = frozenset({TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2,
                          TensorProto.FLOAT8E5M2FNUZ})
_FLOAT8E8M0 = getattr(TensorProto, "FLOAT8E8M0", -1)
# Narrow floats without an Inf/NaN encoding of overflow: ml_dtypes already saturates them.
SATURATING_FLOATS = frozenset(getattr(TensorProto, n) for n in ("FLOAT4E2M1", "FLOAT6E2M3", "FLOAT6E3M2")
                              if hasattr(TensorProto, n))
ONNX_INT_RANGES: dict[int, tuple[int, int]] = {
    TensorProto.UINT8: (0, 255), TensorProto.INT8: (-128, 127),
    TensorProto.UINT16: (0, 65535), TensorProto.INT16: (-32768, 32767),
    TensorProto.UINT4: (0, 15), TensorProto.INT4: (-8, 7),
}
for _name, _range in (("UINT2", (0, 3)), ("INT2", (-2, 1))):
    if hasattr(TensorProto, _name):
        ONNX_INT_RANGES[getattr(TensorProto, _name)] = _range


def _onnx_type(to: int | str) -> int:
    """The ONNX element type of a ``to`` attribute (opset 1 spelled it as a name, e.g. 'FLOAT')."""
    if isinstance(to, str):
        try:
            return TensorProto.DataType.Value(to.upper())
        except ValueError:
            raise ValueError(f"unknown element type name {to!r}") from None
    return int(to)


def onnx_type_of(dtype: np.dtype) -> int:
    """The ONNX element type of a numpy dtype (object and unicode arrays are strings)."""
    if dtype.kind in "OUS":
        return TensorProto.STRING
    try:
        return NUMPY_TO_ONNX[dtype]
    except KeyError:
        raise TypeError(f"no ONNX element type for numpy dtype {dtype}") from None


# ---------------------------------------------------------------------------------------------
# Cast
# ---------------------------------------------------------------------------------------------


def _to_strings(x: np.ndarray) -> np.ndarray:
    """Numbers to strings: the shortest repr that round-trips (e.g. '0.47892547', 'nan', '-inf')."""
    if x.dtype.kind == "O":
        return x.copy()
    if x.dtype.kind == "V":  # ml_dtypes scalars format themselves; numpy cannot cast them to str
        flat = [str(v) for v in x.ravel()]
        return np.array(flat, dtype=object).reshape(x.shape)
    return x.astype(np.str_).astype(object)


def _parse_float(text: Any) -> float:
    s = text.decode() if isinstance(text, bytes) else str(text)
    s = s.strip()
    # 'INF', '+INF', '-INF' and 'NaN' match case-insensitively; Python's float() accepts them all.
    return float(s)


def _parse_int(text: Any) -> int:
    s = text.decode() if isinstance(text, bytes) else str(text)
    try:
        return int(s.strip())
    except ValueError:
        return int(float(s))  # '100.5' -> 100, as the spec allows


def _from_strings(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Strings to numbers: plain or scientific notation, with INF/NaN literals."""
    flat = x.ravel()
    if dtype.kind in "iu":
        values = np.array([_parse_int(v) for v in flat], dtype=np.int64 if dtype.kind == "i" else np.uint64)
    elif dtype.kind == "b":
        values = np.array([_parse_float(v) != 0 for v in flat], dtype=np.bool_)
    else:
        values = np.array([_parse_float(v) for v in flat], dtype=np.float64)
    return values.reshape(x.shape)


def saturated(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Clamp finite and infinite values to the target float's range (NaN stays NaN)."""
    info = ml_dtypes.finfo(dtype)
    if x.dtype.kind == "V":
        x = x.astype(np.float32)
    return np.clip(x, float(info.min), float(info.max))


def to_float8e8m0(x: np.ndarray, saturate: bool = True, round_mode: str = "up") -> np.ndarray:
    """Convert to float8e8m0 (a bare exponent): keeps float32's exponent, rounding the mantissa
    away ('up'), to nearest even ('nearest') or truncating ('down'); Inf and NaN become NaN (0xFF)."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    exponent = ((bits >> 23) & 0xFF).astype(np.uint16)
    special = exponent == 0xFF
    if round_mode == "nearest":
        guard = (bits & 0x400000) != 0
        rest = (bits & 0x3FFFFF) != 0
        odd = exponent > 0  # the implicit leading bit of the kept value
        round_up = guard & (rest | odd)
    elif round_mode == "up":
        round_up = (bits & 0x7FFFFF) != 0
    elif round_mode == "down":
        round_up = np.zeros(bits.shape, dtype=np.bool_)
    else:
        raise ValueError(f"unsupported round_mode {round_mode!r} (expected 'up', 'down' or 'nearest')")
    round_up &= ~special
    if saturate:
        round_up &= exponent != 0xFE
    exponent += round_up
    out = np.where(special, 0xFF, exponent).astype(np.uint8)
    return out.view(ml_dtypes.float8_e8m0fnu)


def cast_target(to: Any) -> np.dtype | None:
    """The numpy dtype of a Cast's ``to`` attribute, or None where it names no type numpy holds."""
    if to is None:
        return None
    try:
        return np.dtype(to_numpy_dtype(_onnx_type(to)))
    except (KeyError, ValueError, TypeError):
        return None


_I32_RANGE = (-(2.0**31), 2.0**31)
_I64_RANGE = (-(2.0**63), 2.0**63)


def float_to_int(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """A float array cast to a numpy integer dtype by one rule on every backend and platform: truncation toward
    zero; for targets of 32 bits or fewer (int32, int16, int8, uint16, uint8), values outside int32's range, NaN
    and infinities give -2^31 first, and the result wraps into the narrow type (so 3e9 -> uint8 is 0 and 300.0
    -> uint8 is 44); int64 and uint32 the same with int64's range and -2^63. This is what x86's conversion
    instructions give, hence numpy and ONNX Runtime on x86; the GPU backends compute it too (wgsl/common/math.wgsl
    f32_to_i32), where a plain i32() would saturate."""
    wide = np.dtype(np.int32) if dtype.itemsize < 4 or dtype == np.int32 else np.dtype(np.int64)
    low, high = _I32_RANGE if wide == np.int32 else _I64_RANGE
    inside = (x >= low) & (x < high)
    with np.errstate(invalid="ignore"):
        truncated = np.where(inside, x, 0).astype(wide)
    truncated[~inside] = np.iinfo(wide).min
    return truncated.astype(dtype)


def cast_to(x: np.ndarray, to: int, saturate: int = 1, round_mode: str = "up") -> np.ndarray:
    """Convert ``x`` to the ONNX element type ``to`` following the Cast rules."""
    if to == TensorProto.STRING:
        return _to_strings(x)
    dtype = to_numpy_dtype(to)
    if x.dtype.kind in "OUS":
        x = _from_strings(x, dtype)
    if x.dtype == dtype:
        return x
    if to in FLOAT8_TYPES and saturate and x.dtype.kind in "fViu":
        return saturated(x, dtype).astype(dtype)
    if to == _FLOAT8E8M0:
        return to_float8e8m0(x, bool(saturate), round_mode)
    if x.dtype.kind == "f" and dtype.type in _WRAPPED_INTS:
        return float_to_int(x, dtype)
    return x.astype(dtype)


# The integer targets float_to_int serves (ml_dtypes' int4/int2 keep their own saturation rules).
_WRAPPED_INTS = frozenset({np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64})


@register("Cast", 1)
@register("Cast", 6)
@register("Cast", 9)
@register("Cast", 13)
def cast_1(ctx, input, *, to=None):
    """Cast (opset 1-18): element type conversion."""
    if to is None:
        raise ValueError("Cast: the 'to' attribute is required")
    return cast_to(input, _onnx_type(to))


@register("Cast", 19)
@register("Cast", 21)
@register("Cast", 23)
def cast_19(ctx, input, *, to=None, saturate=1):
    """Cast (opset 19-23): conversions to float8 clamp to the finite range when ``saturate``."""
    if to is None:
        raise ValueError("Cast: the 'to' attribute is required")
    return cast_to(input, _onnx_type(to), saturate)


@register("Cast", 24)
@register("Cast", 25)
@register("Cast", 28)
def cast_24(ctx, input, *, to=None, saturate=1, round_mode="up"):
    """Cast (opset 24+): ``round_mode`` picks the rounding of conversions to float8e8m0."""
    if to is None:
        raise ValueError("Cast: the 'to' attribute is required")
    return cast_to(input, _onnx_type(to), saturate, round_mode)


@register("CastLike", 15)
def cast_like_15(ctx, input, target_type):
    """CastLike: Cast to the element type of ``target_type``."""
    return cast_to(input, onnx_type_of(target_type.dtype))


@register("CastLike", 19)
@register("CastLike", 21)
@register("CastLike", 23)
def cast_like_19(ctx, input, target_type, *, saturate=1):
    return cast_to(input, onnx_type_of(target_type.dtype), saturate)


@register("CastLike", 24)
@register("CastLike", 25)
def cast_like_24(ctx, input, target_type, *, saturate=1, round_mode="up"):
    return cast_to(input, onnx_type_of(target_type.dtype), saturate, round_mode)


@register("BitCast", 26)
def bit_cast(ctx, input, *, to=None):
    """BitCast: reinterpret the bits of each element as another type of the same width."""
    if to is None:
        raise ValueError("BitCast: the 'to' attribute is required")
    to = _onnx_type(to)
    if to == TensorProto.STRING or input.dtype.kind in "OUS":
        raise TypeError("BitCast: strings have no fixed bit width")
    dtype = to_numpy_dtype(to)
    if dtype.itemsize != input.dtype.itemsize or _bit_width(dtype) != _bit_width(input.dtype):
        raise TypeError(f"BitCast: {input.dtype} and {dtype} differ in bit width")
    if _bit_width(dtype) < 8:
        # Sub-byte types hold one element per byte: keep the low bits, then sign-extend if needed.
        bits = _bit_width(dtype)
        raw = input.view(np.uint8) & np.uint8((1 << bits) - 1)
        if dtype in (np.dtype(ml_dtypes.int4), np.dtype(getattr(ml_dtypes, "int2", ml_dtypes.int4))):
            signed = (raw.astype(np.int8) ^ np.int8(1 << (bits - 1))) - np.int8(1 << (bits - 1))
            return signed.astype(dtype)
        if dtype.kind == "V" and dtype.name.startswith("uint"):
            return raw.astype(dtype)
        return raw.view(dtype)
    # (ascontiguousarray would turn a 0-d input into 1-d)
    return np.array(input, order="C", copy=True).view(dtype)


def _bit_width(dtype: np.dtype) -> int:
    if dtype.kind == "V":
        name = dtype.name
        if name in ("int4", "uint4", "float4_e2m1fn"):
            return 4
        if name in ("int2", "uint2"):
            return 2
        if name.startswith("float6"):
            return 6
    return dtype.itemsize * 8
