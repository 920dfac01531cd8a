"""Numpy kernels of the linear-quantization family: QuantizeLinear, DequantizeLinear (per tensor, per axis,
blocked), DynamicQuantizeLinear, the integer products ConvInteger and MatMulInteger, and QLinearConv and
QLinearMatMul with ONNX Runtime's requantization (``requantize``). Their GPU programs are ``quant_gpu.py``'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto

from wgsentis.dtypes import to_numpy_dtype
from wgsentis.ops.cast import FLOAT8_TYPES, ONNX_INT_RANGES, SATURATING_FLOATS, onnx_type_of, saturated
from wgsentis.ops.conv import conv_nd, spatial_attrs
from wgsentis.ops.registry import register

# ---------------------------------------------------------------------------------------------
# QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear
# ---------------------------------------------------------------------------------------------


def expand_param(value: np.ndarray, shape: tuple[int, ...], axis: int, block_size: int) -> np.ndarray:
    """Make a scale/zero point broadcastable to the data: scalar (per tensor), 1-D along ``axis``
    (per axis), or same rank with ``axis`` blocked by ``block_size`` (blocked)."""
    if value.ndim == 0:
        return value
    if value.size == 1 and not block_size:
        return value.reshape(())
    rank = len(shape)
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} is out of range for input rank {rank}")
    axis = axis + rank if axis < 0 else axis
    if not block_size:
        if value.ndim != 1 or value.size != shape[axis]:
            raise ValueError(f"per-axis scale/zero point of shape {value.shape} does not match "
                             f"input dimension {shape[axis]} on axis {axis}")
        dims = [1] * rank
        dims[axis] = value.size
        return value.reshape(dims)
    if block_size < 0:
        raise ValueError("block_size must be positive")
    if value.ndim != rank:
        raise ValueError(f"blocked scale/zero point must have the input's rank {rank}, got {value.shape}")
    expanded = np.repeat(value, block_size, axis=axis)
    if expanded.shape[axis] < shape[axis]:
        raise ValueError(f"blocked scale of shape {value.shape} with block_size {block_size} does not "
                         f"cover input dimension {shape[axis]}")
    if expanded.shape[axis] != shape[axis]:  # the last block may be partial
        expanded = np.take(expanded, np.arange(shape[axis]), axis=axis)
    if expanded.shape != tuple(shape):
        raise ValueError(f"blocked scale of shape {value.shape} does not match input shape {tuple(shape)}")
    return expanded


def _quantize(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, axis: int = 1,
              saturate: int = 1, block_size: int = 0, output_dtype: int = 0,
              precision: int = 0) -> np.ndarray:
    """y = saturate(round(x / scale) + zero_point), rounding half to even."""
    target = output_dtype or TensorProto.UINT8
    if zero_point is not None:
        zp_type = onnx_type_of(zero_point.dtype)
        if output_dtype and output_dtype != zp_type:
            raise ValueError(f"output_dtype {output_dtype} differs from the zero point's type {zp_type}")
        target = zp_type
    dtype = to_numpy_dtype(target)
    scale_b = expand_param(scale, x.shape, axis, block_size)
    if precision:
        work = to_numpy_dtype(precision)
        scaled = x.astype(work) / scale_b.astype(work)
    elif x.dtype.kind == "V" or scale_b.dtype.kind == "V":
        scaled = x.astype(np.float32) / scale_b.astype(np.float32)
    else:
        scaled = x / scale_b
    if target in ONNX_INT_RANGES:
        lo, hi = ONNX_INT_RANGES[target]
        y = np.rint(scaled)
        if y.dtype.itemsize < 4:  # float16 cannot hold every zero point + value exactly
            y = y.astype(np.float32)
        if zero_point is not None:
            y += expand_param(zero_point, x.shape, axis, block_size).astype(y.dtype)
        np.clip(y, lo, hi, out=y)
        return y.astype(dtype)
    if target in FLOAT8_TYPES:
        # A float8 zero point must be 0, so it is not added.
        return (saturated(scaled, dtype) if saturate else scaled).astype(dtype)
    if target in SATURATING_FLOATS:
        if zero_point is not None:
            scaled = scaled + expand_param(zero_point, x.shape, axis, block_size).astype(np.float32)
        return np.asarray(scaled).astype(dtype)
    raise TypeError(f"QuantizeLinear: {dtype} is not a quantized type")


@register("QuantizeLinear", 10)
def quantize_linear_10(ctx, x, y_scale, y_zero_point=None):
    """QuantizeLinear (opset 10): per-tensor scale and zero point."""
    return _quantize(x, y_scale, y_zero_point)


@register("QuantizeLinear", 13)
def quantize_linear_13(ctx, x, y_scale, y_zero_point=None, *, axis=1):
    """QuantizeLinear (opset 13): per-tensor or per-axis."""
    return _quantize(x, y_scale, y_zero_point, axis)


@register("QuantizeLinear", 19)
def quantize_linear_19(ctx, x, y_scale, y_zero_point=None, *, axis=1, saturate=1):
    """QuantizeLinear (opset 19): adds float8 targets with ``saturate``."""
    return _quantize(x, y_scale, y_zero_point, axis, saturate)


@register("QuantizeLinear", 21)
def quantize_linear_21(ctx, x, y_scale, y_zero_point=None, *, axis=1, saturate=1, block_size=0,
                       output_dtype=0):
    """QuantizeLinear (opset 21): adds blocked quantization and ``output_dtype``."""
    return _quantize(x, y_scale, y_zero_point, axis, saturate, block_size, output_dtype)


@register("QuantizeLinear", 23)
@register("QuantizeLinear", 24)
@register("QuantizeLinear", 25)
@register("QuantizeLinear", 28)
def quantize_linear_23(ctx, x, y_scale, y_zero_point=None, *, axis=1, saturate=1, block_size=0,
                       output_dtype=0, precision=0):
    """QuantizeLinear (opset 23+): ``precision`` sets the type of the division x / scale."""
    return _quantize(x, y_scale, y_zero_point, axis, saturate, block_size, output_dtype, precision)


def _dequantize(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, axis: int = 1,
                block_size: int = 0, output_dtype: int = 0) -> np.ndarray:
    """y = (x - zero_point) * scale, in float32, returned in the scale's type (or output_dtype)."""
    x_type = onnx_type_of(x.dtype)
    y = x.astype(np.float32)
    # Float8 and float4 data carry no zero point (it must be 0 when given).
    if zero_point is not None and x_type not in FLOAT8_TYPES and x_type not in SATURATING_FLOATS:
        if zero_point.dtype != x.dtype:
            raise TypeError(f"DequantizeLinear: zero point type {zero_point.dtype} differs from x's {x.dtype}")
        y -= expand_param(zero_point, x.shape, axis, block_size).astype(np.float32)
    scale_b = expand_param(scale, x.shape, axis, block_size)
    y *= scale_b.astype(np.float32) if scale_b.dtype != np.float32 else scale_b
    out = to_numpy_dtype(output_dtype) if output_dtype else scale.dtype
    return y.astype(out, copy=False)


