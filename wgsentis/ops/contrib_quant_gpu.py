"""GPU program builders, for gpu-compute and gpu-pixel alike, of the quantized ``com.microsoft`` operators ONNX
Runtime's quantization tools write (contrib_quant.py): QuantizeLinear, DequantizeLinear, QLinearAdd, QLinearMul,
QLinearSigmoid, QLinearLeakyRelu, QLinearSoftmax, QLinearConcat, QLinearAveragePool, QLinearGlobalAveragePool, the
NHWC QLinearConv, QGemm, MatMulIntegerToFloat, DynamicQuantizeMatMul, MatMulNBits, QAttention,
QEmbedLayerNormalization, DynamicQuantizeLSTM.

They are composed as contrib_gpu.py's float ones are, by its ``Composer`` and ``register_composite`` (the standard ops'
builders of the same backend; NotImplemented, and the CPU kernel, wherever one of those declines or a case is
outside what they cover, such as 4-bit codes or a past KV cache), and also use quant_gpu.py's builders and its
broadcast map (``map3``) for their elementwise float32 steps, written in the CPU kernels' order so that they agree
bit for bit (see the section's comment).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from wgsentis.backends.gpu.shader_gen import snippet
from wgsentis.backends.gpu.tensors import Declined, GTensor
from wgsentis.ops import contrib, contrib_quant, quant_gpu
from wgsentis.ops.activations import ACTIVATIONS, rnn_activations
from wgsentis.ops.registry import GPU_PIXEL
from wgsentis.ops.contrib_gpu import (
    Composer,
    all_float32,
    embed_layer_normalization,
    output_wanted,
    packed_attention,
    register_composite,
)


# -- quantized operators: QuantizeLinear, DequantizeLinear, the QLinear family, QGemm, the integer products --------
#
# Integer tensors arrive with their logical dtype (the builders are registered with narrow_types) and live on the
# device as one value per 32-bit word. Each CPU kernel's float32 steps are replicated in its order
# (contrib_quant.py): host parameters computed on the host by the same numpy float32 operations, each device
# product that an add or a subtraction follows rounded on its own through opaque() (never fused into an FMA),
# divisions through the device's correctly rounded division (div_f32). Integer products run as the backend's
# float32 MatMul or Conv on zero-point-shifted operands, exact while their partial sums stay below 2^24 (see
# quant_gpu.py).

_CODE_TYPES = (np.dtype(np.int8), np.dtype(np.uint8))
# The expressions below are assembled from the templates in wgsl/common/expr/ (float_bits, alone, saturated,
# codes_less): opaque() and opaque_zero() are common/math.wgsl's, a zero the compiler cannot see.


def _lit(value: Any) -> str:
    """A float32 host scalar as WGSL the compiler cannot fold into the expression around it (a constant divisor
    could become a product with its rounded reciprocal, a constant factor part of an FMA): its exact bits,
    through opaque()."""
    bits = int(np.asarray(value, np.float32).reshape(1).view(np.uint32)[0])
    return snippet("common/expr/float_bits.wgsl", {"BITS": str(bits)})


class _Words:
    """The per-tensor host parameters (scales, zero points, their ratios) of one map's expression. On gpu-pixel
    they are the draw's words, read as ``pef(k)`` (a uniform the compiler cannot fold either), so that one
    pipeline serves every value; gpu-compute's broadcast map (compute/map3.wgsl) has no words, so there they are
    literals (``_lit``, the zero points as decimals)."""

    def __init__(self, c: Composer) -> None:
        self.c = c
        self.pixel = c.rec.program.backend == GPU_PIXEL
        self.values: list[float] = []

    def _word(self, value: Any) -> str:
        self.values.append(float(np.float32(value)))
        return f"pef({len(self.values) - 1}u)"

    def lit(self, value: Any) -> str:
        """A float32 host scalar: a word, or its exact bits through opaque()."""
        return self._word(value) if self.pixel else _lit(value)

    def zero(self, value: float) -> str:
        """A zero point (an integer, exact in float32)."""
        return self._word(value) if self.pixel else f"{value:.1f}"

    def map(self, inputs: list[Any], expr: str, dtype: Any) -> Any:
        """Composer.map of ``expr``, which reads these words."""
        wide = [x.astype(np.int32) if isinstance(x, np.ndarray) and x.dtype in quant_gpu.INT_RANGES else x
                for x in inputs]
        return quant_gpu.map3(self.c.rec, wide, expr, np.dtype(dtype), self.values if self.pixel else None)


def _alone(expr: str) -> str:
    """``expr`` rounded to float32 on its own: a product never fused with the add or subtraction after it."""
    return snippet("common/expr/alone.wgsl", {"EXPR": expr})


def _saturated(expr: str, dtype: np.dtype) -> str:
    """A float32 expression clamped into ``dtype``'s range and converted (it is already integral)."""
    lo, hi = quant_gpu.INT_RANGES[np.dtype(dtype)]
    return snippet("common/expr/saturated.wgsl", {"EXPR": expr, "LO": f"{lo:.1f}", "HI": f"{hi:.1f}"})


