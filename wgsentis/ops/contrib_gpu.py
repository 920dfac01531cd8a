"""GPU program builders, for gpu-compute and gpu-pixel alike, of ONNX Runtime's contrib operators (contrib.py):
the float ones (the Gelu family, BiasAdd, BiasSplitGelu, the skip/simplified/embed layer norms and ORT's opset-1
LayerNormalization, FusedConv, NhwcConv, FusedGemm, FusedMatMul, RotaryEmbedding, Attention / MultiHeadAttention
without a past) and the quantized ones its quantization tools write (QuantizeLinear, DequantizeLinear, QLinearAdd,
QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearSoftmax, QLinearConcat, QLinearAveragePool,
QLinearGlobalAveragePool, the NHWC QLinearConv, QGemm, MatMulIntegerToFloat, DynamicQuantizeMatMul,
MatMulNBits, QAttention, QEmbedLayerNormalization, DynamicQuantizeLSTM).

Each is composed from the standard ops' builders of the same backend (``registry.lookup(op, "", opset,
backend)``), called with a stand-in layer that carries only what they read of one (name, outputs, opset and
the activation to fuse), so every dispatch or draw is one the standard ops already run and test. A builder
answers NotImplemented, and the layer falls back to the CPU kernel, wherever one of the builders it composes
declines or a case is outside what it covers (a past KV cache, unsupported outputs, 4-bit codes). The quantized
ones also use quant_gpu.py's builders and its broadcast map (``map3``) for their elementwise float32 steps,
written in the CPU kernels' order so that they agree bit for bit (see the section's comment).
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy as np

from wgsentis.backends.gpu.tensors import GTensor
from wgsentis.ops import contrib, quant_gpu, registry
from wgsentis.ops.activations import ACTIVATIONS, rnn_activations
from wgsentis.ops.contrib import MS_DOMAIN
from wgsentis.ops.quant_gpu import _Decline as QuantDeclined
from wgsentis.ops.registry import GPU_COMPUTE, GPU_PIXEL

GPU_BACKENDS = (GPU_COMPUTE, GPU_PIXEL)
# The causal limit as an additive bias: large enough that exp() of it is 0 in float32, finite so that a sum
# with the key mask stays a number on every driver (the CPU kernel uses -inf).
_CAUSAL_FILTER = -1e30


class _Declined(Exception):  # noqa: N818 - internal: a composed builder declined, the layer falls back
    pass


class _Composer:
    """Calls the standard ops' builders of one backend for one contrib layer."""

    def __init__(self, rec, layer, backend: str) -> None:
        self.rec, self.layer, self.backend = rec, layer, backend

    def stand_in(self, op_type: str, opset: int, outputs: int = 1, activation: Any = None,
                 attrs: dict[str, Any] | None = None) -> SimpleNamespace:
        """What a standard op's builder reads of its layer: name, outputs, opset, the activation to fuse."""
        return SimpleNamespace(name=self.layer.name, op_type=op_type, domain="", opset=opset,
                               outputs=[f"{self.layer.name}:{op_type}:{k}" for k in range(outputs)],
                               fused_activation=activation, attrs=attrs or {})

    def op(self, op_type: str, opset: int, *inputs: Any, outputs: int = 1, activation: Any = None,
           **attrs: Any) -> Any:
        """The outputs of standard op ``op_type`` (at ``opset``) on ``inputs``; raises _Declined where its builder
        declines. ``activation``: (op type, attributes) the builder fuses, as a layer's fused_activation."""
        impl = registry.lookup(op_type, "", opset, self.backend)
        if impl is None:
            raise _Declined
        result = impl.build(self.rec, self.stand_in(op_type, opset, outputs, activation, attrs), *inputs, **attrs)
        if result is NotImplemented:
            raise _Declined
        return result

    def quant(self, build: Any, op_type: str, *inputs: Any, outputs: int = 1, **attrs: Any) -> Any:
        """The outputs of one of quant_gpu.py's builders (``build``, standard op ``op_type``'s) on ``inputs``."""
        result = build(self.rec, self.stand_in(op_type, 21, outputs), *inputs, **attrs)
        if result is NotImplemented:
            raise _Declined
        return result

    def map(self, inputs: list[Any], expr: str, dtype: Any) -> Any:
        """quant_gpu.map3: ``expr`` of a, b, c (``inputs``, broadcast together) elementwise, in ``dtype``."""
        return quant_gpu.map3(self.rec, [_wide_codes(x) for x in inputs], expr, np.dtype(dtype))

    def retype(self, x: Any, dtype: Any) -> Any:
        """``x``'s values under another integer dtype of the same device words (or a host array converted)."""
        if isinstance(x, np.ndarray):
            return x.astype(dtype)
        return x if x.dtype == np.dtype(dtype) else self.rec.retype(x, np.dtype(dtype))

    def add(self, a: Any, b: Any) -> Any:
        return self.op("Add", 14, a, b)

    def mul(self, a: Any, b: Any) -> Any:
        return self.op("Mul", 14, a, b)

    def transpose(self, x: Any, perm: list[int]) -> Any:
        if isinstance(x, np.ndarray):
            return np.ascontiguousarray(x.transpose(perm))
        return self.op("Transpose", 1, x, perm=perm)

    def reshape(self, x: Any, shape: tuple[int, ...]) -> Any:
        if isinstance(x, np.ndarray):
            return x.reshape(shape)
        return self.op("Reshape", 1, x, shape=list(shape))

    def slice(self, x: Any, axis: int, start: int, end: int) -> Any:
        if isinstance(x, np.ndarray):
            return np.ascontiguousarray(np.take(x, np.arange(start, end), axis=axis))
        return self.op("Slice", 1, x, starts=[start], ends=[end], axes=[axis])

    def concat(self, parts: list[Any], axis: int) -> Any:
        return self.op("Concat", 13, *parts, axis=axis)

    def gelu(self, x: Any, approximate: str = "none") -> Any:
        return self.op("Gelu", 20, x, approximate=approximate)


def _wanted(layer, index: int) -> bool:
    return index < len(layer.outputs) and bool(layer.outputs[index])


def _float32(*tensors: Any) -> bool:
    return all(t is None or getattr(t, "dtype", None) == np.float32 for t in tensors)


def _register(op_type: str, domain: str = MS_DOMAIN, host_inputs: tuple[int, ...] = (), narrow_types: bool = False):
    """Register ``fn(c, *inputs, **attrs)`` (``c`` a _Composer) as ``op_type``'s builder on both GPU backends;
    a declined composition answers NotImplemented. ``narrow_types``: it takes 8/16-bit integer tensors with their
    logical dtype (the quantized ops), not widened to int32."""

    def wrap(fn):
        def for_backend(backend: str):
            def build(rec, layer, *inputs, **attrs):
                try:
                    return fn(_Composer(rec, layer, backend), *inputs, **attrs)
                except (_Declined, QuantDeclined):
                    return NotImplemented
                except ValueError:
                    # A malformed parameter (a shape, a block size): the CPU kernel runs and names it.
                    return NotImplemented

            build.__name__ = build.__qualname__ = f"{fn.__name__}_{backend.replace('-', '_')}"
            build.__doc__ = fn.__doc__
            return build

        for backend in GPU_BACKENDS:
            registry.register(op_type, 1, domain, backend=backend, host_inputs=host_inputs,
                              narrow_types=narrow_types)(for_backend(backend))
        return fn

    return wrap