@register("DequantizeLinear", 10)
def dequantize_linear_10(ctx, x, x_scale, x_zero_point=None):
    """DequantizeLinear (opset 10): per-tensor scale and zero point."""
    return _dequantize(x, x_scale, x_zero_point)


@register("DequantizeLinear", 13)
@register("DequantizeLinear", 19)
def dequantize_linear_13(ctx, x, x_scale, x_zero_point=None, *, axis=1):
    """DequantizeLinear (opset 13-20): per-tensor or per-axis."""
    return _dequantize(x, x_scale, x_zero_point, axis)


@register("DequantizeLinear", 21)
def dequantize_linear_21(ctx, x, x_scale, x_zero_point=None, *, axis=1, block_size=0):
    """DequantizeLinear (opset 21-22): adds blocked dequantization."""
    return _dequantize(x, x_scale, x_zero_point, axis, block_size)


@register("DequantizeLinear", 23)
@register("DequantizeLinear", 24)
@register("DequantizeLinear", 25)
@register("DequantizeLinear", 28)
def dequantize_linear_23(ctx, x, x_scale, x_zero_point=None, *, axis=1, block_size=0, output_dtype=0):
    """DequantizeLinear (opset 23+): ``output_dtype`` overrides the scale's type for the output."""
    return _dequantize(x, x_scale, x_zero_point, axis, block_size, output_dtype)