def _codes_less(operand: str, zero: str) -> str:
    """Operand ``operand``'s codes less their per-tensor zero point (``_Words.zero``), in float32 (exact)."""
    return snippet("common/expr/codes_less.wgsl", {"CODE": operand, "ZERO": zero})


def _scalar_of(value: Any, dtype: Any = np.float32) -> Any:
    """A per-tensor host parameter (scale or zero point) as a ``dtype`` scalar; declines a device one or one with
    several elements."""
    host = quant_gpu.host_value(value) if value is not None else None
    if host is None or np.asarray(host).size != 1:
        raise Declined
    return np.asarray(host).astype(dtype).reshape(())[()]


def _zero_of(zero_point: Any) -> float:
    """A per-tensor zero point as a float (0 where omitted)."""
    return 0.0 if zero_point is None else float(_scalar_of(zero_point, np.int64))


def _codes_type(x: Any) -> np.dtype:
    dtype = np.dtype(getattr(x, "dtype", np.float64))
    if dtype not in _CODE_TYPES:
        raise Declined  # 8-bit codes only (the CPU kernels' tables and sums assume them)
    return dtype


def _out_type(x: Any, zero_point: Any) -> np.dtype:
    """The output dtype of a requantizing op: its zero point's, else its input's (contrib_quant.out_dtype_of)."""
    dtype = np.dtype(zero_point.dtype) if zero_point is not None else np.dtype(x.dtype)
    if dtype not in quant_gpu.INT_RANGES:
        raise Declined
    return dtype


def _dequantized(w: _Words, x_zero: float, x_scale: Any) -> str:
    """contrib_quant.dequant_per_tensor of ``a``: (f32(a) - zero point) * scale, in float32."""
    return f"{_codes_less('a', w.zero(x_zero))} * {w.lit(x_scale)}"


def _quantized(w: _Words, value: str, y_scale: Any, y_zero: float, dtype: np.dtype) -> str:
    """contrib_quant.quantize_f32 of ``value``: round_half_even(value / y_scale) + y_zero, saturated into ``dtype``."""
    return _saturated(f"round(div_f32({_alone(value)}, {w.lit(y_scale)})) + {w.zero(y_zero)}", dtype)


@register_composite("QuantizeLinear", host_inputs=(1, 2), narrow_types=True)
def quantize_linear(c: Composer, x, y_scale, y_zero_point=None, *, axis=1):
    """ORT's QuantizeLinear: ONNX's (quant_gpu.py), to 8- and 16-bit codes; 4-bit ones stay on the CPU."""
    return c.quant(quant_gpu.quantize_linear_13, "QuantizeLinear", x, y_scale, y_zero_point, axis=axis)


@register_composite("DequantizeLinear", host_inputs=(1, 2), narrow_types=True)
def dequantize_linear(c: Composer, x, x_scale, x_zero_point=None, *, axis=1):
    """ORT's DequantizeLinear: ONNX's (quant_gpu.py), of 8-, 16- and 32-bit codes; 4-bit ones stay on the CPU."""
    return c.quant(quant_gpu.dequantize_linear_13, "DequantizeLinear", x, x_scale, x_zero_point, axis=axis)


def _qlinear_binary(c: Composer, A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point,
                    mul: bool) -> Any:
    """contrib_quant.qlinear_binary in one broadcast map: a * (a_scale / c_scale) + b * (b_scale / c_scale) (each
    product rounded apart), or a * b * (a_scale * b_scale / c_scale), rounded half to even, plus C's zero point,
    saturated."""
    if A is None or B is None:
        raise Declined
    out = _out_type(A, C_zero_point)
    a_scale, b_scale, c_scale = (_scalar_of(s) for s in (A_scale, B_scale, C_scale))
    w = _Words(c)
    a = _codes_less("a", w.zero(_zero_of(A_zero_point)))
    b = _codes_less("b", w.zero(_zero_of(B_zero_point)))
    if mul:
        values = f"{_alone(f'{a} * {b}')} * {w.lit(a_scale * b_scale / c_scale)}"
    else:
        values = f"{_alone(f'{a} * {w.lit(a_scale / c_scale)}')} + {_alone(f'{b} * {w.lit(b_scale / c_scale)}')}"
    return w.map([A, B], _saturated(f"round({_alone(values)}) + {w.zero(_zero_of(C_zero_point))}", out), out)


