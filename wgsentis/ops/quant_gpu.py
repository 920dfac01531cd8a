"""GPU programs of the linear-quantization family, for both GPU backends: QuantizeLinear, DequantizeLinear
(per tensor, per axis, blocked), DynamicQuantizeLinear, ConvInteger, MatMulInteger, QLinearConv and
QLinearMatMul.

Integer data lives on the device widened, one value per 32-bit word (``backends/gpu/dtypes.py``), so these
programs see int8/uint8 tensors as i32 words with their logical dtype kept. The elementwise parts are one
broadcast map of (x, scale, zero point) per op: compute/map3.wgsl on gpu-compute, a lane draw on gpu-pixel. The
integer convolutions and products run as the backend's float32 Conv and MatMul programs on zero-point-shifted
operands: every product of two 8-bit values and every partial sum below 2^24 is exact in float32, so the int32
accumulator comes out exactly as the CPU's for any layer whose partial sums stay under 2^24 in magnitude
(16.7 million: a 3x3x512 window of values near their zero points stays far below it). Requantization follows
ONNX Runtime: the float32 accumulator times a float32 multiplier (x_scale * w_scale / y_scale), rounded half
to even, plus the zero point, saturated; the CPU kernels compute it the same way.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from wgsentis.backends.gpu.device import wgsl_source
from wgsentis.backends.gpu.shader_gen import snippet
from wgsentis.backends.gpu.tensors import Declined, GTensor
from wgsentis.dtypes import ONNX_TO_NUMPY
from wgsentis.ops import registry
from wgsentis.ops.quant import expand_param, requant_multiplier
from wgsentis.ops.elementwise_gpu import bind_division, ternary
from wgsentis.ops.elementwise_pixel import blocked_operands, out_axis
from wgsentis.ops.elementwise_pixel import elementwise
from wgsentis.ops.registry import GPU_COMPUTE, GPU_PIXEL, register
from wgsentis.ops.tensor_gpu import MAX_RANK

# The 8- and 16-bit integer types a quantized tensor takes, with their ranges.
INT_RANGES = {np.dtype(t): (int(np.iinfo(t).min), int(np.iinfo(t).max))
              for t in (np.int8, np.uint8, np.int16, np.uint16)}
_DEVICE_INTS = (*INT_RANGES, np.dtype(np.int32))
_FLOATS = (np.dtype(np.float32), np.dtype(np.float16))


def host_value(t: Any) -> np.ndarray | None:
    """A host value: the array itself, or a device tensor's host copy where it has one."""
    if isinstance(t, np.ndarray):
        return t
    return t.host if isinstance(t, GTensor) and t.host is not None else None


def _wide_host(value: np.ndarray) -> np.ndarray:
    """A host parameter as the device holds it: float16 as float32, narrow integers as float32 (exact)."""
    return np.ascontiguousarray(value.astype(np.float32))


def map3(rec, inputs: list[Any], expr: str, out_dtype: Any, words: list[float] | None = None) -> GTensor:
    """Y = ``expr`` of ``a``, ``b``, ``c`` (``inputs``, host arrays or device tensors; a missing one is a
    scalar 0) broadcast together, on this recorder's backend. ``words``: float32 host parameters the expression
    reads as ``pef(k)`` (gpu-pixel only: the draw's words, so that their values are not in the shader source)."""
    inputs = [np.zeros((), np.float32) if x is None else x for x in inputs]
    inputs += [np.zeros((), np.float32)] * (3 - len(inputs))
    shapes = [tuple(x.shape) for x in inputs]
    out_shape = tuple(np.broadcast_shapes(*shapes))
    if len(out_shape) > MAX_RANK:
        raise Declined
    if rec.program.backend == GPU_PIXEL:
        expr = bind_division(rec, expr)
        helpers = wgsl_source("common/subnormal.wgsl")
        if words:
            return _pixel_lanes(rec, inputs, out_shape, f"r = {expr};", out_dtype, words, helpers)
        out = elementwise(rec, inputs, f"r = {expr};", out_dtype, act=False, helpers=helpers)
        if out is NotImplemented:
            raise Declined
        return out
    if words:
        raise ValueError("map3's words are gpu-pixel's")
    expr = bind_division(rec, expr)
    tensors = [x if isinstance(x, GTensor) else rec.upload(x, f"{rec.layer.name}:q{k}")
               for k, x in enumerate(inputs)]
    return ternary(rec, tensors, expr, out_dtype)


def _pixel_lanes(rec, inputs: list[Any], shape: tuple[int, ...], lane: str, out_dtype: Any, words: list[float],
                 helpers: str) -> GTensor:
    """elementwise_pixel.elementwise's draw (no fused activation) with ``words`` after the lane's own words."""
    axis = out_axis(inputs, shape)
    tensors = blocked_operands(rec, inputs, shape, axis, f"{rec.layer.name}:q")
    if tensors is None:
        raise Declined
    return rec.lanes(tensors, shape, out_dtype, axis, lane, [float(np.float32(w)) for w in words], helpers=helpers)