def requant_multiplier(first_scale: Any, second_scale: Any, y_scale: Any) -> np.ndarray:
    """The requantization multiplier of QLinearConv and QLinearMatMul: first * second / y in float32, in ONNX
    Runtime's order (its kernels scale the float32 accumulator by it and round half to even)."""
    first = np.asarray(first_scale, dtype=np.float32)
    second = np.asarray(second_scale, dtype=np.float32)
    return np.asarray(first * second / np.asarray(y_scale, dtype=np.float32).reshape(()), dtype=np.float32)


def requantize(acc: np.ndarray, multiplier: np.ndarray, zero_point: Any) -> np.ndarray:
    """saturate(round_half_even(float32(acc) * multiplier) + zero point) in the zero point's integer type."""
    zp = np.asarray(zero_point)
    info = np.iinfo(zp.dtype)
    y = np.rint(np.asarray(acc).astype(np.float32) * multiplier) + zp.astype(np.float32).reshape(())
    return np.clip(y, info.min, info.max).astype(zp.dtype)


@register("DynamicQuantizeLinear", 11)
def dynamic_quantize_linear(ctx, x):
    """DynamicQuantizeLinear: uint8 quantization with scale and zero point from the data's range
    (which always includes 0). Returns (y, y_scale, y_zero_point)."""
    qmin, qmax = 0, 255
    x32 = x.astype(np.float32, copy=False)
    if x32.size:
        hi = np.float32(max(0.0, float(np.max(x32))))
        lo = np.float32(min(0.0, float(np.min(x32))))
    else:
        hi = lo = np.float32(0)
    # An all-zero tensor has no range: scale 1, as ONNX Runtime has it (onnx.reference's 1/255 quantizes the
    # same zeros, but the scale output differs).
    scale = np.float32(1.0) if hi == lo else (hi - lo) / np.float32(qmax - qmin)
    zero_point = np.rint(np.clip(np.float32(qmin) - lo / scale, qmin, qmax))
    y = np.rint(x32 / scale)
    y += zero_point
    np.clip(y, qmin, qmax, out=y)
    return (y.astype(np.uint8), np.array(scale, dtype=x.dtype), np.array(zero_point, dtype=np.uint8))


# ---------------------------------------------------------------------------------------------
# Integer convolution and products
# ---------------------------------------------------------------------------------------------


def _zero_point_shaped(zp, channels: int | None, ndim: int, axis: int = 1) -> np.ndarray | float:
    """A zero point as a float64 scalar or a per-channel array broadcastable along ``axis``."""
    if zp is None:
        return 0.0
    zp = np.asarray(zp).astype(np.float64)
    if zp.size == 1:
        return float(zp.reshape(()))
    shape = [1] * ndim
    shape[axis] = zp.size
    return zp.reshape(shape)


def _integer_conv(x, w, x_zero_point, w_zero_point, *, group, strides, dilations, pads, auto_pad):
    """Exact integer convolution accumulated in float64 (exact below 2**53); returns float64."""
    nd = x.ndim - 2
    xf = x.astype(np.float64) - _zero_point_shaped(x_zero_point, None, x.ndim)
    # Per-output-channel weight zero points run along W's axis 0.
    wf = w.astype(np.float64) - _zero_point_shaped(w_zero_point, w.shape[0], w.ndim, axis=0)
    strides, dilations, pads = spatial_attrs(nd, None, strides, dilations, pads)
    return conv_nd(xf, wf, None, group=int(group), strides=strides, dilations=dilations, pads=pads,
                   auto_pad=auto_pad)