@register_composite("QLinearAdd", host_inputs=(1, 2, 4, 5, 6, 7), narrow_types=True)
def qlinear_add(c: Composer, A, A_scale, A_zero_point=None, B=None, B_scale=None, B_zero_point=None, C_scale=None,
                C_zero_point=None):
    """A + B on quantized, broadcast inputs, requantized to C's scale and zero point."""
    return _qlinear_binary(c, A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point, False)


@register_composite("QLinearMul", host_inputs=(1, 2, 4, 5, 6, 7), narrow_types=True)
def qlinear_mul(c: Composer, A, A_scale, A_zero_point=None, B=None, B_scale=None, B_zero_point=None, C_scale=None,
                C_zero_point=None):
    """A * B on quantized, broadcast inputs, requantized to C's scale and zero point."""
    return _qlinear_binary(c, A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point, True)


def _by_table(c: Composer, X, X_scale, X_zero_point, Y_scale, Y_zero_point, fn) -> Any:
    """An 8-bit unary op as the CPU kernel runs it: its 256-entry table (contrib_quant.table_lookup over every code,
    built on the host as ORT builds it), gathered on the device by code."""
    dtype = _codes_type(X)
    if not isinstance(X, GTensor) or Y_scale is None:
        raise Declined
    scales = [quant_gpu.host_value(v) if v is not None else None
              for v in (X_scale, X_zero_point, Y_scale, Y_zero_point)]
    if any(host is None and given is not None for host, given in zip(scales, (X_scale, X_zero_point, Y_scale,
                                                                            Y_zero_point), strict=True)):
        raise Declined
    low = int(np.iinfo(dtype).min)
    codes = (np.arange(256, dtype=np.int64) + low).astype(dtype)
    table = contrib_quant.table_lookup(codes, *scales, fn)  # table[k] is the code k + low's result
    index = c.retype(X, np.int32) if low == 0 else c.map([X], f"a - ({low})", np.int32)
    y = c.op("Gather", 13, table.astype(np.int32), index, axis=0)
    return c.retype(y, table.dtype)


@register_composite("QLinearSigmoid", host_inputs=(1, 2, 3, 4), narrow_types=True)
def qlinear_sigmoid(c: Composer, X, X_scale, X_zero_point=None, Y_scale=None, Y_zero_point=None):
    """Sigmoid on 8-bit codes, by the CPU kernel's table."""
    return _by_table(c, X, X_scale, X_zero_point, Y_scale, Y_zero_point, ACTIVATIONS["Sigmoid"].kernel)


@register_composite("QLinearLeakyRelu", host_inputs=(1, 2, 3, 4), narrow_types=True)
def qlinear_leaky_relu(c: Composer, X, X_scale, X_zero_point=None, Y_scale=None, Y_zero_point=None, *, alpha=0.01):
    """LeakyRelu on 8-bit codes, by the CPU kernel's table."""
    return _by_table(c, X, X_scale, X_zero_point, Y_scale, Y_zero_point,
                     lambda v: ACTIVATIONS["LeakyRelu"].kernel(v, alpha=float(alpha)))


@register_composite("QLinearSoftmax", host_inputs=(1, 2, 3, 4), narrow_types=True)
def qlinear_softmax(c: Composer, X, X_scale, x_zero_point=None, y_scale=None, y_zero_point=None, *, axis=-1,
                    opset=13):
    """Dequantize (exact), the backend's Softmax (along ``axis``; before opset 13 over the axes from ``axis`` on,
    which is Softmax-1's own rule), quantize (exact): only the softmax's sum may round differently."""
    _codes_type(X)
    out = _out_type(X, y_zero_point)
    w = _Words(c)
    x = w.map([X], _dequantized(w, _zero_of(x_zero_point), _scalar_of(X_scale)), np.float32)
    probs = c.op("Softmax", 13 if int(opset or 13) >= 13 else 1, x, axis=int(axis))
    w = _Words(c)
    return w.map([probs], _quantized(w, "a", _scalar_of(y_scale), _zero_of(y_zero_point), out), out)