# -- Gelu family, BiasAdd, BiasSplitGelu ---------------------------------------------------------------------

@_register("Gelu")
def gelu(c: _Composer, X):
    """Gelu (erf)."""
    return c.gelu(X) if _float32(X) else NotImplemented


@_register("BiasGelu")
def bias_gelu(c: _Composer, A, B):
    """Gelu(A + B)."""
    return c.gelu(c.add(A, B)) if _float32(A, B) else NotImplemented


@_register("FastGelu")
def fast_gelu(c: _Composer, X, bias=None):
    """tanh-approximated Gelu(X + bias)."""
    if not _float32(X, bias):
        return NotImplemented
    return c.gelu(X if bias is None else c.add(X, bias), "tanh")


@_register("QuickGelu")
def quick_gelu(c: _Composer, X, *, alpha=1.702):
    """x * sigmoid(alpha x): ONNX's Swish."""
    return c.op("Swish", 24, X, alpha=float(alpha)) if _float32(X) else NotImplemented


@_register("BiasAdd")
def bias_add(c: _Composer, X, bias, skip):
    """X + bias + skip."""
    return c.add(c.add(X, bias), skip) if _float32(X, bias, skip) else NotImplemented


@_register("BiasSplitGelu")
def bias_split_gelu(c: _Composer, X, bias):
    """(X + bias) halves along the last axis: left * Gelu(right)."""
    if not _float32(X, bias) or X.shape[-1] % 2:
        return NotImplemented
    total = c.add(X, bias)
    half = X.shape[-1] // 2
    left = c.slice(total, X.ndim - 1, 0, half)
    right = c.slice(total, X.ndim - 1, half, 2 * half)
    return c.mul(left, c.gelu(right))


# -- layer norms -------------------------------------------------------------------------------------------

def _skip_outputs(c: _Composer, total, normalized) -> tuple:
    """(output, mean, inv_std_var, input_skip_bias_sum) for the layer's outputs; None where not asked for."""
    layer = c.layer
    y, mean, inv = normalized if isinstance(normalized, tuple) else (normalized, None, None)
    if (_wanted(layer, 1) and mean is None) or (_wanted(layer, 2) and inv is None):
        raise _Declined
    values = (y, mean, inv, total)
    outs = tuple(v if _wanted(layer, k) or k == 0 else None for k, v in enumerate(values[:len(layer.outputs)]))
    return outs if len(outs) > 1 else outs[0]


def _skip_total(c: _Composer, input, skip, bias):
    if skip.shape[-1] != input.shape[-1] or skip.ndim > input.ndim or input.ndim != 3:
        raise _Declined
    total = c.add(input, skip)
    return total if bias is None else c.add(total, bias)


@_register("SkipLayerNormalization")
def skip_layer_normalization(c: _Composer, input, skip, gamma, beta=None, bias=None, *, epsilon=1e-12):
    """LayerNormalization(input + skip + bias), with its statistics and the sum where asked for."""
    if not _float32(input, skip, gamma, beta, bias):
        return NotImplemented
    total = _skip_total(c, input, skip, bias)
    stats = _wanted(c.layer, 1) or _wanted(c.layer, 2)
    normalized = c.op("LayerNormalization", 17, total, gamma, beta, outputs=3 if stats else 1, axis=-1,
                      epsilon=float(epsilon))
    return _skip_outputs(c, total, normalized)


@_register("SkipSimplifiedLayerNormalization")
def skip_simplified_layer_normalization(c: _Composer, input, skip, gamma, bias=None, *, epsilon=1e-12):
    """RMSNormalization(input + skip + bias) and the sum (the statistics outputs fall back)."""
    if not _float32(input, skip, gamma, bias):
        return NotImplemented
    total = _skip_total(c, input, skip, bias)
    return _skip_outputs(c, total, c.op("RMSNormalization", 23, total, gamma, axis=-1, epsilon=float(epsilon)))


@_register("SimplifiedLayerNormalization", domain="")
def simplified_layer_normalization(c: _Composer, X, scale, *, axis=-1, epsilon=1e-5, stash_type=1):
    """ORT's SimplifiedLayerNormalization: RMSNormalization (inv_std_var falls back)."""
    if not _float32(X, scale) or _wanted(c.layer, 1) or stash_type != 1:
        return NotImplemented
    return c.op("RMSNormalization", 23, X, scale, axis=axis, epsilon=float(epsilon))


@_register("EmbedLayerNormalization")
def embed_layer_normalization(c: _Composer, input_ids, segment_ids, word_embedding, position_embedding,
                              segment_embedding=None, gamma=None, beta=None, mask=None, position_ids=None, *,
                              epsilon=1e-12, mask_index_type=1):
    """Gathers of the three tables (ids bounds-checked on the device), their sum, LayerNormalization; the
    mask index as the count of set mask entries per row (zeros without a mask)."""
    if not _float32(word_embedding, position_embedding, segment_embedding, gamma, beta) or gamma is None \
            or beta is None or getattr(input_ids, "ndim", 0) != 2:
        return NotImplemented
    batch, seq = input_ids.shape
    if position_ids is None:
        positions: Any = np.arange(seq, dtype=np.int64)[None, :]
    elif isinstance(position_ids, np.ndarray):
        positions = position_ids.astype(np.int64)
    else:
        positions = position_ids
    if isinstance(positions, np.ndarray) and (positions.max(initial=0) >= position_embedding.shape[0]
                                              or positions.min(initial=0) < 0):
        return NotImplemented  # the CPU kernel reports the index
    total = c.op("Gather", 13, word_embedding, input_ids, axis=0)  # (B, S, H)
    if isinstance(positions, np.ndarray) and isinstance(position_embedding, np.ndarray):
        total = c.add(total, position_embedding[positions])
    else:
        total = c.add(total, c.op("Gather", 13, position_embedding, positions, axis=0))
    if segment_ids is not None and segment_embedding is not None:
        total = c.add(total, c.op("Gather", 13, segment_embedding, segment_ids, axis=0))
    y = c.op("LayerNormalization", 17, total, gamma, beta, axis=-1, epsilon=float(epsilon))
    outs: list[Any] = [y, None, total]
    if _wanted(c.layer, 1):
        if mask is None:
            outs[1] = np.zeros(batch, dtype=np.int32)
        else:
            counted = c.op("Cast", 13, c.op("Greater", 13, mask, np.zeros((), mask.dtype)), to=6)  # int32
            outs[1] = c.op("ReduceSum", 1, counted, axes=[1], keepdims=0)
    outs = outs[:len(c.layer.outputs)]
    return tuple(outs) if len(outs) > 1 else y


# -- convolutions, Gemm, MatMul --------------------------------------------------------------------------

def _conv_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attrs.items() if v is not None}


@_register("FusedConv", host_inputs=(1, 2))
def fused_conv(c: _Composer, X, W, B=None, Z=None, *, activation=None, activation_params=None, **attrs):
    """activation(Conv(X, W, B) + Z): the Conv builder (this engine's FusedConv's where Z is given) with the
    activation fused into its epilogue."""
    try:
        act = contrib.conv_activation(activation, activation_params)
    except ValueError:
        return NotImplemented  # the CPU kernel names it
    if Z is None:
        return c.op("Conv", 11, X, W, B, activation=act, **_conv_attrs(attrs))
    return c.op("FusedConv", 1, X, W, B, Z, activation=act, **_conv_attrs(attrs))