@register("ConvInteger", 10)
def conv_integer(ctx, x, w, x_zero_point=None, w_zero_point=None, *, auto_pad="NOTSET", dilations=None,
                 group=1, kernel_shape=None, pads=None, strides=None):
    """ConvInteger: (x - x_zero_point) conv (w - w_zero_point) as int32; zero-padding pads with the zero point."""
    # Padding must use x's zero point (so padded taps contribute 0): the float64 shift does exactly that.
    y = _integer_conv(x, w, x_zero_point, w_zero_point, group=group, strides=strides, dilations=dilations,
                      pads=pads, auto_pad=auto_pad)
    return np.rint(y).astype(np.int32)


def _saturate_to(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Round half to even and saturate into the integer ``dtype``."""
    info = np.iinfo(dtype)
    return np.clip(np.rint(values), info.min, info.max).astype(dtype)


@register("QLinearConv", 10)
def qlinear_conv(ctx, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B=None, *,
                 auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
    """QLinearConv: integer conv accumulated exactly, requantized as ONNX Runtime does (``requantize``:
    the float32 accumulator times x_scale*w_scale/y_scale formed in float32)."""
    acc = _integer_conv(x, w, x_zero_point, w_zero_point, group=group, strides=strides, dilations=dilations,
                        pads=pads, auto_pad=auto_pad)
    nd = x.ndim - 2
    if B is not None:
        acc = acc + B.astype(np.float64).reshape((1, -1) + (1,) * nd)
    w_scale = np.asarray(w_scale)
    multiplier = requant_multiplier(np.asarray(x_scale).reshape(()), w_scale.reshape(-1), y_scale)
    if multiplier.size > 1:
        multiplier = multiplier.reshape((1, -1) + (1,) * nd)
    return requantize(acc, multiplier.reshape(()) if multiplier.size == 1 else multiplier, y_zero_point)


def _shifted(x: np.ndarray, zero_point, axis_from_end: int) -> np.ndarray:
    """x - zero_point in float64; a 1-D zero point runs along the ``axis_from_end`` axis of x."""
    xf = x.astype(np.float64)
    if zero_point is None:
        return xf
    zp = np.asarray(zero_point).astype(np.float64)
    if zp.size == 1:
        return xf - float(zp.reshape(()))
    if axis_from_end == 2 and zp.ndim == 1:
        zp = zp.reshape(-1, 1)  # per-row zero point of A (size M)
    return xf - zp


@register("MatMulInteger", 10)
def matmul_integer(ctx, A, B, a_zero_point=None, b_zero_point=None):
    """MatMulInteger: (A - a_zero_point) @ (B - b_zero_point) as int32 (per-row / per-column zero points)."""
    y = np.matmul(_shifted(A, a_zero_point, 2), _shifted(B, b_zero_point, 1))
    return np.rint(y).astype(np.int32)


@register("QLinearMatMul", 10)
def qlinear_matmul(ctx, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
    """QLinearMatMul: exact integer product requantized by a_scale * b_scale / y_scale, then saturated."""
    acc = np.matmul(_shifted(a, a_zero_point, 2), _shifted(b, b_zero_point, 1))
    a_scale = np.asarray(a_scale)
    b_scale = np.asarray(b_scale)
    if a_scale.ndim == 1 and a_scale.size > 1:
        a_scale = a_scale.reshape(-1, 1)
    # ONNX Runtime's requantization: the float32 accumulator times a float32 multiplier, rounded half to even.
    return requantize(acc, requant_multiplier(a_scale, b_scale, y_scale), y_zero_point)