@register_composite("QLinearConcat", host_inputs=(0, 1), narrow_types=True)
def qlinear_concat(c: Composer, Y_scale, Y_zero_point, *inputs, axis=None):
    """Concat of (x, scale, zero point) triples, each requantized to Y's scale and zero point by one map (copied
    as it is where they are Y's)."""
    if axis is None or not inputs or len(inputs) % 3 or Y_zero_point is None:
        return NotImplemented
    out = _out_type(Y_zero_point, Y_zero_point)
    y_scale, y_zero = _scalar_of(Y_scale), _zero_of(Y_zero_point)
    parts = []
    for k in range(0, len(inputs), 3):
        x, scale, zero_point = inputs[k:k + 3]
        if x is None or _codes_type(x) != out:
            raise Declined
        x_scale, x_zero = _scalar_of(scale), _zero_of(zero_point)
        if x_scale == y_scale and x_zero == y_zero:
            parts.append(c.retype(x, np.int32))
        elif isinstance(x, np.ndarray):  # a constant part, requantized on the host as the CPU kernel does
            values = contrib_quant.dequant_per_tensor(x, scale, zero_point)
            parts.append(contrib_quant.quantize_f32(values, Y_scale, Y_zero_point, out).astype(np.int32))
        else:
            w = _Words(c)
            parts.append(w.map([x], _quantized(w, _dequantized(w, x_zero, x_scale), y_scale, y_zero, out), np.int32))
    return c.retype(c.concat(parts, int(axis)), out)


def _to_channels_first(c: Composer, x: Any) -> Any:
    rank = x.ndim
    return c.transpose(x, [0, rank - 1, *range(1, rank - 1)])


def _to_channels_last(c: Composer, x: Any) -> Any:
    rank = x.ndim
    return c.transpose(x, [0, *range(2, rank), 1])


@register_composite("QLinearAveragePool", host_inputs=(1, 2, 3, 4), narrow_types=True)
def qlinear_average_pool(c: Composer, X, x_scale, x_zero_point=None, y_scale=None, y_zero_point=None, *,
                         auto_pad="NOTSET", ceil_mode=0, channels_last=0, count_include_pad=0, kernel_shape=None,
                         pads=None, strides=None):
    """Dequantize (exact), the backend's AveragePool (NCHW; transposed around it where channels_last), quantize
    (exact): only the window sums may round differently."""
    _codes_type(X)
    out = _out_type(X, y_zero_point)
    if X.ndim < 3 or kernel_shape is None:
        raise Declined
    w = _Words(c)
    x = w.map([X], _dequantized(w, _zero_of(x_zero_point), _scalar_of(x_scale)), np.float32)
    if channels_last:
        x = _to_channels_first(c, x)
    y = c.op("AveragePool", 19, x, auto_pad=auto_pad, ceil_mode=ceil_mode, count_include_pad=count_include_pad,
             kernel_shape=kernel_shape, pads=pads, strides=strides)
    if channels_last:
        y = _to_channels_last(c, y)
    w = _Words(c)
    return w.map([y], _quantized(w, "a", _scalar_of(y_scale), _zero_of(y_zero_point), out), out)


@register_composite("QLinearGlobalAveragePool", host_inputs=(1, 2, 3, 4), narrow_types=True)
def qlinear_global_average_pool(c: Composer, X, x_scale, x_zero_point, y_scale, y_zero_point, *, channels_last=0):
    """The codes summed over the spatial axes in float32 (exact: every partial sum of 8-bit codes stays below 2^24
    for windows under 65793 elements), then as the CPU kernel: (sum - zero point * count) * (x_scale / (y_scale *
    count)), rounded half to even, plus y's zero point, saturated. Bit for bit."""
    _codes_type(X)
    out = _out_type(X, y_zero_point)
    rank = X.ndim
    if rank < 3:
        raise Declined
    spatial = list(range(1, rank - 1)) if channels_last else list(range(2, rank))
    count = math.prod(X.shape[a] for a in spatial)
    if count == 0 or 256 * count >= 2 ** 24:
        raise Declined
    sums = c.op("ReduceSum", 1, c.map([X], quant_gpu.expression("to_f32"), np.float32), axes=spatial, keepdims=1)
    ratio = np.float32(_scalar_of(x_scale)) / (np.float32(_scalar_of(y_scale)) * np.float32(count))
    w = _Words(c)  # the count (a size) and the scales are words on gpu-pixel
    shifted = _alone(f"a - {w.zero(_zero_of(x_zero_point) * count)}")
    return w.map([sums], _saturated(f"round({_alone(f'{shifted} * {w.lit(ratio)}')}) + "
                                    f"{w.zero(_zero_of(y_zero_point))}", out), out)