@_register("NhwcConv", host_inputs=(1, 2))
def nhwc_conv(c: _Composer, X, W, B=None, **attrs):
    """Conv between two transposes: channels-last X and Y."""
    if not _float32(X) or X.ndim < 3:
        return NotImplemented
    rank = X.ndim
    x = c.transpose(X, [0, rank - 1, *range(1, rank - 1)])
    y = c.op("Conv", 11, x, W, B, **_conv_attrs(attrs))
    return c.transpose(y, [0, *range(2, rank), 1])


@_register("FusedGemm")
def fused_gemm(c: _Composer, A, B, C=None, *, alpha=1.0, beta=1.0, transA=0, transB=0, activation=None,
               activation_alpha=None, activation_beta=None, activation_gamma=None):
    """activation(Gemm(A, B, C)), the activation in the Gemm builder's epilogue."""
    try:
        act = contrib.gemm_activation(activation, activation_alpha, activation_beta, activation_gamma)
    except ValueError:
        return NotImplemented
    return c.op("Gemm", 13, A, B, C, activation=act, alpha=alpha, beta=beta, transA=transA, transB=transB)


def _matmul_operand(c: _Composer, x: Any, trans: int, trans_batch: int) -> Any:
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(contrib.fused_matmul_operand(x, trans, trans_batch))
    rank = x.ndim
    perm = list(range(rank))
    if rank >= 3 and trans_batch:
        perm = [*range(1, rank - 1), 0, rank - 1]
    if trans and rank >= 2:
        perm[-1], perm[-2] = perm[-2], perm[-1]
    return x if perm == list(range(rank)) else c.transpose(x, perm)


@_register("FusedMatMul")
def fused_matmul(c: _Composer, A, B, *, alpha=1.0, transA=0, transB=0, transBatchA=0, transBatchB=0):
    """alpha * op(A) @ op(B): transposes (on the host for constants), MatMul, a scale."""
    if not _float32(A, B):
        return NotImplemented
    y = c.op("MatMul", 13, _matmul_operand(c, A, transA, transBatchA), _matmul_operand(c, B, transB, transBatchB))
    return y if float(alpha) == 1.0 else c.mul(y, np.array(alpha, np.float32))


# -- RotaryEmbedding ---------------------------------------------------------------------------------------

def _rotate(c: _Composer, x: Any, cos: Any, sin: Any, half: int, interleaved: int) -> Any:
    """Rotate the first 2 * half features of x's last axis; cos and sin broadcast against (..., half)."""
    last = x.ndim - 1
    head = x.shape[-1]
    rot = c.slice(x, last, 0, 2 * half) if 2 * half < head else x
    if interleaved:
        pairs = c.reshape(rot, (*rot.shape[:-1], half, 2))
        x1 = c.reshape(c.slice(pairs, last + 1, 0, 1), (*rot.shape[:-1], half))
        x2 = c.reshape(c.slice(pairs, last + 1, 1, 2), (*rot.shape[:-1], half))
    else:
        x1, x2 = c.slice(rot, last, 0, half), c.slice(rot, last, half, 2 * half)
    real = c.op("Sub", 14, c.mul(x1, cos), c.mul(x2, sin))
    imag = c.add(c.mul(x1, sin), c.mul(x2, cos))
    if interleaved:
        shape = (*rot.shape[:-1], half, 1)
        rotated = c.reshape(c.concat([c.reshape(real, shape), c.reshape(imag, shape)], last + 1), rot.shape)
    else:
        rotated = c.concat([real, imag], last)
    return rotated if 2 * half == head else c.concat([rotated, c.slice(x, last, 2 * half, head)], last)