def _param(rec, value: Any, shape: tuple[int, ...], axis: int, block_size: int) -> Any:
    """A scale or zero point made broadcastable to data of ``shape``: host values expanded as the CPU kernel
    expands them (per axis, blocked), device ones only as scalars."""
    host = host_value(value)
    if host is not None:
        return _wide_host(expand_param(np.asarray(host), shape, axis, block_size))
    if isinstance(value, GTensor) and value.size == 1:
        return value  # a device scalar (DynamicQuantizeLinear's) broadcasts as it is
    if isinstance(value, GTensor) and not block_size and value.ndim == 1 and shape:
        # A per-axis parameter computed on the device (or fed as an input): its values laid along ``axis``.
        axis = axis + len(shape) if axis < 0 else axis
        if not 0 <= axis < len(shape) or value.shape[0] != shape[axis]:
            raise Declined  # the CPU kernel names the mismatch
        dims = np.array([1] * axis + [shape[axis]] + [1] * (len(shape) - axis - 1), np.int64)
        laid = _standard(rec, "Reshape", 14)(rec, rec.layer, value, dims)
        if laid is NotImplemented:
            raise Declined
        return laid
    raise Declined


def expression(name: str, lo: int | None = None, hi: int | None = None) -> str:
    """The broadcast maps' expression of ``a``, ``b``, ``c`` in ``wgsl/common/expr/<name>.wgsl``; ``lo`` and ``hi``:
    the range its result saturates into (the target type's, a variant per type)."""
    subs = {} if lo is None else {"LO": f"{lo:.1f}", "HI": f"{hi:.1f}"}
    return snippet(f"common/expr/{name}.wgsl", subs)


def _quantize_expr(rec, lo: int, hi: int, half_input: bool) -> str:
    """x / scale rounded half to even, plus the zero point, saturated: the CPU kernel's order of operations
    (a float16 input divides in float16: numpy rounds the float32 quotient to float16). Fragment shaders may
    flush subnormals (wgsl/common/subnormal.wgsl): on gpu-pixel the quotient is taken through it."""
    quotient = expression("quotient_subnormal" if rec.program.backend == GPU_PIXEL else "quotient")
    return snippet(f"common/expr/{'quantize_f16' if half_input else 'quantize'}.wgsl",
                   {"QUOTIENT": quotient, "LO": f"{lo:.1f}", "HI": f"{hi:.1f}"})


def _quantize(rec, x, scale, zero_point, axis: int = 1, block_size: int = 0, output_dtype: int = 0,
              precision: int = 0):
    if precision or getattr(x, "dtype", None) not in _FLOATS:
        raise Declined
    if zero_point is not None:
        target = np.dtype(zero_point.dtype)
    else:
        target = np.dtype(ONNX_TO_NUMPY.get(output_dtype, np.uint8)) if output_dtype else np.dtype(np.uint8)
    if target not in INT_RANGES:
        raise Declined  # 4-bit and float8 targets stay on the CPU kernel
    shape = tuple(x.shape)
    s = _param(rec, scale, shape, axis, block_size)
    z = None if zero_point is None else _param(rec, zero_point, shape, axis, block_size)
    lo, hi = INT_RANGES[target]
    return map3(rec, [x, s, z], _quantize_expr(rec, lo, hi, x.dtype == np.float16), target)


def _dequantize(rec, x, scale, zero_point, axis: int = 1, block_size: int = 0, output_dtype: int = 0):
    if getattr(x, "dtype", None) not in _DEVICE_INTS or getattr(scale, "dtype", None) not in _FLOATS:
        raise Declined
    out = np.dtype(ONNX_TO_NUMPY[output_dtype]) if output_dtype else np.dtype(scale.dtype)
    if out not in _FLOATS:
        raise Declined
    if zero_point is not None and zero_point.dtype != x.dtype:
        raise Declined  # the CPU kernel names the mismatch
    shape = tuple(x.shape)
    s = _param(rec, scale, shape, axis, block_size)
    z = None if zero_point is None else _param(rec, zero_point, shape, axis, block_size)
    # (x - zero point) * scale in float32, as the CPU kernel computes it; a float16 output rounded from that.
    y = map3(rec, [x, s, z], expression("dequantize"), np.float32)
    return rec.narrowed(y, out) if out == np.float16 else y