@register_composite("QLinearConv", host_inputs=(1, 2, 3, 4, 5, 6, 7, 8), narrow_types=True)
def qlinear_conv(c: Composer, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B=None, *,
                 channels_last=0, **attrs):
    """ONNX's QLinearConv (quant_gpu.py), between two transposes where x and y are channels-last."""
    if channels_last:
        if getattr(x, "ndim", 0) < 3:
            raise Declined
        x = c.retype(_to_channels_first(c, c.retype(x, np.int32)), x.dtype)
    y = c.quant(quant_gpu.qlinear_conv, "QLinearConv", x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
                y_zero_point, B, **{k: v for k, v in attrs.items() if v is not None})
    if channels_last:
        y = c.retype(_to_channels_last(c, c.retype(y, np.int32)), y.dtype)
    return y


def _integer_product(c: Composer, A: Any, a_zero_point: Any, B: Any, b_zero_point: Any) -> Any:
    """(A - a_zero_point) @ (B - b_zero_point) in float32 (exact integers; B's zero point per tensor or per column,
    A's a scalar, on the host or the device)."""
    if a_zero_point is not None and a_zero_point.size != 1:
        raise Declined  # (the CPU kernel reads the first element only)
    rec = c.rec
    a = quant_gpu.zero_shifted(rec, c.layer, A, a_zero_point, lambda zp: zp.reshape(()), "a")
    b = quant_gpu.zero_shifted(rec, c.layer, B, b_zero_point,
                               lambda zp: zp.reshape(()) if zp.size == 1 else zp.reshape(-1), "b")
    return c.op("MatMul", 13, a, b)


def _scaled(c: Composer, acc: Any, multiplier: Any, bias: Any) -> Any:
    """contrib_quant.scaled_product's output step: acc * multiplier (+ bias), the product rounded before the add."""
    if bias is None:
        return c.map([acc, multiplier], "a * b", np.float32)
    return c.map([acc, multiplier, bias], f"{_alone('a * b')} + c", np.float32)


def _host_multiplier(first_scale: Any, second_scale: Any) -> np.ndarray:
    """float32(first) * float32(second) per tensor or per column, as contrib_quant.scaled_product forms it."""
    first, second = quant_gpu.host_value(first_scale), quant_gpu.host_value(second_scale)
    if first is None or second is None:
        raise Declined
    product = np.asarray(first, np.float32).reshape(-1)[0] * np.asarray(second, np.float32).reshape(-1)
    return product.reshape(()) if product.size == 1 else product


def _float_bias(bias: Any) -> Any:
    if bias is not None and getattr(bias, "dtype", None) != np.float32:
        raise Declined
    return bias


@register_composite("MatMulIntegerToFloat", host_inputs=(2, 3, 4, 5), narrow_types=True)
def matmul_integer_to_float(c: Composer, A, B, a_scale, b_scale, a_zero_point=None, b_zero_point=None, bias=None):
    """(A - a_zp) @ (B - b_zp) exactly, then * (a_scale * b_scale) (+ bias) in float32 as the CPU kernel: bit for
    bit."""
    if np.dtype(a_scale.dtype) != np.float32:
        raise Declined
    acc = _integer_product(c, A, a_zero_point, B, b_zero_point)
    return _scaled(c, acc, _host_multiplier(a_scale, b_scale), _float_bias(bias))


@register_composite("DynamicQuantizeMatMul", host_inputs=(2, 3), narrow_types=True)
def dynamic_quantize_matmul(c: Composer, A, B, b_scale, b_zero_point=None, bias=None):
    """A quantized to uint8 from its own range on the device (DynamicQuantizeLinear's program), the exact integer
    product with B, then * (a_scale * b_scale) (+ bias) in float32 as the CPU kernel: bit for bit."""
    if getattr(A, "dtype", None) != np.float32:
        raise Declined
    a_q, a_scale, a_zero = c.quant(quant_gpu.dynamic_quantize_linear, "DynamicQuantizeLinear", A, outputs=3)
    acc = _integer_product(c, a_q, a_zero, B, b_zero_point)
    b = quant_gpu.host_value(b_scale)
    if b is None:
        raise Declined
    multiplier = c.map([a_scale, np.asarray(b, np.float32).reshape(-1) if b.size > 1 else
                        np.asarray(b, np.float32).reshape(())], "a * b", np.float32)
    return _scaled(c, acc, multiplier, _float_bias(bias))