@_register("RotaryEmbedding")
def rotary_embedding(c: _Composer, input, position_ids, cos_cache, sin_cache, *, interleaved=0, num_heads=0,
                     rotary_embedding_dim=0, is_packed_batching=0, scale=1.0):
    """Rotary embedding: cos and sin gathered by position (a host table for host positions), x viewed as
    (B, S, N, H) (or (B, N, S, H)), the halves (or the even and odd features) rotated and put back."""
    if is_packed_batching or not _float32(input, cos_cache, sin_cache) or input.ndim not in (3, 4):
        return NotImplemented
    batch = input.shape[0]
    seq = input.shape[2] if input.ndim == 4 else input.shape[1]
    half = cos_cache.shape[1]
    heads = int(num_heads or 0) or (input.shape[-1] // (2 * half) if input.ndim == 3 else input.shape[1])
    head = input.shape[-1] if input.ndim == 4 else input.shape[2] // heads
    rot_dim = int(rotary_embedding_dim or 0) or 2 * half
    if rot_dim != 2 * half or rot_dim > head or head * heads != (input.shape[2] if input.ndim == 3 else
                                                                 input.shape[1] * head):
        return NotImplemented
    ids = position_ids
    if isinstance(ids, np.ndarray) and ids.size == 1:
        positions = int(ids.reshape(())) + np.arange(seq)
        if positions.max(initial=0) >= cos_cache.shape[0] or positions.min(initial=0) < 0:
            return NotImplemented  # the CPU kernel reports the index
        if not isinstance(cos_cache, np.ndarray) or not isinstance(sin_cache, np.ndarray):
            return NotImplemented
        cos, sin = cos_cache[positions][None], sin_cache[positions][None]  # (1, S, half)
    elif getattr(ids, "shape", None) == (batch, seq) and isinstance(cos_cache, np.ndarray) \
            and isinstance(sin_cache, np.ndarray):
        if isinstance(ids, np.ndarray):
            if ids.max(initial=0) >= cos_cache.shape[0] or ids.min(initial=0) < 0:
                return NotImplemented
            cos, sin = cos_cache[ids.astype(np.int64)], sin_cache[ids.astype(np.int64)]
        else:
            cos = c.op("Gather", 13, cos_cache, ids, axis=0)  # (B, S, half); indices checked on the device
            sin = c.op("Gather", 13, sin_cache, ids, axis=0)
    else:
        return NotImplemented
    if input.ndim == 4:  # (B, N, S, H): cos and sin as (B, 1, S, half)
        cos, sin = c.reshape(cos, (cos.shape[0], 1, seq, half)), c.reshape(sin, (sin.shape[0], 1, seq, half))
        return _rotate(c, input, cos, sin, half, interleaved)
    cos, sin = c.reshape(cos, (cos.shape[0], seq, 1, half)), c.reshape(sin, (sin.shape[0], seq, 1, half))
    x = c.reshape(input, (batch, seq, heads, head))
    return c.reshape(_rotate(c, x, cos, sin, half, interleaved), input.shape)


# -- Attention, MultiHeadAttention --------------------------------------------------------------------------

def _heads(c: _Composer, x: Any, heads: int, perm: list[int]) -> Any:
    """(B, S, N*H) -> (B, S, N, H) -> transposed by ``perm``."""
    b, s, d = x.shape
    return c.transpose(c.reshape(x, (b, s, heads, d // heads)), perm)


def _key_mask_bias(c: _Composer, mask: Any, batch: int, q_len: int, kv_len: int, causal: bool,
                   filter_value: float) -> Any:
    """The additive (B|1, 1, S|1, T) mask of ``mask`` ((B) key lengths or (B, T) 0/1, int32) and the causal
    limit, or None; a host mask (or none) gives a host constant."""
    bias = None
    if mask is not None:
        if getattr(mask, "dtype", None) != np.int32:
            raise _Declined
        if isinstance(mask, np.ndarray):
            bias = np.asarray(contrib.key_mask(None, mask, batch, q_len, kv_len, 0, False, filter_value), np.float32)
        elif mask.shape == (batch, kv_len):
            keep = c.op("Greater", 13, mask, np.array(0, np.int32))  # (B, T)
            bias = c.op("Where", 16, keep, np.array(0, np.float32), np.array(filter_value, np.float32))
            bias = c.reshape(bias, (batch, 1, 1, kv_len))
        elif mask.shape == (batch,):
            lengths = c.reshape(mask, (batch, 1))
            keep = c.op("Less", 13, np.arange(kv_len, dtype=np.int32)[None, :], lengths)  # (B, T)
            bias = c.op("Where", 16, keep, np.array(0, np.float32), np.array(filter_value, np.float32))
            bias = c.reshape(bias, (batch, 1, 1, kv_len))
        else:
            raise _Declined
    if causal:
        allowed = np.arange(kv_len)[None, :] <= np.arange(q_len)[:, None]  # no past: as the CPU kernel
        causal_bias = np.where(allowed, np.float32(0), np.float32(_CAUSAL_FILTER))[None, None]
        bias = causal_bias if bias is None else (bias + causal_bias if isinstance(bias, np.ndarray)
                                                 else c.add(bias, causal_bias))
    return bias


def _attend(c: _Composer, q: Any, k_t: Any, v: Any, scale: float, bias: Any) -> Any:
    """softmax(q k_t * scale + bias) v for q (B, N, S, H), k_t (B, N, H, T), v (B, N, T, Hv): (B, S, N*Hv)."""
    scores = c.mul(c.op("MatMul", 13, q, k_t), np.array(scale, np.float32))
    if bias is not None:
        scores = c.add(scores, bias)
    context = c.op("MatMul", 13, c.op("Softmax", 13, scores, axis=-1), v)  # (B, N, S, Hv)
    b, n, s, hv = context.shape
    return c.reshape(c.transpose(context, [0, 2, 1, 3]), (b, s, n * hv))


@_register("Attention")
def attention(c: _Composer, input, weights, bias=None, mask_index=None, past=None, attention_bias=None,
              past_sequence_length=None, *, num_heads=None, qkv_hidden_sizes=None, unidirectional=0, scale=None,
              mask_filter_value=None, do_rotary=0, rotary_embedding_dim=0, past_present_share_buffer=0):
    """Attention without a past: the packed projection (MatMul + bias), heads split by Slice, Reshape and
    Transpose, scores by MatMul, the mask as an additive bias, Softmax, the context by MatMul."""
    if past is not None or past_sequence_length is not None or do_rotary or _wanted(c.layer, 1) \
            or not num_heads or not _float32(input, weights, bias, attention_bias) or input.ndim != 3:
        return NotImplemented
    heads = int(num_heads)
    total = weights.shape[1]
    sizes = [int(s) for s in qkv_hidden_sizes] if qkv_hidden_sizes else [total // 3] * 3
    if len(sizes) != 3 or sum(sizes) != total or any(s % heads for s in sizes):
        return NotImplemented
    qkv = c.op("MatMul", 13, input, weights)
    if bias is not None:
        qkv = c.add(qkv, bias)
    return _packed_attention(c, qkv, sizes, heads, mask_index, attention_bias, unidirectional, scale,
                             mask_filter_value)


def _packed_attention(c: _Composer, qkv: Any, sizes: list[int], heads: int, mask_index: Any, attention_bias: Any,
                      unidirectional: int, scale: Any, mask_filter_value: Any) -> Any:
    """Attention's steps after its input projection ``qkv`` (B, S, sum(sizes)): Q, K and V split off, the heads
    apart, the mask (and ``attention_bias``) as an additive bias, the scaled-dot-product attention."""
    bounds = np.cumsum([0, *sizes])
    q, k, v = (c.slice(qkv, 2, int(bounds[i]), int(bounds[i + 1])) for i in range(3))
    batch, seq = qkv.shape[:2]
    filter_value = -10000.0 if mask_filter_value is None else float(mask_filter_value)
    mask = _key_mask_bias(c, mask_index, batch, seq, seq, bool(unidirectional), filter_value)
    if attention_bias is not None:
        mask = attention_bias if mask is None else c.add(mask, attention_bias)
    head = sizes[0] // heads
    scale = float(scale) if scale else 1.0 / math.sqrt(head)
    return _attend(c, _heads(c, q, heads, [0, 2, 1, 3]), _heads(c, k, heads, [0, 2, 3, 1]),
                   _heads(c, v, heads, [0, 2, 1, 3]), scale, mask)


@_register("MultiHeadAttention")
def multi_head_attention(c: _Composer, query, key=None, value=None, bias=None, key_padding_mask=None,
                         attention_bias=None, past_key=None, past_value=None, past_sequence_length=None,
                         cache_indirection=None, *, num_heads=None, scale=None, mask_filter_value=None,
                         unidirectional=0):
    """MultiHeadAttention on separate (B, S, D) query, key and value (optional bias, key_padding_mask,
    attention_bias), without a past; packed and 4-D forms fall back."""
    if any(t is not None for t in (past_key, past_value, past_sequence_length, cache_indirection)) \
            or len(c.layer.outputs) > 1 or not num_heads or key is None or value is None \
            or query.ndim != 3 or key.ndim != 3 or value.ndim != 3 \
            or not _float32(query, key, value, bias, attention_bias):
        return NotImplemented
    heads = int(num_heads)
    dq, dk = query.shape[2], key.shape[2]
    if dq % heads or dk % heads or value.shape[2] % heads:
        return NotImplemented
    if bias is not None:
        if not isinstance(bias, np.ndarray):
            return NotImplemented
        query, key, value = c.add(query, bias[:dq]), c.add(key, bias[dq:dq + dk]), c.add(value, bias[dq + dk:])
    batch, seq = query.shape[:2]
    kv_len = key.shape[1]
    filter_value = -10000.0 if mask_filter_value is None else float(mask_filter_value)
    mask = _key_mask_bias(c, key_padding_mask, batch, seq, kv_len, bool(unidirectional), filter_value)
    if attention_bias is not None:
        mask = attention_bias if mask is None else c.add(mask, attention_bias)
    scale = float(scale) if scale else 1.0 / math.sqrt(dq // heads)
    return _attend(c, _heads(c, query, heads, [0, 2, 1, 3]), _heads(c, key, heads, [0, 2, 3, 1]),
                   _heads(c, value, heads, [0, 2, 1, 3]), scale, mask)


# -- quantized operators: QuantizeLinear, DequantizeLinear, the QLinear family, QGemm, the integer products --------
#
# Integer tensors arrive with their logical dtype (the builders are registered with narrow_types) and live on the
# device as one value per 32-bit word. Each CPU kernel's float32 steps are replicated in its order (contrib.py):
# host parameters computed on the host by the same numpy float32 operations, each device product that an add or
# a subtraction follows rounded on its own through opaque() (never fused into an FMA), divisions through the
# device's correctly rounded division (div_f32). Integer products run as the backend's float32 MatMul or Conv on
# zero-point-shifted operands, exact while their partial sums stay below 2^24 (see quant_gpu.py).

_CODE_TYPES = (np.dtype(np.int8), np.dtype(np.uint8))
_SEPARATE = "opaque_zero()"  # the second argument of opaque(): a zero the compiler cannot see


def _wide_codes(x: Any) -> Any:
    """A host array of 8/16-bit codes as int32 (what the device holds); anything else as it is."""
    if isinstance(x, np.ndarray) and x.dtype in quant_gpu.INT_RANGES:
        return x.astype(np.int32)
    return x


def _lit(value: Any) -> str:
    """A float32 host scalar as WGSL the compiler cannot fold into the expression around it (a constant divisor
    could become a product with its rounded reciprocal, a constant factor part of an FMA): its exact bits,
    through opaque()."""
    bits = int(np.asarray(value, np.float32).reshape(1).view(np.uint32)[0])
    return f"opaque(bitcast<f32>({bits}u), {_SEPARATE})"


def _alone(expr: str) -> str:
    """``expr`` rounded to float32 on its own: a product never fused with the add or subtraction after it."""
    return f"opaque({expr}, {_SEPARATE})"


def _saturated(expr: str, dtype: np.dtype) -> str:
    """A float32 expression clamped into ``dtype``'s range and converted (it is already integral)."""
    lo, hi = quant_gpu.INT_RANGES[np.dtype(dtype)]
    return f"i32(clamp({expr}, {lo:.1f}, {hi:.1f}))"


def _scalar_of(value: Any, dtype: Any = np.float32) -> Any:
    """A per-tensor host parameter (scale or zero point) as a ``dtype`` scalar; declines a device one or one with
    several elements."""
    host = quant_gpu._host(value) if value is not None else None
    if host is None or np.asarray(host).size != 1:
        raise _Declined
    return np.asarray(host).astype(dtype).reshape(())[()]


def _zero_of(zero_point: Any) -> float:
    """A per-tensor zero point as a float (0 where omitted)."""
    return 0.0 if zero_point is None else float(_scalar_of(zero_point, np.int64))


def _codes_type(x: Any) -> np.dtype:
    dtype = np.dtype(getattr(x, "dtype", np.float64))
    if dtype not in _CODE_TYPES:
        raise _Declined  # 8-bit codes only (the CPU kernels' tables and sums assume them)
    return dtype


def _out_type(x: Any, zero_point: Any) -> np.dtype:
    """The output dtype of a requantizing op: its zero point's, else its input's (contrib._out_dtype)."""
    dtype = np.dtype(zero_point.dtype) if zero_point is not None else np.dtype(x.dtype)
    if dtype not in quant_gpu.INT_RANGES:
        raise _Declined
    return dtype


def _dequantized(x_zero: float, x_scale: Any) -> str:
    """contrib._dequant of ``a``: (f32(a) - zero point) * scale, in float32."""
    return f"(f32(a) - {x_zero:.1f}) * {_lit(x_scale)}"


def _quantized(value: str, y_scale: Any, y_zero: float, dtype: np.dtype) -> str:
    """contrib._requantize of ``value``: round_half_even(value / y_scale) + y_zero, saturated into ``dtype``."""
    return _saturated(f"round(div_f32({_alone(value)}, {_lit(y_scale)})) + {y_zero:.1f}", dtype)


@_register("QuantizeLinear", host_inputs=(1, 2), narrow_types=True)
def quantize_linear(c: _Composer, x, y_scale, y_zero_point=None, *, axis=1):
    """ORT's QuantizeLinear: ONNX's (quant_gpu.py), to 8- and 16-bit codes; 4-bit ones stay on the CPU."""
    return c.quant(quant_gpu.quantize_linear_13, "QuantizeLinear", x, y_scale, y_zero_point, axis=axis)


@_register("DequantizeLinear", host_inputs=(1, 2), narrow_types=True)
def dequantize_linear(c: _Composer, x, x_scale, x_zero_point=None, *, axis=1):
    """ORT's DequantizeLinear: ONNX's (quant_gpu.py), of 8-, 16- and 32-bit codes; 4-bit ones stay on the CPU."""
    return c.quant(quant_gpu.dequantize_linear_13, "DequantizeLinear", x, x_scale, x_zero_point, axis=axis)


def _qlinear_binary(c: _Composer, A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point,
                    mul: bool) -> Any:
    """contrib._qlinear_binary in one broadcast map: a * (a_scale / c_scale) + b * (b_scale / c_scale) (each
    product rounded apart), or a * b * (a_scale * b_scale / c_scale), rounded half to even, plus C's zero point,
    saturated."""
    if A is None or B is None:
        raise _Declined
    out = _out_type(A, C_zero_point)
    a_scale, b_scale, c_scale = (_scalar_of(s) for s in (A_scale, B_scale, C_scale))
    a = f"(f32(a) - {_zero_of(A_zero_point):.1f})"
    b = f"(f32(b) - {_zero_of(B_zero_point):.1f})"
    if mul:
        values = f"{_alone(f'{a} * {b}')} * {_lit(a_scale * b_scale / c_scale)}"
    else:
        values = f"{_alone(f'{a} * {_lit(a_scale / c_scale)}')} + {_alone(f'{b} * {_lit(b_scale / c_scale)}')}"
    return c.map([A, B], _saturated(f"round({_alone(values)}) + {_zero_of(C_zero_point):.1f}", out), out)


@_register("QLinearAdd", host_inputs=(1, 2, 4, 5, 6, 7), narrow_types=True)
def qlinear_add(c: _Composer, A, A_scale, A_zero_point=None, B=None, B_scale=None, B_zero_point=None, C_scale=None,
                C_zero_point=None):
    """A + B on quantized, broadcast inputs, requantized to C's scale and zero point."""
    return _qlinear_binary(c, A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point, False)


@_register("QLinearMul", host_inputs=(1, 2, 4, 5, 6, 7), narrow_types=True)
def qlinear_mul(c: _Composer, A, A_scale, A_zero_point=None, B=None, B_scale=None, B_zero_point=None, C_scale=None,
                C_zero_point=None):
    """A * B on quantized, broadcast inputs, requantized to C's scale and zero point."""
    return _qlinear_binary(c, A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point, True)


def _by_table(c: _Composer, X, X_scale, X_zero_point, Y_scale, Y_zero_point, fn) -> Any:
    """An 8-bit unary op as the CPU kernel runs it: its 256-entry table (contrib._lookup over every code, built on
    the host as ORT builds it), gathered on the device by code."""
    dtype = _codes_type(X)
    if not isinstance(X, GTensor) or Y_scale is None:
        raise _Declined
    scales = [quant_gpu._host(v) if v is not None else None for v in (X_scale, X_zero_point, Y_scale, Y_zero_point)]
    if any(host is None and given is not None for host, given in zip(scales, (X_scale, X_zero_point, Y_scale,
                                                                            Y_zero_point), strict=True)):
        raise _Declined
    low = int(np.iinfo(dtype).min)
    codes = (np.arange(256, dtype=np.int64) + low).astype(dtype)
    table = contrib._lookup(codes, *scales, fn)  # table[k] is the code k + low's result
    index = c.retype(X, np.int32) if low == 0 else c.map([X], f"a - ({low})", np.int32)
    y = c.op("Gather", 13, table.astype(np.int32), index, axis=0)
    return c.retype(y, table.dtype)


@_register("QLinearSigmoid", host_inputs=(1, 2, 3, 4), narrow_types=True)
def qlinear_sigmoid(c: _Composer, X, X_scale, X_zero_point=None, Y_scale=None, Y_zero_point=None):
    """Sigmoid on 8-bit codes, by the CPU kernel's table."""
    return _by_table(c, X, X_scale, X_zero_point, Y_scale, Y_zero_point, ACTIVATIONS["Sigmoid"].kernel)


@_register("QLinearLeakyRelu", host_inputs=(1, 2, 3, 4), narrow_types=True)
def qlinear_leaky_relu(c: _Composer, X, X_scale, X_zero_point=None, Y_scale=None, Y_zero_point=None, *, alpha=0.01):
    """LeakyRelu on 8-bit codes, by the CPU kernel's table."""
    return _by_table(c, X, X_scale, X_zero_point, Y_scale, Y_zero_point,
                     lambda v: ACTIVATIONS["LeakyRelu"].kernel(v, alpha=float(alpha)))


@_register("QLinearSoftmax", host_inputs=(1, 2, 3, 4), narrow_types=True)
def qlinear_softmax(c: _Composer, X, X_scale, x_zero_point=None, y_scale=None, y_zero_point=None, *, axis=-1,
                    opset=13):
    """Dequantize (exact), the backend's Softmax (along ``axis``; before opset 13 over the axes from ``axis`` on,
    which is Softmax-1's own rule), quantize (exact): only the softmax's sum may round differently."""
    _codes_type(X)
    out = _out_type(X, y_zero_point)
    x = c.map([X], _dequantized(_zero_of(x_zero_point), _scalar_of(X_scale)), np.float32)
    probs = c.op("Softmax", 13 if int(opset or 13) >= 13 else 1, x, axis=int(axis))
    return c.map([probs], _quantized("a", _scalar_of(y_scale), _zero_of(y_zero_point), out), out)


@_register("QLinearConcat", host_inputs=(0, 1), narrow_types=True)
def qlinear_concat(c: _Composer, Y_scale, Y_zero_point, *inputs, axis=None):
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
            raise _Declined
        x_scale, x_zero = _scalar_of(scale), _zero_of(zero_point)
        if x_scale == y_scale and x_zero == y_zero:
            parts.append(c.retype(x, np.int32))
        elif isinstance(x, np.ndarray):  # a constant part, requantized on the host as the CPU kernel does
            parts.append(contrib._requantize(contrib._dequant(x, scale, zero_point), Y_scale, Y_zero_point,
                                             out).astype(np.int32))
        else:
            parts.append(c.map([x], _quantized(_dequantized(x_zero, x_scale), y_scale, y_zero, out), np.int32))
    return c.retype(c.concat(parts, int(axis)), out)


def _to_channels_first(c: _Composer, x: Any) -> Any:
    rank = x.ndim
    return c.transpose(x, [0, rank - 1, *range(1, rank - 1)])


def _to_channels_last(c: _Composer, x: Any) -> Any:
    rank = x.ndim
    return c.transpose(x, [0, *range(2, rank), 1])


@_register("QLinearAveragePool", host_inputs=(1, 2, 3, 4), narrow_types=True)
def qlinear_average_pool(c: _Composer, X, x_scale, x_zero_point=None, y_scale=None, y_zero_point=None, *,
                         auto_pad="NOTSET", ceil_mode=0, channels_last=0, count_include_pad=0, kernel_shape=None,
                         pads=None, strides=None):
    """Dequantize (exact), the backend's AveragePool (NCHW; transposed around it where channels_last), quantize
    (exact): only the window sums may round differently."""
    _codes_type(X)
    out = _out_type(X, y_zero_point)
    if X.ndim < 3 or kernel_shape is None:
        raise _Declined
    x = c.map([X], _dequantized(_zero_of(x_zero_point), _scalar_of(x_scale)), np.float32)
    if channels_last:
        x = _to_channels_first(c, x)
    y = c.op("AveragePool", 19, x, auto_pad=auto_pad, ceil_mode=ceil_mode, count_include_pad=count_include_pad,
             kernel_shape=kernel_shape, pads=pads, strides=strides)
    if channels_last:
        y = _to_channels_last(c, y)
    return c.map([y], _quantized("a", _scalar_of(y_scale), _zero_of(y_zero_point), out), out)


@_register("QLinearGlobalAveragePool", host_inputs=(1, 2, 3, 4), narrow_types=True)
def qlinear_global_average_pool(c: _Composer, X, x_scale, x_zero_point, y_scale, y_zero_point, *, channels_last=0):
    """The codes summed over the spatial axes in float32 (exact: every partial sum of 8-bit codes stays below 2^24
    for windows under 65793 elements), then as the CPU kernel: (sum - zero point * count) * (x_scale / (y_scale *
    count)), rounded half to even, plus y's zero point, saturated. Bit for bit."""
    _codes_type(X)
    out = _out_type(X, y_zero_point)
    rank = X.ndim
    if rank < 3:
        raise _Declined
    spatial = list(range(1, rank - 1)) if channels_last else list(range(2, rank))
    count = math.prod(X.shape[a] for a in spatial)
    if count == 0 or 256 * count >= 2 ** 24:
        raise _Declined
    sums = c.op("ReduceSum", 1, c.map([X], "f32(a)", np.float32), axes=spatial, keepdims=1)
    ratio = np.float32(_scalar_of(x_scale)) / (np.float32(_scalar_of(y_scale)) * np.float32(count))
    shifted = _alone(f"a - {_zero_of(x_zero_point) * count:.1f}")
    return c.map([sums], _saturated(f"round({_alone(f'{shifted} * {_lit(ratio)}')}) + {_zero_of(y_zero_point):.1f}",
                                    out), out)


@_register("QLinearConv", host_inputs=(1, 2, 3, 4, 5, 6, 7, 8), narrow_types=True)
def qlinear_conv(c: _Composer, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B=None, *,
                 channels_last=0, **attrs):
    """ONNX's QLinearConv (quant_gpu.py), between two transposes where x and y are channels-last."""
    if channels_last:
        if getattr(x, "ndim", 0) < 3:
            raise _Declined
        x = c.retype(_to_channels_first(c, c.retype(x, np.int32)), x.dtype)
    y = c.quant(quant_gpu.qlinear_conv, "QLinearConv", x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
                y_zero_point, B, **{k: v for k, v in attrs.items() if v is not None})
    if channels_last:
        y = c.retype(_to_channels_last(c, c.retype(y, np.int32)), y.dtype)
    return y


def _integer_product(c: _Composer, A: Any, a_zero_point: Any, B: Any, b_zero_point: Any) -> Any:
    """(A - a_zero_point) @ (B - b_zero_point) in float32 (exact integers; B's zero point per tensor or per column,
    A's a scalar, on the host or the device)."""
    if a_zero_point is not None and a_zero_point.size != 1:
        raise _Declined  # (the CPU kernel reads the first element only)
    rec = c.rec
    a = quant_gpu._shifted(rec, c.layer, A, a_zero_point, lambda zp: zp.reshape(()), "a")
    b = quant_gpu._shifted(rec, c.layer, B, b_zero_point, lambda zp: zp.reshape(()) if zp.size == 1 else zp.reshape(-1),
                           "b")
    return c.op("MatMul", 13, a, b)


def _scaled(c: _Composer, acc: Any, multiplier: Any, bias: Any) -> Any:
    """contrib._scaled_product's output step: acc * multiplier (+ bias), the product rounded before the add."""
    if bias is None:
        return c.map([acc, multiplier], "a * b", np.float32)
    return c.map([acc, multiplier, bias], f"{_alone('a * b')} + c", np.float32)


def _host_multiplier(first_scale: Any, second_scale: Any) -> np.ndarray:
    """float32(first) * float32(second) per tensor or per column, as contrib._scaled_product forms it."""
    first, second = quant_gpu._host(first_scale), quant_gpu._host(second_scale)
    if first is None or second is None:
        raise _Declined
    product = np.asarray(first, np.float32).reshape(-1)[0] * np.asarray(second, np.float32).reshape(-1)
    return product.reshape(()) if product.size == 1 else product


def _float_bias(bias: Any) -> Any:
    if bias is not None and getattr(bias, "dtype", None) != np.float32:
        raise _Declined
    return bias


@_register("MatMulIntegerToFloat", host_inputs=(2, 3, 4, 5), narrow_types=True)
def matmul_integer_to_float(c: _Composer, A, B, a_scale, b_scale, a_zero_point=None, b_zero_point=None, bias=None):
    """(A - a_zp) @ (B - b_zp) exactly, then * (a_scale * b_scale) (+ bias) in float32 as the CPU kernel: bit for
    bit."""
    if np.dtype(a_scale.dtype) != np.float32:
        raise _Declined
    acc = _integer_product(c, A, a_zero_point, B, b_zero_point)
    return _scaled(c, acc, _host_multiplier(a_scale, b_scale), _float_bias(bias))


@_register("DynamicQuantizeMatMul", host_inputs=(2, 3), narrow_types=True)
def dynamic_quantize_matmul(c: _Composer, A, B, b_scale, b_zero_point=None, bias=None):
    """A quantized to uint8 from its own range on the device (DynamicQuantizeLinear's program), the exact integer
    product with B, then * (a_scale * b_scale) (+ bias) in float32 as the CPU kernel: bit for bit."""
    if getattr(A, "dtype", None) != np.float32:
        raise _Declined
    a_q, a_scale, a_zero = c.quant(quant_gpu.dynamic_quantize_linear, "DynamicQuantizeLinear", A, outputs=3)
    acc = _integer_product(c, a_q, a_zero, B, b_zero_point)
    b = quant_gpu._host(b_scale)
    if b is None:
        raise _Declined
    multiplier = c.map([a_scale, np.asarray(b, np.float32).reshape(-1) if b.size > 1 else
                        np.asarray(b, np.float32).reshape(())], "a * b", np.float32)
    return _scaled(c, acc, multiplier, _float_bias(bias))


@_register("QGemm", host_inputs=(1, 2, 3, 4, 5, 6, 7, 8), narrow_types=True)
def qgemm(c: _Composer, A, a_scale, a_zero_point, B, b_scale, b_zero_point, C=None, y_scale=None, y_zero_point=None,
          *, alpha=1.0, transA=0, transB=0):
    """The exact integer product of op(A) and op(B) (a constant B transposed on the host once), plus C, scaled by
    alpha * a_scale * b_scale (per tensor or column) in float32, or requantized with y's scale and zero point
    (quant_gpu's requantization): bit for bit."""
    if getattr(A, "ndim", 0) != 2 or getattr(B, "ndim", 0) != 2:
        raise _Declined
    a = c.retype(c.transpose(c.retype(A, np.int32), [1, 0]), A.dtype) if transA else A
    b = B
    if transB:
        host = quant_gpu._host(B)
        if host is None:
            raise _Declined
        b = c.rec.derived(("qgemm-transposed-b",), (host,), lambda: np.ascontiguousarray(host.T))
    acc = _integer_product(c, a, a_zero_point, b, b_zero_point)
    if C is not None:
        if getattr(C, "dtype", None) != np.int32:
            raise _Declined
        acc = c.map([acc, C], _alone("a + f32(b)"), np.float32)  # exact: integers below 2^24
    b_host = quant_gpu._host(b_scale)
    if b_host is None:
        raise _Declined
    scale = np.float32(alpha) * np.float32(_scalar_of(a_scale)) * np.asarray(b_host, np.float32).reshape(-1)
    scale = scale.reshape(()) if scale.size == 1 else scale
    if y_scale is None:
        return c.map([acc, scale], "a * b", np.float32)
    if y_zero_point is None:
        raise _Declined
    multiplier = np.asarray(scale / np.float32(_scalar_of(y_scale)), np.float32)
    return quant_gpu._requantize(c.rec, acc, multiplier, y_zero_point)


@_register("MatMulNBits", host_inputs=(1, 2, 3), narrow_types=True)
def matmul_nbits(c: _Composer, A, B, scales, zero_points=None, g_idx=None, bias=None, *, K=None, N=None, bits=4,
                 block_size=None, accuracy_level=0, weight_prepacked=0):
    """A @ W^T (+ bias) with W dequantized on the host once per program (the CPU kernel's own dequantization),
    the backend's float32 MatMul: within the float32 reassociation of its sums. accuracy_level 4 (ORT's int8
    compute, A quantized per block) stays on the CPU."""
    if K is None or N is None or block_size is None or g_idx is not None or weight_prepacked \
            or getattr(A, "dtype", None) != np.float32 or A.shape[-1] != int(K) or not _float32(bias):
        raise _Declined
    k, n, bits, size = int(K), int(N), int(bits), int(block_size)
    if int(accuracy_level) == 4 and not (bits == 2 and size < 32):
        raise _Declined
    sources = [quant_gpu._host(v) for v in (B, scales, zero_points) if v is not None]
    if len(sources) != 2 + (zero_points is not None):
        raise _Declined
    packed, scale = sources[0], sources[1]
    zero = sources[2] if zero_points is not None else None

    def make() -> np.ndarray:
        return np.ascontiguousarray(contrib.nbits_weight(None, packed, scale, zero, k, n, bits, size).T)  # (K, N)

    w_t = c.rec.derived(("matmul-nbits-weight", k, n, bits, size), tuple(sources), make)
    y = c.op("MatMul", 13, A, w_t)
    return y if bias is None else c.add(y, bias)


@_register("QAttention", host_inputs=(3, 4, 6, 7), narrow_types=True)
def qattention(c: _Composer, input, weight, bias, input_scale, weight_scale, mask_index=None, input_zero_point=None,
               weight_zero_point=None, past=None, *, num_heads=None, unidirectional=0, scale=None,
               mask_filter_value=None, do_rotary=0, past_present_share_buffer=0):
    """Attention whose projection is the exact integer product of input and weight, scaled (+ bias) in float32
    as the CPU kernel (bit for bit), then Attention's steps (without a past)."""
    if past is not None or do_rotary or past_present_share_buffer or _wanted(c.layer, 1) or not num_heads \
            or getattr(input, "ndim", 0) != 3 or not _float32(bias) or bias is None:
        raise _Declined
    heads = int(num_heads)
    size = weight.shape[1] // 3
    if size % heads or 3 * size != weight.shape[1]:
        raise _Declined
    acc = _integer_product(c, input, input_zero_point, weight, weight_zero_point)
    qkv = _scaled(c, acc, _host_multiplier(input_scale, weight_scale), bias)
    return _packed_attention(c, qkv, [size] * 3, heads, mask_index, None, unidirectional, scale, mask_filter_value)



@_register("QEmbedLayerNormalization", host_inputs=tuple(range(2, 7)) + tuple(range(8, 18)), narrow_types=True)
def qembed_layer_normalization(c: _Composer, input_ids, segment_ids, word_embedding_quant, position_embedding_quant,
                               segment_embedding, gamma_quant, beta_quant, mask, word_embedding_scale,
                               position_embedding_scale, segment_embedding_scale, gamma_scale, beta_scale,
                               word_embedding_zero_point, position_embedding_zero_point,
                               segment_embedding_zero_point, gamma_zero_point, beta_zero_point, *, epsilon=1e-12):
    """The quantized tables and norm parameters dequantized on the host once per program (the CPU kernel's own
    contrib._dequant), then EmbedLayerNormalization's program."""
    tables = []
    for q, s, z in ((word_embedding_quant, word_embedding_scale, word_embedding_zero_point),
                    (position_embedding_quant, position_embedding_scale, position_embedding_zero_point),
                    (segment_embedding, segment_embedding_scale, segment_embedding_zero_point),
                    (gamma_quant, gamma_scale, gamma_zero_point), (beta_quant, beta_scale, beta_zero_point)):
        if q is None:
            tables.append(None)
            continue
        hosts = [quant_gpu._host(v) for v in (q, s, z) if v is not None]
        if len(hosts) != 2 + (z is not None) or hosts[0].dtype not in quant_gpu.INT_RANGES:
            raise _Declined
        code, scale, zero = hosts[0], hosts[1], hosts[2] if z is not None else None
        tables.append(c.rec.derived(("qembed-dequantized",), tuple(hosts),
                                    lambda code=code, scale=scale, zero=zero: contrib._dequant(code, scale, zero)))
    return embed_layer_normalization(c, input_ids, segment_ids, *tables[:3], tables[3], tables[4], mask,
                                     epsilon=epsilon)



def _lstm_weight(c: _Composer, weight: np.ndarray, zero_point: np.ndarray, direction: int, key: str) -> np.ndarray:
    """One direction's W or R ((D, rows, 4H) codes) minus its zero point (per tensor or column) in float32, made on
    the host once per program."""
    def make() -> np.ndarray:
        zp = contrib._per_direction(zero_point, weight.shape[0], weight.shape[2])[direction].astype(np.float32)
        return weight[direction].astype(np.float32) - zp

    return c.rec.derived(("dynamic-quantize-lstm", key, direction), (weight, zero_point), make)


def _dynamic_product(c: _Composer, a: Any, weight: np.ndarray, scale: np.ndarray) -> tuple[Any, Any]:
    """contrib._dynamic_product's parts on the device: ``a`` quantized to uint8 from its own range, its exact
    integer product with the shifted ``weight``, and the float32 multiplier a_scale * w_scale."""
    a_q, a_scale, a_zero = c.quant(quant_gpu.dynamic_quantize_linear, "DynamicQuantizeLinear", a, outputs=3)
    shifted = c.map([a_q, None, a_zero], "f32(a) - f32(c)", np.float32)
    return c.op("MatMul", 13, shifted, weight), c.map([a_scale, scale], "a * b", np.float32)


@_register("DynamicQuantizeLSTM", host_inputs=(1, 2, 3, 4, 8, 9, 10, 11), narrow_types=True)
def dynamic_quantize_lstm(c: _Composer, X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None,
                          W_scale=None, W_zero_point=None, R_scale=None, R_zero_point=None, *,
                          activation_alpha=None, activation_beta=None, activations=None, clip=None,
                          direction="forward", hidden_size=None, input_forget=0):
    """The CPU kernel's steps, unrolled over the sequence: X quantized from its own range at once and multiplied
    exactly with W, then at each step the hidden state quantized from its own range on the device and multiplied
    exactly with R, the gates' float32 steps in the kernel's order (each product rounded apart), the
    activations by the backend's programs. Without sequence_lens, peepholes, clip or input_forget (those stay
    on the CPU). The products and the elementwise steps are the CPU's; the activations may differ in the last
    bit, which can move a code of the next step's quantized hidden state."""
    if any(v is not None for v in (sequence_lens, P, clip)) or input_forget or getattr(X, "dtype", None) != np.float32 \
            or X.ndim != 3 or any(v is None for v in (W_scale, W_zero_point, R_scale, R_zero_point)):
        raise _Declined
    hosts = [quant_gpu._host(v) for v in (W, R, B, W_scale, W_zero_point, R_scale, R_zero_point)]
    if any(host is None and given is not None for host, given in zip(hosts, (W, R, B, W_scale, W_zero_point, R_scale,
                                                                            R_zero_point), strict=True)):
        raise _Declined
    w, r, bias, w_scale, w_zero, r_scale, r_zero = hosts
    reverse_flags = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}.get(
        contrib._text(direction).lower())
    if reverse_flags is None:
        raise _Declined
    dirs = len(reverse_flags)
    seq, batch, _ = X.shape
    hs = int(hidden_size) if hidden_size else r.shape[1]
    if w.shape[0] != dirs or w.shape[2] != 4 * hs or r.shape != (dirs, hs, 4 * hs):
        raise _Declined
    funcs = rnn_activations(activations, activation_alpha, activation_beta, ["Sigmoid", "Tanh", "Tanh"], dirs)
    bias = np.zeros((dirs, 8 * hs), np.float32) if bias is None else bias.astype(np.float32)
    w_scales = contrib._per_direction(w_scale, dirs, 4 * hs).astype(np.float32)
    r_scales = contrib._per_direction(r_scale, dirs, 4 * hs).astype(np.float32)

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
            acc, multiplier = _dynamic_product(c, h, r_d, r_scales[d])
            x_t = c.reshape(c.slice(xw, 0, t, t + 1), (batch, 4 * hs))
            gates = c.map([acc, multiplier, x_t], f"c + {_alone('a * b')}", np.float32)
            gi, go, gf, gc = (c.slice(gates, 1, k * hs, (k + 1) * hs) for k in range(4))
            i = activation(f, gi)
            input_part = c.map([i, activation(g, gc)], "a * b", np.float32)
            cell = c.map([activation(f, gf), cell, input_part], f"{_alone('a * b')} + c", np.float32)
            h = c.map([activation(f, go), activation(h_act, cell)], "a * b", np.float32)
            steps[t] = c.reshape(h, (1, 1, batch, hs))
        ys.append(steps[0] if seq == 1 else c.concat(steps, 0))
        finals_h.append(c.reshape(h, (1, batch, hs)))
        finals_c.append(c.reshape(cell, (1, batch, hs)))

    def stacked(parts: list[Any], axis: int) -> Any:
        return parts[0] if len(parts) == 1 else c.concat(parts, axis)

    outs = (stacked(ys, 1), stacked(finals_h, 0), stacked(finals_c, 0))
    n = max(1, len(c.layer.outputs))
    return tuple(v if _wanted(c.layer, k) or k == 0 else None for k, v in enumerate(outs[:n])) if n > 1 else outs[0]


__all__ = ["GPU_BACKENDS"]