def _declining(fn):
    def build(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Declined as declined:
            if declined.args:
                raise  # a reason the runtime reports as it is
            return NotImplemented  # the CPU kernel runs; the runtime names the arguments declined
        except (ValueError, TypeError):
            return NotImplemented  # the CPU kernel runs (and reports what is wrong, if anything)

    build.__name__ = fn.__name__
    build.__doc__ = fn.__doc__
    return build


def _on_both(op: str, since: int, host_inputs: tuple[int, ...] = ()):
    """Register a builder on both GPU backends (it sees narrow types as they are)."""

    def wrap(fn):
        build = _declining(fn)
        for backend in (GPU_COMPUTE, GPU_PIXEL):
            register(op, since, backend=backend, host_inputs=host_inputs, narrow_types=True)(build)
        return build

    return wrap


@_on_both("QuantizeLinear", 10)
def quantize_linear_10(rec, layer, x, y_scale, y_zero_point=None, **attrs):
    return _quantize(rec, x, y_scale, y_zero_point)


@_on_both("QuantizeLinear", 13)
def quantize_linear_13(rec, layer, x, y_scale, y_zero_point=None, *, axis=1, block_size=0, output_dtype=0,
                       precision=0, **attrs):
    return _quantize(rec, x, y_scale, y_zero_point, axis, block_size, output_dtype, precision)


@_on_both("DequantizeLinear", 10)
def dequantize_linear_10(rec, layer, x, x_scale, x_zero_point=None, **attrs):
    return _dequantize(rec, x, x_scale, x_zero_point)


@_on_both("DequantizeLinear", 13)
def dequantize_linear_13(rec, layer, x, x_scale, x_zero_point=None, *, axis=1, block_size=0, output_dtype=0,
                         **attrs):
    return _dequantize(rec, x, x_scale, x_zero_point, axis, block_size, output_dtype)


def _standard(rec, op: str, opset: int):
    """The recorder's backend builder of standard op ``op``."""
    impl = registry.lookup(op, "", opset, rec.program.backend)
    if impl is None:
        raise Declined
    return impl.build


def _full_reduce(rec, layer, x, op: str) -> Any:
    out = _standard(rec, op, 18)(rec, layer, x, None, keepdims=0)
    if out is NotImplemented:
        raise Declined
    return out


@_on_both("DynamicQuantizeLinear", 11)
def dynamic_quantize_linear(rec, layer, x, **attrs):
    """uint8 quantization with scale and zero point from the data's range (always including 0), all on the
    device: the range's two reductions, two scalar draws and the quantizing map."""
    if getattr(x, "dtype", None) != np.float32 or not isinstance(x, GTensor) or x.size == 0:
        raise Declined
    hi = _full_reduce(rec, layer, x, "ReduceMax")
    lo = _full_reduce(rec, layer, x, "ReduceMin")
    # scale = (hi - lo) / 255 over the range widened to hold 0 (1 for an all-zero tensor), as the CPU kernel.
    scale = map3(rec, [hi, lo], expression("dynamic_scale"), np.float32)
    zero = map3(rec, [lo, scale], expression("dynamic_zero_point"), np.uint8)
    y = map3(rec, [x, scale, zero], _quantize_expr(rec, 0, 255, False), np.uint8)
    return y, scale, zero


# -- integer products -------------------------------------------------------------------------------------------
def zero_shifted(rec, layer, t: Any, zero_point: Any, shape_zp, key: str) -> Any:
    """``t`` - zero point as float32: a host constant once per program (``rec.derived``), a device tensor by a
    map. ``shape_zp`` reshapes a 1-D zero point to broadcast the way the op's spec says."""
    if getattr(t, "dtype", None) not in _DEVICE_INTS:
        raise Declined
    zp_host = None if zero_point is None else host_value(zero_point)
    host = host_value(t) if isinstance(t, np.ndarray) else None
    if host is not None and (zero_point is None or zp_host is not None):
        zp = None if zero_point is None else np.asarray(zp_host)
        sources = (host,) if zp is None else (host, zp)

        def make() -> np.ndarray:
            shifted = host.astype(np.float32)
            if zp is not None:
                shifted = shifted - shape_zp(zp.astype(np.float32))
            return np.ascontiguousarray(shifted)

        return rec.derived(("zero-point-shifted", key), sources, make)
    if zero_point is None:
        return map3(rec, [t], expression("to_f32"), np.float32)
    zp = shape_zp(_wide_host(np.asarray(zp_host))) if zp_host is not None else zero_point
    if not isinstance(zp, np.ndarray) and zp.size != 1:
        raise Declined
    return map3(rec, [t, None, zp], expression("zero_shifted"), np.float32)


def _zp_per_row(zp: np.ndarray) -> np.ndarray:
    """MatMulInteger's A zero point: a scalar, or one per row of A (M,)."""
    return zp.reshape(()) if zp.size == 1 else zp.reshape(-1, 1)


def _zp_per_col(zp: np.ndarray) -> np.ndarray:
    """MatMulInteger's B zero point: a scalar, or one per column of B (N,)."""
    return zp.reshape(()) if zp.size == 1 else zp


def _zp_per_channel(rank: int):
    def shape(zp: np.ndarray) -> np.ndarray:
        return zp.reshape(()) if zp.size == 1 else zp.reshape((-1,) + (1,) * (rank - 1))

    return shape


def _float_result(out: Any) -> Any:
    if out is NotImplemented or isinstance(out, tuple):
        raise Declined
    return out


def _to_int32(rec, acc: Any) -> Any:
    return map3(rec, [acc], expression("to_i32"), np.int32)


def requantize_on_device(rec, acc: Any, multiplier: np.ndarray, zero_point: Any) -> Any:
    """saturate(round(acc * multiplier) + zero point) in the zero point's type (ONNX Runtime's requantization)."""
    target = np.dtype(zero_point.dtype) if zero_point is not None else np.dtype(np.uint8)
    if target not in INT_RANGES:
        raise Declined
    zp = host_value(zero_point) if zero_point is not None else np.zeros((), np.float32)
    if zp is None or np.asarray(zp).size != 1:
        raise Declined
    lo, hi = INT_RANGES[target]
    return map3(rec, [acc, multiplier, _wide_host(np.asarray(zp).reshape(()))], expression("requantize", lo, hi),
                target)


_CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


def _conv(rec, layer, x, w, x_zero_point, w_zero_point, bias, attrs: dict) -> Any:
    """The float32 conv of the zero-point-shifted operands (exact integer sums; see the module docstring)."""
    if host_value(w) is None or getattr(x, "ndim", 0) < 3 or getattr(x_zero_point, "size", 1) != 1:
        raise Declined  # (x's zero point is a scalar by the spec)
    xf = zero_shifted(rec, layer, x, x_zero_point, lambda zp: zp.reshape(()), "x")
    wf = zero_shifted(rec, layer, np.asarray(host_value(w)), w_zero_point, _zp_per_channel(w.ndim), "w")
    conv_attrs = {k: v for k, v in attrs.items() if k in _CONV_ATTRS}
    return _float_result(_standard(rec, "Conv", 11)(rec, layer, xf, wf, bias, **conv_attrs))


@_on_both("ConvInteger", 10, host_inputs=(1, 3))
def conv_integer(rec, layer, x, w, x_zero_point=None, w_zero_point=None, **attrs):
    return _to_int32(rec, _conv(rec, layer, x, w, x_zero_point, w_zero_point, None, attrs))


@_on_both("QLinearConv", 10, host_inputs=(1, 3, 4, 5, 6, 7, 8))
def qlinear_conv(rec, layer, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B=None,
                 **attrs):
    if any(host_value(s) is None for s in (x_scale, w_scale, y_scale)):
        raise Declined
    bias = None
    if B is not None:
        b = host_value(B)
        if b is None:
            raise Declined
        bias = rec.derived(("qconv-bias",), (b,), lambda: np.ascontiguousarray(b.astype(np.float32)))
    acc = _conv(rec, layer, x, w, x_zero_point, w_zero_point, bias, attrs)
    multiplier = requant_multiplier(host_value(x_scale).reshape(()), host_value(w_scale).reshape(-1),
                                    host_value(y_scale))
    multiplier = multiplier.reshape((-1,) + (1,) * (acc.ndim - 2)) if multiplier.size > 1 else multiplier.reshape(())
    return requantize_on_device(rec, acc, multiplier, y_zero_point)


def _matmul(rec, layer, a, b, a_zero_point, b_zero_point) -> Any:
    af = zero_shifted(rec, layer, a, a_zero_point, _zp_per_row, "a")
    bf = zero_shifted(rec, layer, b, b_zero_point, _zp_per_col, "b")
    return _float_result(_standard(rec, "MatMul", 13)(rec, layer, af, bf))


@_on_both("MatMulInteger", 10)
def matmul_integer(rec, layer, A, B, a_zero_point=None, b_zero_point=None, **attrs):
    return _to_int32(rec, _matmul(rec, layer, A, B, a_zero_point, b_zero_point))


@_on_both("QLinearMatMul", 10, host_inputs=(1, 4, 6, 7))
def qlinear_matmul(rec, layer, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point, **attrs):
    scales = [host_value(s) for s in (a_scale, b_scale, y_scale)]
    if any(s is None for s in scales) or scales[2].size != 1:
        raise Declined
    acc = _matmul(rec, layer, a, b, a_zero_point, b_zero_point)
    a_s = scales[0].reshape(-1, 1) if scales[0].size > 1 else scales[0].reshape(())
    b_s = scales[1].reshape(()) if scales[1].size == 1 else scales[1]
    return requantize_on_device(rec, acc, requant_multiplier(a_s, b_s, scales[2]), y_zero_point)


__all__ = ["INT_RANGES", "expression", "map3"]