@register_composite("QGemm", host_inputs=(1, 2, 3, 4, 5, 6, 7, 8), narrow_types=True)
def qgemm(c: Composer, A, a_scale, a_zero_point, B, b_scale, b_zero_point, C=None, y_scale=None, y_zero_point=None,
          *, alpha=1.0, transA=0, transB=0):
    """The exact integer product of op(A) and op(B) (a constant B transposed on the host once), plus C, scaled by
    alpha * a_scale * b_scale (per tensor or column) in float32, or requantized with y's scale and zero point
    (quant_gpu's requantization): bit for bit."""
    contrib_quant.check_qgemm(c, A, a_scale, B, b_scale, b_zero_point, C, y_scale, transA, transB)
    a = c.retype(c.transpose(c.retype(A, np.int32), [1, 0]), A.dtype) if transA else A
    b = B
    if transB:
        host = quant_gpu.host_value(B)
        if host is None:
            raise Declined
        b = c.rec.derived(("qgemm-transposed-b",), (host,), lambda: np.ascontiguousarray(host.T))
    acc = _integer_product(c, a, a_zero_point, b, b_zero_point)
    if C is not None:
        if getattr(C, "dtype", None) != np.int32:
            raise Declined
        acc = c.map([acc, C], _alone(quant_gpu.expression("add_int")), np.float32)  # exact: integers below 2^24
    b_host = quant_gpu.host_value(b_scale)
    if b_host is None:
        raise Declined
    scale = np.float32(alpha) * np.float32(_scalar_of(a_scale)) * np.asarray(b_host, np.float32).reshape(-1)
    scale = scale.reshape(()) if scale.size == 1 else scale
    if y_scale is None:
        return c.map([acc, scale], "a * b", np.float32)
    if y_zero_point is None:
        raise Declined
    multiplier = np.asarray(scale / np.float32(_scalar_of(y_scale)), np.float32)
    return quant_gpu.requantize_on_device(c.rec, acc, multiplier, y_zero_point)


@register_composite("MatMulNBits", host_inputs=(1, 2, 3), narrow_types=True)
def matmul_nbits(c: Composer, A, B, scales, zero_points=None, g_idx=None, bias=None, *, K=None, N=None, bits=4,
                 block_size=None, accuracy_level=0, weight_prepacked=0):
    """A @ W^T (+ bias) with W dequantized on the host once per program (the CPU kernel's own dequantization),
    the backend's float32 MatMul: within the float32 reassociation of its sums. accuracy_level 4 (ORT's int8
    compute, A quantized per block) stays on the CPU."""
    if K is None or N is None or block_size is None or g_idx is not None or weight_prepacked \
            or getattr(A, "dtype", None) != np.float32 or A.shape[-1] != int(K) or not all_float32(bias):
        raise Declined
    k, n, bits, size = int(K), int(N), int(bits), int(block_size)
    if int(accuracy_level) == 4 and not (bits == 2 and size < 32):
        raise Declined
    sources = [quant_gpu.host_value(v) for v in (B, scales, zero_points) if v is not None]
    if len(sources) != 2 + (zero_points is not None):
        raise Declined
    packed, scale = sources[0], sources[1]
    zero = sources[2] if zero_points is not None else None

    def make() -> np.ndarray:
        return np.ascontiguousarray(contrib_quant.nbits_weight(None, packed, scale, zero, k, n, bits, size).T)  # (K, N)

    w_t = c.rec.derived(("matmul-nbits-weight", k, n, bits, size), tuple(sources), make)
    y = c.op("MatMul", 13, A, w_t)
    return y if bias is None else c.add(y, bias)


@register_composite("QAttention", host_inputs=(3, 4, 6, 7), narrow_types=True)
def qattention(c: Composer, input, weight, bias, input_scale, weight_scale, mask_index=None, input_zero_point=None,
               weight_zero_point=None, past=None, *, num_heads=None, unidirectional=0, scale=None,
               mask_filter_value=None, do_rotary=0, past_present_share_buffer=0):
    """Attention whose projection is the exact integer product of input and weight, scaled (+ bias) in float32
    as the CPU kernel (bit for bit), then Attention's steps (without a past)."""
    if past is not None or do_rotary or past_present_share_buffer or output_wanted(c.layer, 1) or not num_heads \
            or getattr(input, "ndim", 0) != 3 or not all_float32(bias) or bias is None:
        raise Declined
    heads = int(num_heads)
    size = weight.shape[1] // 3
    if size % heads or 3 * size != weight.shape[1]:
        raise Declined
    acc = _integer_product(c, input, input_zero_point, weight, weight_zero_point)
    qkv = _scaled(c, acc, _host_multiplier(input_scale, weight_scale), bias)
    return packed_attention(c, qkv, [size] * 3, heads, mask_index, None, unidirectional, scale, mask_filter_value)


