"""Numpy kernels of the ``com.microsoft`` operators ONNX Runtime's quantization tools write: QuantizeLinear,
DequantizeLinear, DynamicQuantizeMatMul, MatMulIntegerToFloat, MatMulNBits, QLinearAdd/Mul/Sigmoid/LeakyRelu/
Softmax/Concat/AveragePool/GlobalAveragePool, the NHWC QLinearConv (the graph optimizer's), QGemm, QAttention,
QEmbedLayerNormalization and DynamicQuantizeLSTM. The float contrib operators, and the parts of them these reuse
(Attention's core, EmbedLayerNormalization), are contrib.py's and
contrib_attention.py's.

Semantics are what ONNX Runtime's CPU execution provider computes, since these models are made and checked with
it: requantizing ops compute in float32 and round half to even as ORT's MLAS kernels do, so they agree with it to
at most one quantum (MLAS's vector paths may order a sum differently). Their GPU programs are
contrib_quant_gpu.py's.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from wgsentis.ops import pool as onnx_pool
from wgsentis.ops import quant as onnx_quant
from wgsentis.ops.activations import ACTIVATIONS, rnn_activations
from wgsentis.ops.contrib import (F32, MS_DOMAIN, attr_text, embed_layer_normalization, expect_shape, first_scalar,
                                  layer_error, refuse_shape, shape_of)
from wgsentis.ops.contrib_attention import attention_core, softmax_last_axis
from wgsentis.ops.quant import dequantize_linear_21, dynamic_quantize_linear, quantize_linear_21, requantize
from wgsentis.ops.registry import register, register_flops


# ----------------------------------------------------------------------------------------------
# Quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeMatMul, MatMulIntegerToFloat, MatMulNBits
# ----------------------------------------------------------------------------------------------

@register("QuantizeLinear", 1, domain=MS_DOMAIN)
def quantize_linear(ctx, x, y_scale, y_zero_point=None, *, axis=1):
    """ORT's QuantizeLinear: ONNX's, with int16/uint16 and int4/uint4 targets (the zero point's type)."""
    return quantize_linear_21(ctx, x, y_scale, y_zero_point, axis=axis)


@register("DequantizeLinear", 1, domain=MS_DOMAIN)
def dequantize_linear(ctx, x, x_scale, x_zero_point=None, *, axis=1):
    """ORT's DequantizeLinear: ONNX's, also for int16/uint16, int32 and int4/uint4 data."""
    return dequantize_linear_21(ctx, x, x_scale, x_zero_point, axis=axis)


def _integer_product(A: np.ndarray, a_zero_point, B: np.ndarray, b_zero_point) -> np.ndarray:
    """(A - a_zero_point) @ (B - b_zero_point), exact, as float64; B's zero point per tensor or per column."""
    a = A.astype(np.float64) - (0.0 if a_zero_point is None else float(first_scalar(a_zero_point)))
    b = B.astype(np.float64)
    if b_zero_point is not None:
        b = b - np.asarray(b_zero_point).astype(np.float64).reshape(-1) if np.size(b_zero_point) > 1 \
            else b - float(first_scalar(b_zero_point))
    return np.matmul(a, b)


def scaled_product(acc: np.ndarray, a_scale, b_scale, bias) -> np.ndarray:
    """float32(acc) * float32(a_scale * b_scale) (+ bias): MLAS's scale-and-bias output step, in float32."""
    multiplier = np.asarray(a_scale, dtype=F32).reshape(-1)[0] * np.asarray(b_scale, dtype=F32).reshape(-1)
    if multiplier.size == 1:
        multiplier = multiplier.reshape(())
    y = acc.astype(F32) * multiplier
    if bias is not None:
        y += bias.astype(F32, copy=False)
    return y


@register("MatMulIntegerToFloat", 1, domain=MS_DOMAIN)
def matmul_integer_to_float(ctx, A, B, a_scale, b_scale, a_zero_point=None, b_zero_point=None, bias=None):
    """(A - a_zp) @ (B - b_zp) * a_scale * b_scale (+ bias), in float (b_scale, b_zp per tensor or column)."""
    acc = _integer_product(A, a_zero_point, B, b_zero_point)
    return scaled_product(acc, a_scale, b_scale, bias).astype(np.asarray(a_scale).dtype, copy=False)


@register("DynamicQuantizeMatMul", 1, domain=MS_DOMAIN)
def dynamic_quantize_matmul(ctx, A, B, b_scale, b_zero_point=None, bias=None):
    """A quantized to uint8 from its own range (DynamicQuantizeLinear), then MatMulIntegerToFloat with B."""
    a_q, a_scale, a_zero_point = dynamic_quantize_linear(ctx, A.astype(F32, copy=False))
    acc = _integer_product(a_q, a_zero_point, B, b_zero_point)
    return scaled_product(acc, a_scale, b_scale, bias).astype(A.dtype, copy=False)


@register_flops("MatMulIntegerToFloat", "DynamicQuantizeMatMul", "MatMulNBits")
def _quant_matmul_flops(layer, in_shapes, out_shapes) -> int:
    a, y = in_shapes[0] if in_shapes else None, out_shapes[0] if out_shapes else None
    return 0 if a is None or y is None else 2 * math.prod(y) * a[-1]


def unpack_nbits(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """The first ``count`` unsigned ``bits``-wide values of each row of ``packed`` (uint8, least significant
    bits first): (..., count) uint8."""
    per_byte = 8 // bits
    shifts = (np.arange(per_byte, dtype=np.uint8) * bits).astype(np.uint8)
    values = (packed[..., None] >> shifts) & np.uint8((1 << bits) - 1)
    return values.reshape(*packed.shape[:-1], -1)[..., :count]


def nbits_blocks(ctx, B: np.ndarray, scales: np.ndarray, zero_points, K: int, N: int, bits: int,
                 block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """MatMulNBits' weight as (codes - zero point) (N, blocks, block_size) float32 and scales (N, blocks): packed
    uint8 zero points are ``bits`` wide, float ones are used as they are, absent ones are 2^(bits - 1)."""
    if bits not in (2, 4, 8):
        raise layer_error(ctx, f"bits={bits} is not supported (2, 4 or 8)")
    if block_size < 16 or block_size & (block_size - 1):
        raise layer_error(ctx, f"block_size={block_size} must be a power of two, at least 16")
    blocks = -(-K // block_size)
    blob = block_size * bits // 8
    if B.shape[0] != N or B.size != N * blocks * blob:
        raise layer_error(ctx, f"B of shape {list(B.shape)} does not hold N={N} rows of {blocks} blocks "
                               f"of {blob} bytes")
    q = unpack_nbits(B.reshape(N, blocks, blob), bits, block_size).astype(F32)  # (N, blocks, block_size)
    scale = np.asarray(scales, dtype=F32).reshape(N, blocks)
    if zero_points is None:
        zp = np.full((N, blocks, 1), float(1 << (bits - 1)), dtype=F32)
    elif zero_points.dtype == np.uint8:
        per_row = -(-blocks * bits // 8)
        zp = unpack_nbits(zero_points.reshape(N, per_row), bits, blocks).astype(F32).reshape(N, blocks, 1)
    else:
        zp = np.asarray(zero_points, dtype=F32).reshape(N, blocks, 1)
    return q - zp, scale


def nbits_weight(ctx, B: np.ndarray, scales: np.ndarray, zero_points, K: int, N: int, bits: int,
                 block_size: int) -> np.ndarray:
    """MatMulNBits' weight dequantized to (N, K) float32: (q - zero_point) * scale per block of ``block_size``
    along K (``nbits_blocks``)."""
    codes, scale = nbits_blocks(ctx, B, scales, zero_points, K, N, bits, block_size)
    return (codes * scale[:, :, None]).reshape(N, -1)[:, :K]


def _int8_blocks_product(a: np.ndarray, codes: np.ndarray, scale: np.ndarray, K: int, block_size: int) -> np.ndarray:
    """a (M, K) @ W^T the way ORT's int8 compute (accuracy_level 4) forms it: each block of ``block_size`` of a
    row of A quantized symmetrically to int8 (scale max|a| / 127, round half to even), an exact product with the
    block's weight codes, scaled by both scales in float32 and summed over the blocks."""
    y = np.zeros((a.shape[0], codes.shape[0]), dtype=F32)
    for block in range(codes.shape[1]):
        part = a[:, block * block_size:min((block + 1) * block_size, K)]
        a_scale = (np.abs(part).max(axis=1, keepdims=True) / F32(127)).astype(F32)
        inverse = np.where(a_scale > 0, F32(1) / np.where(a_scale > 0, a_scale, F32(1)), F32(0))
        a_q = np.rint(part * inverse).astype(np.float64)
        acc = a_q @ codes[:, block, :part.shape[1]].T.astype(np.float64)  # exact
        y += acc.astype(F32) * (a_scale * scale[:, block][None, :])
    return y


@register("MatMulNBits", 1, domain=MS_DOMAIN)
def matmul_nbits(ctx, A, B, scales, zero_points=None, g_idx=None, bias=None, *, K=None, N=None, bits=4,
                 block_size=None, accuracy_level=0, weight_prepacked=0):
    """A @ W^T (+ bias) with W (N, K) quantized to ``bits``-bit blocks (weight-only quantization): in float32,
    or, for accuracy_level 4, with A quantized to int8 per block as ORT's x86 int8 kernels do. Declines g_idx
    (act-order) and prepacked weights."""
    if K is None or N is None or block_size is None:
        raise layer_error(ctx, "the K, N and block_size attributes are required")
    if g_idx is not None or weight_prepacked:
        raise layer_error(ctx, "g_idx (act-order) and prepacked weights are not supported")
    if A.shape[-1] != K:
        raise layer_error(ctx, f"A's last dimension {A.shape[-1]} is not K={K}")
    k, n, size = int(K), int(N), int(block_size)
    a = A.astype(F32, copy=False).reshape(-1, k)
    cache = ctx.constant_cache(1, 2, 3) if hasattr(ctx, "constant_cache") else None
    # ORT 1.32 on x86 has no int8 kernel for 2-bit blocks of 16 (measured: those stay float32).
    if int(accuracy_level) == 4 and not (int(bits) == 2 and size < 32):
        codes, scale = nbits_blocks(ctx, B, scales, zero_points, k, n, int(bits), size)
        y = _int8_blocks_product(a, codes, scale, k, size)
    else:
        key = ("matmul_nbits_weight",)
        w_t = cache.get(key) if cache is not None else None
        if w_t is None:
            w_t = np.ascontiguousarray(nbits_weight(ctx, B, scales, zero_points, k, n, int(bits), size).T)  # (K, N)
            if cache is not None:
                cache[key] = w_t
        y = a @ w_t
    if bias is not None:
        y += bias.astype(F32, copy=False)
    return y.reshape(*A.shape[:-1], n).astype(A.dtype, copy=False)


# ----------------------------------------------------------------------------------------------
# QLinear elementwise ops, QLinearSoftmax, QLinearConcat, QLinear pools, QGemm
# ----------------------------------------------------------------------------------------------

def _zero(zero_point) -> int:
    return 0 if zero_point is None else int(first_scalar(zero_point, np.int64))


def quantize_f32(values: np.ndarray, y_scale, y_zero_point, dtype: np.dtype) -> np.ndarray:
    """round_half_even(values / y_scale) + y_zero_point saturated into ``dtype``, in float32 (MLAS's
    QuantizeLinear)."""
    info = np.iinfo(dtype)
    scaled = np.rint(values.astype(F32) / F32(first_scalar(y_scale, F32)))
    return np.clip(scaled + F32(_zero(y_zero_point)), info.min, info.max).astype(dtype)


def out_dtype_of(x: np.ndarray, zero_point) -> np.dtype:
    """The dtype a quantized op's output takes: its zero point's, else its input's."""
    return np.asarray(zero_point).dtype if zero_point is not None else x.dtype


def dequant_per_tensor(x: np.ndarray, scale, zero_point) -> np.ndarray:
    """(x - zero_point) * scale in float32 (per tensor)."""
    return (x.astype(F32) - F32(_zero(zero_point))) * F32(first_scalar(scale, F32))


def table_lookup(x: np.ndarray, x_scale, x_zero_point, y_scale, y_zero_point, fn) -> np.ndarray:
    """An 8-bit unary op through a 256-entry table built as ORT builds it: dequantize every code, apply
    ``fn`` in float32, quantize."""
    codes = np.arange(256, dtype=np.int64) + np.iinfo(x.dtype).min
    table = quantize_f32(fn(dequant_per_tensor(codes.astype(x.dtype), x_scale, x_zero_point)), y_scale, y_zero_point,
                         out_dtype_of(x, y_zero_point))
    return table[x.astype(np.int64) - np.iinfo(x.dtype).min]


@register("QLinearSigmoid", 1, domain=MS_DOMAIN)
def qlinear_sigmoid(ctx, X, X_scale, X_zero_point=None, Y_scale=None, Y_zero_point=None):
    """Sigmoid on quantized X (8-bit), by table."""
    return table_lookup(X, X_scale, X_zero_point, Y_scale, Y_zero_point, ACTIVATIONS["Sigmoid"].kernel)


@register("QLinearLeakyRelu", 1, domain=MS_DOMAIN)
def qlinear_leaky_relu(ctx, X, X_scale, X_zero_point=None, Y_scale=None, Y_zero_point=None, *, alpha=0.01):
    """LeakyRelu on quantized X (8-bit), by table."""
    return table_lookup(X, X_scale, X_zero_point, Y_scale, Y_zero_point,
                        lambda v: ACTIVATIONS["LeakyRelu"].kernel(v, alpha=float(alpha)))


def qlinear_binary(A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point, mul: bool):
    """QLinearMul (``mul``) or QLinearAdd of two 8-bit tensors, dequantized and requantized in float32."""
    a = A.astype(F32) - F32(_zero(A_zero_point))
    b = B.astype(F32) - F32(_zero(B_zero_point))
    c_scale = F32(first_scalar(C_scale, F32))
    a_scale, b_scale = F32(first_scalar(A_scale, F32)), F32(first_scalar(B_scale, F32))
    if mul:
        values = a * b * (a_scale * b_scale / c_scale)
    else:
        values = a * (a_scale / c_scale) + b * (b_scale / c_scale)
    return quantize_f32(values, 1.0, C_zero_point, out_dtype_of(A, C_zero_point))


@register("QLinearAdd", 1, domain=MS_DOMAIN)
def qlinear_add(ctx, A, A_scale, A_zero_point=None, B=None, B_scale=None, B_zero_point=None, C_scale=None,
                C_zero_point=None):
    """A + B on quantized, broadcast inputs, requantized to C's scale and zero point."""
    return qlinear_binary(A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point, False)


@register("QLinearMul", 1, domain=MS_DOMAIN)
def qlinear_mul(ctx, A, A_scale, A_zero_point=None, B=None, B_scale=None, B_zero_point=None, C_scale=None,
                C_zero_point=None):
    """A * B on quantized, broadcast inputs, requantized to C's scale and zero point."""
    return qlinear_binary(A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point, True)


@register("QLinearSoftmax", 1, domain=MS_DOMAIN)
def qlinear_softmax(ctx, X, X_scale, x_zero_point=None, y_scale=None, y_zero_point=None, *, axis=-1, opset=13):
    """Softmax of dequantized X along ``axis`` (opset < 13: over the axes from ``axis`` on, flattened),
    quantized with y's scale and zero point."""
    rank = X.ndim
    axis = int(axis) + rank if int(axis) < 0 else int(axis)
    x = dequant_per_tensor(X, X_scale, x_zero_point)
    if int(opset or 13) < 13:
        rows = x.reshape(math.prod(X.shape[:axis]), -1)
        probs = softmax_last_axis(rows).reshape(X.shape)
    else:
        probs = np.moveaxis(softmax_last_axis(np.moveaxis(x, axis, -1)), -1, axis)
    return quantize_f32(probs, y_scale, y_zero_point, out_dtype_of(X, y_zero_point))


@register("QLinearConcat", 1, domain=MS_DOMAIN)
def qlinear_concat(ctx, Y_scale, Y_zero_point, *inputs, axis=None):
    """Concat of (x, x_scale, x_zero_point) triples along ``axis``, each requantized to Y's scale and zero point
    (copied where they are the same)."""
    if axis is None:
        raise layer_error(ctx, "the axis attribute is required")
    if len(inputs) % 3 or not inputs:
        raise layer_error(ctx, f"expected (tensor, scale, zero point) triples after Y's, got {len(inputs)} inputs")
    dtype = np.asarray(Y_zero_point).dtype
    parts = []
    for k in range(0, len(inputs), 3):
        x, scale, zp = inputs[k:k + 3]
        same = first_scalar(scale, F32) == first_scalar(Y_scale, F32) and _zero(zp) == _zero(Y_zero_point)
        parts.append(x.astype(dtype, copy=False) if same else quantize_f32(dequant_per_tensor(x, scale, zp), Y_scale,
                                                                             Y_zero_point, dtype))
    return np.concatenate(parts, axis=int(axis))


def _channels_first(x: np.ndarray, channels_last: int) -> np.ndarray:
    return np.moveaxis(x, -1, 1) if channels_last else x


@register("QLinearAveragePool", 1, domain=MS_DOMAIN)
def qlinear_average_pool(ctx, X, x_scale, x_zero_point=None, y_scale=None, y_zero_point=None, *,
                         auto_pad="NOTSET", ceil_mode=0, channels_last=0, count_include_pad=0, kernel_shape=None,
                         pads=None, strides=None):
    """AveragePool of dequantized X (NCHW, or NHWC with channels_last), requantized."""
    x = _channels_first(dequant_per_tensor(X, x_scale, x_zero_point), channels_last)
    y = onnx_pool.average_pool(ctx, np.ascontiguousarray(x), auto_pad=auto_pad, ceil_mode=ceil_mode,
                               count_include_pad=count_include_pad, kernel_shape=kernel_shape, pads=pads,
                               strides=strides)
    y = np.moveaxis(y, 1, -1) if channels_last else y
    return quantize_f32(np.ascontiguousarray(y), y_scale, y_zero_point, out_dtype_of(X, y_zero_point))


@register("QLinearGlobalAveragePool", 1, domain=MS_DOMAIN)
def qlinear_global_average_pool(ctx, X, x_scale, x_zero_point, y_scale, y_zero_point, *, channels_last=0):
    """Mean over the spatial axes of dequantized X, requantized: (sum - zp * count) * x_scale / (y_scale * count)
    in float32, as MLAS does."""
    x = _channels_first(X, channels_last)
    spatial = tuple(range(2, x.ndim))
    count = math.prod(x.shape[2:])
    sums = x.astype(np.int64).sum(axis=spatial, keepdims=True) - _zero(x_zero_point) * count
    ratio = F32(first_scalar(x_scale, F32)) / (F32(first_scalar(y_scale, F32)) * F32(count))
    y = np.rint(sums.astype(F32) * ratio) + F32(_zero(y_zero_point))
    dtype = out_dtype_of(X, y_zero_point)
    info = np.iinfo(dtype)
    y = np.clip(y, info.min, info.max).astype(dtype)
    return np.moveaxis(y, 1, -1) if channels_last else y


@register("QLinearConv", 1, domain=MS_DOMAIN)
def qlinear_conv(ctx, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B=None, *,
                 auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None,
                 channels_last=0):
    """ONNX's QLinearConv, x and y channels-last where ``channels_last`` (what ORT's NHWC transformer writes;
    W stays (M, C/group, *kernel))."""
    y = onnx_quant.qlinear_conv(ctx, np.ascontiguousarray(_channels_first(x, channels_last)), x_scale, x_zero_point,
                               w, w_scale, w_zero_point, y_scale, y_zero_point, B, auto_pad=auto_pad,
                               dilations=dilations, group=group, kernel_shape=kernel_shape, pads=pads,
                               strides=strides)
    return np.ascontiguousarray(np.moveaxis(y, 1, -1)) if channels_last else y


def check_qgemm(ctx, A, a_scale, B, b_scale, b_zero_point, C, y_scale, transA: int, transB: int) -> None:
    """QGemm's inputs checked before any arithmetic (here and in its GPU program): A (M, K) and B (K, N) (as
    transposed), C broadcast to (M, N), a_scale and y_scale scalars, b_scale and b_zero_point one or N values."""
    expect_shape(ctx, "input 0 (A)", A, "(K, M)" if transA else "(M, K)", None, None)
    a_shape = shape_of(A)
    m, k = a_shape[::-1] if transA else a_shape
    expect_shape(ctx, "input 3 (B)", B, f"(N, K) with K = {k}" if transB else f"(K, N) with K = {k}",
                 *((None, k) if transB else (k, None)))
    n = shape_of(B)[0 if transB else 1]
    for index, name, value, sizes in ((1, "a_scale", a_scale, (1,)), (7, "y_scale", y_scale, (1,)),
                                      (4, "b_scale", b_scale, (1, n)), (5, "b_zero_point", b_zero_point, (1, n))):
        if value is not None and int(np.prod(shape_of(value))) not in sizes:
            raise refuse_shape(ctx, f"input {index} ({name})", value,
                               "must be a scalar" if sizes == (1,) else f"must be a scalar or one per column, N = {n}")
    if C is not None:
        c_shape = shape_of(C)
        padded = (1,) * (2 - len(c_shape)) + c_shape
        if len(c_shape) > 2 or padded[0] not in (1, m) or padded[1] not in (1, n):
            raise refuse_shape(ctx, "input 6 (C)", C, f"does not broadcast to (M, N) = {[m, n]}")


@register("QGemm", 1, domain=MS_DOMAIN)
def qgemm(ctx, A, a_scale, a_zero_point, B, b_scale, b_zero_point, C=None, y_scale=None, y_zero_point=None, *,
          alpha=1.0, transA=0, transB=0):
    """alpha * a_scale * b_scale * ((A - a_zp) @ (B - b_zp) + C) with C int32; float output, or quantized with
    y_scale and y_zero_point where given (b_scale and b_zp per tensor or per column of op(B))."""
    check_qgemm(ctx, A, a_scale, B, b_scale, b_zero_point, C, y_scale, transA, transB)
    a = A.T if transA else A
    b = B.T if transB else B
    acc = _integer_product(a, a_zero_point, b, b_zero_point)
    if C is not None:
        acc = acc + C.astype(np.float64)
    scale = F32(alpha) * F32(first_scalar(a_scale, F32)) * np.asarray(b_scale, dtype=F32).reshape(-1)
    scale = scale.reshape(()) if scale.size == 1 else scale
    if y_scale is None:
        return acc.astype(F32) * scale
    return requantize(acc, scale / F32(first_scalar(y_scale, F32)), y_zero_point)


@register_flops("QGemm")
def _qgemm_flops(layer, in_shapes, out_shapes) -> int:
    a, y = in_shapes[0] if in_shapes else None, out_shapes[0] if out_shapes else None
    if a is None or y is None:
        return 0
    return 2 * math.prod(y) * (a[0] if layer.attrs.get("transA", 0) else a[-1])


# ----------------------------------------------------------------------------------------------
# QAttention, QEmbedLayerNormalization, DynamicQuantizeLSTM
# ----------------------------------------------------------------------------------------------

@register("QAttention", 1, domain=MS_DOMAIN)
def qattention(ctx, input, weight, bias, input_scale, weight_scale, mask_index=None, input_zero_point=None,
               weight_zero_point=None, past=None, *, num_heads=None, unidirectional=0, scale=None,
               mask_filter_value=None, do_rotary=0, past_present_share_buffer=0):
    """Attention whose input projection is an integer product: QKV = (input - izp) @ (weight - wzp) *
    input_scale * weight_scale + bias (weight_scale per tensor or column), then Attention's float steps."""
    if not num_heads:
        raise layer_error(ctx, "the num_heads attribute is required")
    if do_rotary or past_present_share_buffer:
        raise layer_error(ctx, "do_rotary and past_present_share_buffer are not supported")
    acc = _integer_product(input, input_zero_point, weight, weight_zero_point)
    qkv = scaled_product(acc, input_scale, weight_scale, bias)
    size = weight.shape[1] // 3
    result = attention_core(ctx, qkv, (size, size, size), int(num_heads), mask_index, past, None, scale,
                            unidirectional, mask_filter_value)
    out_dtype = np.asarray(bias).dtype
    if isinstance(result, tuple):
        return tuple(None if r is None else r.astype(out_dtype, copy=False) for r in result)
    return result.astype(out_dtype, copy=False)


@register("QEmbedLayerNormalization", 1, domain=MS_DOMAIN)
def qembed_layer_normalization(ctx, input_ids, segment_ids, word_embedding_quant, position_embedding_quant,
                               segment_embedding, gamma_quant, beta_quant, mask, word_embedding_scale,
                               position_embedding_scale, segment_embedding_scale, gamma_scale, beta_scale,
                               word_embedding_zero_point, position_embedding_zero_point,
                               segment_embedding_zero_point, gamma_zero_point, beta_zero_point, *, epsilon=1e-12):
    """EmbedLayerNormalization on quantized tables and norm parameters (the quantizer's form of it): each is
    dequantized with its scale and zero point (per tensor), then the float op runs; outputs (output,
    mask_index)."""
    tables = [dequant_per_tensor(q, s, z) if q is not None else None for q, s, z in (
        (word_embedding_quant, word_embedding_scale, word_embedding_zero_point),
        (position_embedding_quant, position_embedding_scale, position_embedding_zero_point),
        (segment_embedding, segment_embedding_scale, segment_embedding_zero_point),
        (gamma_quant, gamma_scale, gamma_zero_point), (beta_quant, beta_scale, beta_zero_point))]
    return embed_layer_normalization(ctx, input_ids, segment_ids, *tables[:3], tables[3], tables[4], mask,
                                     epsilon=epsilon)


def per_direction(param, directions: int, gates_h: int) -> np.ndarray:
    """A DynamicQuantizeLSTM scale or zero point as (D, 1 or 4H): per tensor per direction, or per column."""
    p = np.asarray(param)
    return p.reshape(directions, -1) if p.size > 1 else np.broadcast_to(p.reshape(1, 1), (directions, 1))


def dynamic_product(a: np.ndarray, w_q: np.ndarray, w_zero, w_scale,
                    w_centered: np.ndarray | None = None) -> np.ndarray:
    """a @ dequant(w) the way ORT's quantized LSTM gemm computes it: ``a`` quantized to uint8 from its own range,
    an exact integer product with the int8/uint8 weight (zero point per tensor or column), then scaled in
    float32. ``w_centered``: ``w_q - w_zero`` in float64 made once (a recurrent weight, used at every step)."""
    a_q, a_scale, a_zero = dynamic_quantize_linear(None, a.astype(F32, copy=False))
    if w_centered is None:
        w_centered = _centered(w_q, w_zero)
    acc = np.matmul(a_q.astype(np.float64) - float(a_zero), w_centered)
    return acc.astype(F32) * (F32(a_scale) * w_scale.astype(F32))


def _centered(w_q: np.ndarray, w_zero) -> np.ndarray:
    """An integer weight less its zero point, in float64 (the products with uint8 codes are exact there)."""
    return w_q.astype(np.float64) - np.asarray(w_zero).astype(np.float64)


def check_dq_lstm(ctx, X, W, R, B, sequence_lens, initial_h, initial_c, P, scales: list, dirs: int,
                  hidden_size: Any) -> int:
    """DynamicQuantizeLSTM's inputs checked before any arithmetic (here and in its GPU program): X (S, B, I),
    W (D, I, 4H), R (D, H, 4H), B (D, 8H), sequence_lens (B), initial_h and initial_c (D, B, H), P (D, 3H); the
    scales and zero points (``scales``: W_scale, W_zero_point, R_scale, R_zero_point) one per direction or one per
    gate column (D x 4H). Returns the hidden size H."""
    expect_shape(ctx, "input 0 (X)", X, "(S, B, I)", None, None, None)
    _, batch, inputs = shape_of(X)
    r_shape = shape_of(R)
    hs = int(hidden_size) if hidden_size else (r_shape[1] if len(r_shape) == 3 else 0)
    expect_shape(ctx, "input 1 (W)", W, f"(D, I, 4H) with D = {dirs}, I = {inputs}, 4H = {4 * hs}", dirs, inputs,
                 4 * hs)
    expect_shape(ctx, "input 2 (R)", R, f"(D, H, 4H) with D = {dirs}, H = {hs}", dirs, hs, 4 * hs)
    optional = ((3, "B", B, "(D, 8H)", (dirs, 8 * hs)), (4, "sequence_lens", sequence_lens, "(B)", (batch,)),
                (5, "initial_h", initial_h, "(D, B, H)", (dirs, batch, hs)),
                (6, "initial_c", initial_c, "(D, B, H)", (dirs, batch, hs)), (7, "P", P, "(D, 3H)", (dirs, 3 * hs)))
    for index, name, value, form, dims in optional:
        if value is not None:
            values = dict(zip(form.strip("()").split(", "), dims, strict=True))
            expect_shape(ctx, f"input {index} ({name})", value,
                         f"{form} with " + ", ".join(f"{k} = {v}" for k, v in values.items()), *dims)
    names = ("W_scale", "W_zero_point", "R_scale", "R_zero_point")
    for index, (name, value) in enumerate(zip(names, scales, strict=True), start=8):
        if value is not None and int(np.prod(shape_of(value))) not in (1, dirs, dirs * 4 * hs):
            raise refuse_shape(ctx, f"input {index} ({name})", value, f"must hold one value per direction ({dirs}) "
                               f"or per gate column ({dirs} x {4 * hs})")
    return hs


@register("DynamicQuantizeLSTM", 1, domain=MS_DOMAIN)
def dynamic_quantize_lstm(ctx, X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None,
                          W_scale=None, W_zero_point=None, R_scale=None, R_zero_point=None, *,
                          activation_alpha=None, activation_beta=None, activations=None, clip=None,
                          direction="forward", hidden_size=None, input_forget=0):
    """LSTM (gates i, o, f, c) with int8/uint8 W (D, I, 4H) and R (D, H, 4H), scales and zero points per tensor
    or per column. As ORT does, the input product quantizes all of X at once (uint8, from its own range) and the
    recurrent one quantizes the hidden state anew at each step; the products are exact, the rest float32. (ORT
    quantizes the hidden state of each of its threads' share of the batch apart: this matches ORT run with one
    intra-op thread, and any thread count where the batch is not split.)"""
    if W_scale is None or W_zero_point is None or R_scale is None or R_zero_point is None:
        raise layer_error(ctx, "W_scale, W_zero_point, R_scale and R_zero_point are required")
    name = attr_text(direction).lower()
    reverse_flags = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}.get(name)
    if reverse_flags is None:
        raise layer_error(ctx, f"unknown direction '{name}'")
    dirs = len(reverse_flags)
    hs = check_dq_lstm(ctx, X, W, R, B, sequence_lens, initial_h, initial_c, P,
                       [W_scale, W_zero_point, R_scale, R_zero_point], dirs, hidden_size)
    seq_len, batch, _ = X.shape
    funcs = [[(lambda v, a=act, k=attrs: a.kernel(v, **k)) for act, attrs in per_dir]
             for per_dir in rnn_activations(activations, activation_alpha, activation_beta,
                                            ["Sigmoid", "Tanh", "Tanh"], dirs)]
    w_scale, w_zero = per_direction(W_scale, dirs, 4 * hs), per_direction(W_zero_point, dirs, 4 * hs)
    r_scale, r_zero = per_direction(R_scale, dirs, 4 * hs), per_direction(R_zero_point, dirs, 4 * hs)
    bias = np.zeros((dirs, 8 * hs), F32) if B is None else B.astype(F32)
    h0 = np.zeros((dirs, batch, hs), F32) if initial_h is None else initial_h.astype(F32)
    c0 = np.zeros((dirs, batch, hs), F32) if initial_c is None else initial_c.astype(F32)
    peep = None if P is None else P.astype(F32).reshape(dirs, 3, hs)
    lens = None if sequence_lens is None else np.asarray(sequence_lens).astype(np.int64).reshape(-1)
    bound = None if clip is None else float(clip)

    def clipped(v: np.ndarray) -> np.ndarray:
        return v if bound is None else np.clip(v, -bound, bound)

    x = X.astype(F32).reshape(seq_len * batch, -1)
    ys, finals_h, finals_c = [], [], []
    for d, reverse in enumerate(reverse_flags):
        f, g, h_act = funcs[d]
        xw = dynamic_product(x, W[d], w_zero[d], w_scale[d]).reshape(seq_len, batch, 4 * hs)
        xw += bias[d, :4 * hs] + bias[d, 4 * hs:]
        h, c = h0[d], c0[d]
        y = np.zeros((seq_len, batch, hs), F32)
        r_centered = _centered(R[d], r_zero[d])  # once, not at every step (a 512-unit R: 8 MB a conversion)
        for t in (range(seq_len - 1, -1, -1) if reverse else range(seq_len)):
            gates = xw[t] + dynamic_product(h, R[d], r_zero[d], r_scale[d], r_centered)
            gi, go, gf, gc = (gates[:, k * hs:(k + 1) * hs] for k in range(4))
            if peep is not None:
                gi = gi + peep[d, 0] * c
                gf = gf + peep[d, 2] * c
            i = f(clipped(gi))
            forget = 1 - i if input_forget else f(clipped(gf))
            c_new = forget * c + i * g(clipped(gc))
            if peep is not None:
                go = go + peep[d, 1] * c_new
            h_new = f(clipped(go)) * h_act(c_new)
            active = None if lens is None else (t < lens)[:, None]
            h = h_new if active is None else np.where(active, h_new, h)
            c = c_new if active is None else np.where(active, c_new, c)
            y[t] = h_new if active is None else np.where(active, h_new, 0)
        ys.append(y)
        finals_h.append(h)
        finals_c.append(c)
    outs = (np.stack(ys, axis=1), np.stack(finals_h), np.stack(finals_c))
    n = max(1, ctx.num_outputs)
    return outs[:n] if n > 1 else outs[0]


@register_flops("DynamicQuantizeLSTM")
def _dq_lstm_flops(layer, in_shapes, out_shapes) -> int:
    x, w, r = [*in_shapes, None, None, None][:3]
    if x is None or w is None or r is None:
        return 0
    seq, batch, inputs = x
    dirs, hidden = r[0], r[1]
    return dirs * seq * batch * (2 * 4 * hidden * (inputs + hidden) + 10 * hidden)


__all__ = ["nbits_blocks", "nbits_weight", "unpack_nbits"]