@register_composite("QEmbedLayerNormalization", host_inputs=tuple(range(2, 7)) + tuple(range(8, 18)), narrow_types=True)
def qembed_layer_normalization(c: Composer, input_ids, segment_ids, word_embedding_quant, position_embedding_quant,
                               segment_embedding, gamma_quant, beta_quant, mask, word_embedding_scale,
                               position_embedding_scale, segment_embedding_scale, gamma_scale, beta_scale,
                               word_embedding_zero_point, position_embedding_zero_point,
                               segment_embedding_zero_point, gamma_zero_point, beta_zero_point, *, epsilon=1e-12):
    """The quantized tables and norm parameters dequantized on the host once per program (the CPU kernel's own
    contrib_quant.dequant_per_tensor), then EmbedLayerNormalization's program."""
    tables = []
    for q, s, z in ((word_embedding_quant, word_embedding_scale, word_embedding_zero_point),
                    (position_embedding_quant, position_embedding_scale, position_embedding_zero_point),
                    (segment_embedding, segment_embedding_scale, segment_embedding_zero_point),
                    (gamma_quant, gamma_scale, gamma_zero_point), (beta_quant, beta_scale, beta_zero_point)):
        if q is None:
            tables.append(None)
            continue
        hosts = [quant_gpu.host_value(v) for v in (q, s, z) if v is not None]
        if len(hosts) != 2 + (z is not None) or hosts[0].dtype not in quant_gpu.INT_RANGES:
            raise Declined
        code, scale, zero = hosts[0], hosts[1], hosts[2] if z is not None else None
        tables.append(c.rec.derived(
            ("qembed-dequantized",), tuple(hosts),
            lambda code=code, scale=scale, zero=zero: contrib_quant.dequant_per_tensor(code, scale, zero)))
    return embed_layer_normalization(c, input_ids, segment_ids, *tables[:3], tables[3], tables[4], mask,
                                     epsilon=epsilon)


def _lstm_weight(c: Composer, weight: np.ndarray, zero_point: np.ndarray, direction: int, key: str) -> np.ndarray:
    """One direction's W or R ((D, rows, 4H) codes) minus its zero point (per tensor or column) in float32, made on
    the host once per program."""
    def make() -> np.ndarray:
        zp = contrib_quant.per_direction(zero_point, weight.shape[0], weight.shape[2])[direction].astype(np.float32)
        return weight[direction].astype(np.float32) - zp

    return c.rec.derived(("dynamic-quantize-lstm", key, direction), (weight, zero_point), make)


def _dynamic_product(c: Composer, a: Any, weight: np.ndarray, scale: np.ndarray) -> tuple[Any, Any]:
    """contrib_quant.dynamic_product's parts on the device: ``a`` quantized to uint8 from its own range, its exact
    integer product with the shifted ``weight``, and the float32 multiplier a_scale * w_scale."""
    a_q, a_scale, a_zero = c.quant(quant_gpu.dynamic_quantize_linear, "DynamicQuantizeLinear", a, outputs=3)
    shifted = c.map([a_q, None, a_zero], quant_gpu.expression("zero_shifted"), np.float32)
    return c.op("MatMul", 13, shifted, weight), c.map([a_scale, scale], "a * b", np.float32)


@register_composite("DynamicQuantizeLSTM", host_inputs=(1, 2, 3, 4, 8, 9, 10, 11), narrow_types=True)
def dynamic_quantize_lstm(c: Composer, X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None,
                          W_scale=None, W_zero_point=None, R_scale=None, R_zero_point=None, *,
                          activation_alpha=None, activation_beta=None, activations=None, clip=None,
                          direction="forward", hidden_size=None, input_forget=0):
    """The CPU kernel's steps, unrolled over the sequence: X quantized from its own range at once and multiplied
    exactly with W, then at each step the hidden state quantized from its own range on the device and multiplied
    exactly with R, the gates' float32 steps in the kernel's order (each product rounded apart), the
    activations by the backend's programs. Without sequence_lens, peepholes, clip or input_forget (those stay
    on the CPU). The products and the elementwise steps are the CPU's; the activations may differ in the last
    bit, which can move a code of the next step's quantized hidden state."""
    reverse_flags = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}.get(
        contrib.attr_text(direction).lower())
    if reverse_flags is None or any(v is None for v in (W_scale, W_zero_point, R_scale, R_zero_point)):
        raise Declined  # the CPU kernel names what is missing
    contrib_quant.check_dq_lstm(c, X, W, R, B, sequence_lens, initial_h, initial_c, P,
                                [W_scale, W_zero_point, R_scale, R_zero_point], len(reverse_flags), hidden_size)
    if any(v is not None for v in (sequence_lens, P, clip)) or input_forget or getattr(X, "dtype", None) != np.float32:
        raise Declined
    hosts = [quant_gpu.host_value(v) for v in (W, R, B, W_scale, W_zero_point, R_scale, R_zero_point)]
    if any(host is None and given is not None for host, given in zip(hosts, (W, R, B, W_scale, W_zero_point, R_scale,
                                                                            R_zero_point), strict=True)):
        raise Declined
    w, r, bias, w_scale, w_zero, r_scale, r_zero = hosts
    dirs = len(reverse_flags)
    seq, batch, _ = X.shape
    hs = int(hidden_size) if hidden_size else r.shape[1]
    if w.shape[0] != dirs or w.shape[2] != 4 * hs or r.shape != (dirs, hs, 4 * hs):
        raise Declined
    funcs = rnn_activations(activations, activation_alpha, activation_beta, ["Sigmoid", "Tanh", "Tanh"], dirs)
    bias = np.zeros((dirs, 8 * hs), np.float32) if bias is None else bias.astype(np.float32)
    w_scales = contrib_quant.per_direction(w_scale, dirs, 4 * hs).astype(np.float32)
    r_scales = contrib_quant.per_direction(r_scale, dirs, 4 * hs).astype(np.float32)

    def start(value: Any, d: int) -> Any:
        """Direction d's initial state (B, H) on the device (DynamicQuantizeLinear's program reads a device one)."""
        if value is None:
            value = np.zeros((dirs, batch, hs), np.float32)
        state = c.reshape(c.slice(value, 0, d, d + 1), (batch, hs))
        return c.map([state], "a", np.float32) if isinstance(state, np.ndarray) else state

    def activation(spec: tuple[Any, dict[str, float]], v: Any) -> Any:
        act, attrs = spec
        return c.op(act.name, 22, v, **attrs)

    ys, finals_h, finals_c = [], [], []
    for d, reverse in enumerate(reverse_flags):
        f, g, h_act = funcs[d]
        acc, multiplier = _dynamic_product(c, X, _lstm_weight(c, w, w_zero, d, "W"), w_scales[d])
        bias_sum = np.ascontiguousarray(bias[d, :4 * hs] + bias[d, 4 * hs:])  # the kernel's order: summed first
        xw = c.map([acc, multiplier, bias_sum], f"{_alone('a * b')} + c", np.float32)  # (S, B, 4H)
        r_d = _lstm_weight(c, r, r_zero, d, "R")
        h, cell = start(initial_h, d), start(initial_c, d)
        steps: list[Any] = [None] * seq
        for t in (range(seq - 1, -1, -1) if reverse else range(seq)):
            mark = c.mark()
            acc, multiplier = _dynamic_product(c, h, r_d, r_scales[d])
            x_t = c.reshape(c.slice(xw, 0, t, t + 1), (batch, 4 * hs))
            gates = c.map([acc, multiplier, x_t], f"c + {_alone('a * b')}", np.float32)
            gi, go, gf, gc = (c.slice(gates, 1, k * hs, (k + 1) * hs) for k in range(4))
            i = activation(f, gi)
            input_part = c.map([i, activation(g, gc)], "a * b", np.float32)
            cell = c.map([activation(f, gf), cell, input_part], f"{_alone('a * b')} + c", np.float32)
            h = c.map([activation(f, go), activation(h_act, cell)], "a * b", np.float32)
            steps[t] = c.reshape(h, (1, 1, batch, hs))
            c.release(mark, [h, cell, steps[t]])  # the step's temporaries: dead from here
        ys.append(steps[0] if seq == 1 else c.concat(steps, 0))
        finals_h.append(c.reshape(h, (1, batch, hs)))
        finals_c.append(c.reshape(cell, (1, batch, hs)))

    def stacked(parts: list[Any], axis: int) -> Any:
        return parts[0] if len(parts) == 1 else c.concat(parts, axis)

    outs = (stacked(ys, 1), stacked(finals_h, 0), stacked(finals_c, 0))
    n = max(1, len(c.layer.outputs))
    if n == 1:
        return outs[0]
    return tuple(v if output_wanted(c.layer, k) or k == 0 else None for k, v in enumerate(outs[:n]))
