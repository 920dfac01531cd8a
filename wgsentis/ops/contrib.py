"""Numpy kernels of ONNX Runtime's float ``com.microsoft`` contrib operators, the ones its own tools write: the
transformer optimizer's fusions (Gelu, FastGelu, BiasGelu, QuickGelu, BiasAdd, BiasSplitGelu, the skip,
simplified and embed layer norms, Attention, MultiHeadAttention, GroupQueryAttention, RotaryEmbedding) and the
graph optimizer's fusions (FusedConv, FusedGemm, FusedMatMul, NhwcConv, NhwcFusedConv), plus
SimplifiedLayerNormalization, which ORT registers in the ONNX domain at version 1 (its version-1
LayerNormalization is norm.py's). The quantization tools' operators are contrib_quant.py's, which builds on the
helpers here.

Semantics are what ONNX Runtime's CPU execution provider computes, since these models are made and checked
with it (where ORT has no CPU kernel, BiasAdd, BiasSplitGelu, NhwcConv and the packed MultiHeadAttention
forms, the contrib spec's). The ops reuse the standard ops' kernels (conv, gemm, layer norm, rotary
embedding, activations). Their GPU programs are contrib_gpu.py's.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from wgsentis.errors import LayerError
from wgsentis.ops import attention as onnx_attention
from wgsentis.ops import conv as onnx_conv
from wgsentis.ops import matmul as onnx_matmul
from wgsentis.ops.activations import ACTIVATIONS
from wgsentis.ops.registry import register, register_flops
from wgsentis.ops.tensor import check_indices

MS_DOMAIN = "com.microsoft"
_F32 = np.float32
# ORT's default additive mask value for masked-out keys (Attention, MultiHeadAttention, QAttention).
_MASK_FILTER = -10000.0
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _error(ctx, detail: str) -> Exception:
    """A LayerError naming ctx's layer (a ValueError where the kernel runs without one)."""
    layer = getattr(ctx, "layer", None)
    if layer is None:
        return ValueError(detail)
    return LayerError(layer.name, layer.op_type, detail)


def _scalar(value: Any, dtype: Any = np.float64) -> Any:
    return np.asarray(value).astype(dtype).reshape(-1)[0]


def _work(x: np.ndarray) -> np.ndarray:
    """x in a numpy float type the kernels compute in: float32/float64 kept, others widened to float32."""
    return x if x.dtype in (np.float32, np.float64) else x.astype(_F32)


# ----------------------------------------------------------------------------------------------
# Gelu family, BiasAdd
# ----------------------------------------------------------------------------------------------

def _gelu(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    w = _work(x)
    return ACTIVATIONS["Gelu"].kernel(w, approximate=approximate).astype(x.dtype, copy=False)


@register("Gelu", 1, domain=MS_DOMAIN)
def gelu(ctx, X):
    """Gelu: 0.5 x (1 + erf(x / sqrt(2)))."""
    return _gelu(X)


@register("BiasGelu", 1, domain=MS_DOMAIN)
def bias_gelu(ctx, A, B):
    """BiasGelu: Gelu(A + B), B broadcast along the last axis."""
    return _gelu(A + B)


@register("FastGelu", 1, domain=MS_DOMAIN)
def fast_gelu(ctx, X, bias=None):
    """FastGelu: the tanh approximation of Gelu of X (+ bias)."""
    return _gelu(X if bias is None else X + bias, "tanh")


@register("QuickGelu", 1, domain=MS_DOMAIN)
def quick_gelu(ctx, X, *, alpha=1.702):
    """QuickGelu: x * sigmoid(alpha * x)."""
    w = _work(X)
    gate = ACTIVATIONS["Sigmoid"].kernel(w * w.dtype.type(alpha))
    return (w * gate).astype(X.dtype, copy=False)


@register("BiasAdd", 1, domain=MS_DOMAIN)
def bias_add(ctx, X, bias, skip):
    """BiasAdd: X + bias + skip (X and skip (N, S, C), bias (C))."""
    return X + bias + skip


@register("BiasSplitGelu", 1, domain=MS_DOMAIN)
def bias_split_gelu(ctx, X, bias):
    """BiasSplitGelu: (X + bias) split in halves along the last axis, left * Gelu(right)."""
    y = X + bias
    half = y.shape[-1] // 2
    if y.shape[-1] != 2 * half:
        raise _error(ctx, f"input's last dimension {y.shape[-1]} is not even")
    return y[..., :half] * _gelu(y[..., half:])


# ----------------------------------------------------------------------------------------------
# Layer norms: SkipLayerNormalization, SkipSimplifiedLayerNormalization, SimplifiedLayerNormalization,
# EmbedLayerNormalization, and ORT's opset-1 LayerNormalization
# ----------------------------------------------------------------------------------------------

def _skip_sum(ctx, input, skip, bias) -> np.ndarray:
    """input + skip (+ bias): skip is (B, S, H), (1, S, H) or (S, H), broadcast over the batch."""
    if skip.shape[-1] != input.shape[-1] or skip.ndim > input.ndim:
        raise _error(ctx, f"skip of shape {list(skip.shape)} does not match input {list(input.shape)}")
    total = input + skip
    if bias is not None:
        total = total + bias
    return total.astype(input.dtype, copy=False)


def _normalize_last(x: np.ndarray, gamma, beta, epsilon: float, simplified: bool):
    """(y, mean, inv_std) of x normalized over its last axis, statistics in float64 and kept as float32
    (ORT accumulates in double); RMS normalization when ``simplified``."""
    w = x.astype(np.float64)
    if simplified:
        mean = np.zeros((*w.shape[:-1], 1))
        var = np.mean(w * w, axis=-1, keepdims=True)
        centered = w
    else:
        mean = np.mean(w, axis=-1, keepdims=True)
        centered = w - mean
        var = np.mean(centered * centered, axis=-1, keepdims=True)
    inv_std = 1.0 / np.sqrt(var + epsilon)
    y = centered * inv_std * gamma.astype(np.float64)
    if beta is not None:
        y = y + beta.astype(np.float64)
    return y.astype(x.dtype), mean.astype(_F32), inv_std.astype(_F32)


def _skip_norm_outputs(ctx, y, mean, inv_std, total):
    if ctx.num_outputs == 1:
        return y
    return (y, mean, inv_std, total)[:ctx.num_outputs]


@register("SkipLayerNormalization", 1, domain=MS_DOMAIN)
def skip_layer_normalization(ctx, input, skip, gamma, beta=None, bias=None, *, epsilon=1e-12):
    """LayerNorm(input + skip + bias) over the last axis; outputs (output, mean, inv_std_var,
    input_skip_bias_sum), the statistics of shape (B, S, 1)."""
    total = _skip_sum(ctx, input, skip, bias)
    y, mean, inv_std = _normalize_last(total, gamma, beta, float(epsilon), simplified=False)
    return _skip_norm_outputs(ctx, y, mean, inv_std, total)


@register("SkipSimplifiedLayerNormalization", 1, domain=MS_DOMAIN)
def skip_simplified_layer_normalization(ctx, input, skip, gamma, bias=None, *, epsilon=1e-12):
    """RMSNorm(input + skip + bias) over the last axis; outputs (output, mean (zeros: RMS has none),
    inv_std_var, input_skip_bias_sum)."""
    total = _skip_sum(ctx, input, skip, bias)
    y, mean, inv_std = _normalize_last(total, gamma, None, float(epsilon), simplified=True)
    return _skip_norm_outputs(ctx, y, mean, inv_std, total)


@register("SimplifiedLayerNormalization", 1)
def simplified_layer_normalization(ctx, X, scale, *, axis=-1, epsilon=1e-5, stash_type=1):
    """SimplifiedLayerNormalization (ORT's, ONNX domain version 1): RMS normalization over [axis, rank);
    outputs (Y, inv_std_var)."""
    rank = X.ndim
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        raise _error(ctx, f"axis {axis} is out of range for input rank {rank}")
    work = np.float64 if X.dtype == np.float64 or stash_type == 11 else _F32
    x = X.astype(work, copy=False)
    axes = tuple(range(axis, rank))
    inv_std = 1.0 / np.sqrt(np.mean(x * x, axis=axes, keepdims=True) + work(epsilon))
    y = (x * inv_std * scale.astype(work, copy=False)).astype(X.dtype, copy=False)
    return y if ctx.num_outputs == 1 else (y, inv_std.astype(work, copy=False))


@register("EmbedLayerNormalization", 1, domain=MS_DOMAIN)
def embed_layer_normalization(ctx, input_ids, segment_ids, word_embedding, position_embedding,
                              segment_embedding=None, gamma=None, beta=None, mask=None, position_ids=None, *,
                              epsilon=1e-12, mask_index_type=1):
    """LayerNorm(word[input_ids] + position[position_ids or 0..S-1] + segment[segment_ids]); outputs
    (output, mask_index = count of set mask entries per row (zeros without a mask), embedding_sum)."""
    if input_ids.ndim != 2:
        raise _error(ctx, f"input_ids must be 2-D (batch, sequence), got {list(input_ids.shape)}")
    if gamma is None or beta is None:
        raise _error(ctx, "gamma and beta are required")
    batch, seq = input_ids.shape
    check_indices(ctx, input_ids, word_embedding.shape[0], "input_ids", negative_ok=False)
    total = word_embedding[input_ids.astype(np.int64)]
    if position_ids is None:
        positions = np.broadcast_to(np.arange(seq), (batch, seq))
    else:
        positions = np.broadcast_to(np.asarray(position_ids).astype(np.int64), (batch, seq))
    check_indices(ctx, positions, position_embedding.shape[0], "position_ids", negative_ok=False)
    total = total + position_embedding[positions]
    if segment_ids is not None and segment_embedding is not None:
        check_indices(ctx, segment_ids, segment_embedding.shape[0], "segment_ids", negative_ok=False)
        total = total + segment_embedding[segment_ids.astype(np.int64)]
    total = total.astype(word_embedding.dtype, copy=False)
    y, _, _ = _normalize_last(total, gamma, beta, float(epsilon), simplified=False)
    if mask is None:
        mask_index = np.zeros(batch, dtype=np.int32)
    else:
        mask_index = np.count_nonzero(np.asarray(mask).reshape(batch, -1), axis=1).astype(np.int32)
    outs = (y, mask_index, total)
    return outs[:ctx.num_outputs] if ctx.num_outputs > 1 else y


# ----------------------------------------------------------------------------------------------
# Attention: the shared core, Attention, MultiHeadAttention, GroupQueryAttention, RotaryEmbedding
# ----------------------------------------------------------------------------------------------

def _split_heads(x: np.ndarray, heads: int) -> np.ndarray:
    """(B, S, N*H) -> (B, N, S, H)."""
    b, s, d = x.shape
    return x.reshape(b, s, heads, d // heads).transpose(0, 2, 1, 3)


def _merge_heads(x: np.ndarray) -> np.ndarray:
    """(B, N, S, H) -> (B, S, N*H)."""
    b, n, s, h = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, s, n * h)


def _softmax(scores: np.ndarray) -> np.ndarray:
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def sdpa(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, bias: np.ndarray | None = None,
         softcap: float = 0.0, extra_logit: np.ndarray | None = None) -> np.ndarray:
    """softmax(scale * q k^T (softcapped) + bias) v for q (B, N, S, H) and k, v (B, Nkv, T, H) where N is a
    multiple of Nkv (query head n reads kv head n // (N / Nkv)); ``extra_logit`` (broadcast to (B, N, S, 1)) is
    one more logit in each softmax's denominator (smooth softmax, head sinks). Returns (B, N, S, Hv)."""
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k = np.repeat(k, groups, axis=1)
        v = np.repeat(v, groups, axis=1)
    dtype = q.dtype
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * dtype.type(scale)
    if softcap > 0:
        scores = np.tanh(scores / dtype.type(softcap)) * dtype.type(softcap)
    if bias is not None:
        scores = scores + bias.astype(dtype, copy=False)
    if extra_logit is None:
        probs = _softmax(scores)
    else:
        extra = np.broadcast_to(np.asarray(extra_logit, dtype=dtype), (*scores.shape[:-1], 1))
        top = np.maximum(scores.max(axis=-1, keepdims=True), extra)
        e = np.exp(scores - top)
        probs = e / (e.sum(axis=-1, keepdims=True) + np.exp(extra - top))
    return np.matmul(probs.astype(dtype, copy=False), v).astype(dtype, copy=False)


def key_mask(ctx, mask: np.ndarray | None, batch: int, q_len: int, kv_len: int, past_len: int,
              causal: bool, filter_value: float) -> np.ndarray | None:
    """The additive mask ORT builds from ``mask_index``/``key_padding_mask`` and ``unidirectional``: (B, 1, S, T)
    holding 0 where a query may attend, ``filter_value`` where the mask says not and -inf past the causal
    limit; or None. Mask forms: (B) key lengths,
    (2B) end then start positions, (B, T) 0/1, (B, S, T) 0/1, (B, 1, M, M) 0/1 (rows past_len.., columns ..T)."""
    keep = None
    if mask is not None:
        m = np.asarray(mask)
        j = np.arange(kv_len)
        if m.ndim == 1 and m.size == batch:
            keep = (j[None, :] < m[:, None])[:, None, None, :]
        elif m.ndim == 1 and m.size == 2 * batch:
            keep = ((j[None, :] < m[:batch, None]) & (j[None, :] >= m[batch:, None]))[:, None, None, :]
        elif m.ndim == 2 and m.shape == (batch, kv_len):
            keep = (m > 0)[:, None, None, :]
        elif m.ndim == 3 and m.shape == (batch, q_len, kv_len):
            keep = (m > 0)[:, None]
        elif m.ndim == 4 and m.shape[0] == batch and m.shape[1] == 1 and m.shape[2] >= past_len + q_len \
                and m.shape[3] >= kv_len:
            keep = (m[:, :, past_len:past_len + q_len, :kv_len] > 0)
        else:
            raise _error(ctx, f"mask of shape {list(m.shape)} fits none of (B), (2B), (B, T), (B, S, T), "
                              f"(B, 1, M, M) with B={batch}, S={q_len}, T={kv_len}")
    bias = None if keep is None else np.where(keep, _F32(0), _F32(filter_value))
    if causal:
        # ORT leaves the keys after a query out of its softmax altogether (a key-masked key only weighs
        # exp(filter_value) less): a query whose every visible key is masked still attends to those keys.
        causal_keep = (np.arange(kv_len)[None, :] <= np.arange(q_len)[:, None] + past_len)[None, None]
        causal_bias = np.where(causal_keep, _F32(0), _F32(-np.inf))
        bias = causal_bias if bias is None else bias + causal_bias
    return bias


def _with_bias(mask_bias: np.ndarray | None, attention_bias: np.ndarray | None) -> np.ndarray | None:
    if attention_bias is None:
        return mask_bias
    return attention_bias if mask_bias is None else mask_bias + attention_bias


def _attention_core(ctx, qkv: np.ndarray, sizes: tuple[int, int, int], num_heads: int, mask_index, past,
                    attention_bias, scale, unidirectional, mask_filter_value):
    """Attention (and QAttention) after the input projection: qkv (B, S, Dq+Dk+Dv). Returns (output, present)."""
    dq, dk, dv = sizes
    batch, seq = qkv.shape[:2]
    if dq % num_heads or dk % num_heads or dv % num_heads:
        raise _error(ctx, f"qkv_hidden_sizes {list(sizes)} are not multiples of num_heads {num_heads}")
    q = _split_heads(qkv[..., :dq], num_heads)
    k = _split_heads(qkv[..., dq:dq + dk], num_heads)
    v = _split_heads(qkv[..., dq + dk:], num_heads)
    past_len = 0
    if past is not None:
        if past.ndim != 5 or past.shape[0] != 2:
            raise _error(ctx, f"past must be (2, B, N, P, H), got {list(past.shape)}")
        past_len = past.shape[3]
        k = np.concatenate([past[0].astype(k.dtype, copy=False), k], axis=2)
        v = np.concatenate([past[1].astype(v.dtype, copy=False), v], axis=2)
    kv_len = k.shape[2]
    head = dq // num_heads
    scale = 1.0 / math.sqrt(head) if not scale else float(scale)
    filter_value = _MASK_FILTER if mask_filter_value is None else float(mask_filter_value)
    bias = key_mask(ctx, mask_index, batch, seq, kv_len, past_len, bool(unidirectional), filter_value)
    bias = _with_bias(bias, attention_bias)
    out = _merge_heads(sdpa(q, k, v, scale, bias))
    if ctx.num_outputs > 1 and ctx.output_wanted(1):
        return out, np.stack([k, v])
    return (out, None) if ctx.num_outputs > 1 else out


@register("Attention", 1, domain=MS_DOMAIN)
def attention(ctx, input, weights, bias=None, mask_index=None, past=None, attention_bias=None,
              past_sequence_length=None, *, num_heads=None, qkv_hidden_sizes=None, unidirectional=0, scale=None,
              mask_filter_value=None, do_rotary=0, rotary_embedding_dim=0, past_present_share_buffer=0):
    """Multi-head self attention with packed QKV weights (input_hidden, Dq+Dk+Dv): QKV = input W + bias, then
    softmax(scale Q K^T + mask + attention_bias) V per head; ``past`` (2, B, N, P, H) is concatenated before
    the new keys and values, ``present`` is the result. Declines do_rotary and the shared past/present buffer."""
    if not num_heads:
        raise _error(ctx, "the num_heads attribute is required")
    if do_rotary:
        raise _error(ctx, "do_rotary=1 is not supported (apply a RotaryEmbedding node before it instead)")
    if past_present_share_buffer or past_sequence_length is not None:
        raise _error(ctx, "a past/present buffer shared in place (past_present_share_buffer, "
                          "past_sequence_length) is not supported")
    total = weights.shape[1]
    sizes = tuple(int(s) for s in qkv_hidden_sizes) if qkv_hidden_sizes else (total // 3,) * 3
    if len(sizes) != 3 or sum(sizes) != total:
        raise _error(ctx, f"qkv_hidden_sizes {list(sizes)} do not add up to the weights' {total} columns")
    w = _work(input)
    qkv = np.matmul(w, weights.astype(w.dtype, copy=False))
    if bias is not None:
        qkv += bias.astype(w.dtype, copy=False)
    result = _attention_core(ctx, qkv, sizes, int(num_heads), mask_index, past, attention_bias, scale,
                             unidirectional, mask_filter_value)
    if isinstance(result, tuple):
        return tuple(None if r is None else r.astype(input.dtype, copy=False) for r in result)
    return result.astype(input.dtype, copy=False)


@register_flops("MultiHeadAttention", "GroupQueryAttention", "QAttention")
def _ms_attention_flops(layer, in_shapes, out_shapes) -> int:
    """QAttention's input projection (where its weight's shape is known) and the two attention products,
    counted from the output (B, S, D) and the present keys' length where known (else S)."""
    y = out_shapes[0] if out_shapes else None
    x = in_shapes[0] if in_shapes else None
    if y is None or x is None or len(y) != 3:
        return 0
    batch, seq, hidden = y
    flops = 0
    if layer.op_type == "QAttention" and len(in_shapes) > 1 and in_shapes[1] is not None:
        flops += 2 * batch * seq * x[-1] * in_shapes[1][-1]
    kv_len = seq
    if len(out_shapes) > 1 and out_shapes[1] is not None and len(out_shapes[1]) >= 4:
        kv_len = out_shapes[1][-2]
    return flops + 4 * batch * seq * kv_len * hidden


def _mha_inputs(ctx, query, key, value, bias, num_heads: int):
    """(q, k, v) as (B, N, S, H) from MultiHeadAttention's forms: separate (B, S, D) inputs, key/value already
    (B, N, L, H), packed KV key (B, L, N, 2, H), packed QKV query (B, S, N, 3, H); bias (Dq + Dk + Dv) is
    added to the 3-D forms' projections."""
    if query.ndim == 5:  # packed QKV
        if key is not None or value is not None:
            raise _error(ctx, "a packed (B, S, N, 3, H) query takes no key or value")
        if bias is not None:
            n, h = query.shape[2], query.shape[4]
            query = query + bias.reshape(3, n, h).transpose(1, 0, 2)
        q, k, v = (query[:, :, :, i].transpose(0, 2, 1, 3) for i in range(3))
        return q, k, v
    if query.ndim != 3:
        raise _error(ctx, f"query must be (B, S, D) or (B, S, N, 3, H), got {list(query.shape)}")
    dq = query.shape[2]
    if bias is not None:
        query = query + bias[:dq]
    q = _split_heads(query, num_heads)
    if key is None:
        raise _error(ctx, "key is required unless the query packs Q, K and V")
    if key.ndim == 5:  # packed KV
        if value is not None:
            raise _error(ctx, "a packed (B, L, N, 2, H) key takes no value")
        if bias is not None:
            n, h = key.shape[2], key.shape[4]
            key = key + bias[dq:].reshape(2, n, h).transpose(1, 0, 2)
        return q, key[:, :, :, 0].transpose(0, 2, 1, 3), key[:, :, :, 1].transpose(0, 2, 1, 3)
    if value is None:
        raise _error(ctx, "value is required with a separate key")
    if key.ndim == 4:  # already (B, N, L, H): no bias is added to them
        return q, key, value
    dk = key.shape[2]
    if bias is not None:
        key = key + bias[dq:dq + dk]
        value = value + bias[dq + dk:]
    return q, _split_heads(key, num_heads), _split_heads(value, num_heads)


@register("MultiHeadAttention", 1, domain=MS_DOMAIN)
def multi_head_attention(ctx, query, key=None, value=None, bias=None, key_padding_mask=None, attention_bias=None,
                         past_key=None, past_value=None, past_sequence_length=None, cache_indirection=None, *,
                         num_heads=None, scale=None, mask_filter_value=None, unidirectional=0):
    """Multi-head attention on projected Q, K, V (separate, packed KV or packed QKV), optional bias,
    key_padding_mask ((B) lengths or (B, T) 0/1), attention_bias (B|1, N|1, S, T) and a (B, N, P, H) past;
    outputs (output, present_key, present_value, qk)."""
    if not num_heads:
        raise _error(ctx, "the num_heads attribute is required")
    if past_sequence_length is not None or cache_indirection is not None:
        raise _error(ctx, "past_sequence_length and cache_indirection (beam search buffers) are not supported")
    dtype = query.dtype
    q, k, v = _mha_inputs(ctx, _work(query), key if key is None else _work(key),
                          value if value is None else _work(value), bias, int(num_heads))
    past_len = 0
    if past_key is not None and past_value is not None:
        past_len = past_key.shape[2]
        k = np.concatenate([past_key.astype(k.dtype, copy=False), k], axis=2)
        v = np.concatenate([past_value.astype(v.dtype, copy=False), v], axis=2)
    batch, _, seq, head = q.shape
    kv_len = k.shape[2]
    scale = 1.0 / math.sqrt(head) if not scale else float(scale)
    filter_value = _MASK_FILTER if mask_filter_value is None else float(mask_filter_value)
    mask_bias = key_mask(ctx, key_padding_mask, batch, seq, kv_len, past_len, bool(unidirectional), filter_value)
    total_bias = _with_bias(mask_bias, attention_bias)
    out = _merge_heads(sdpa(q, k, v, scale, total_bias)).astype(dtype, copy=False)
    if ctx.num_outputs == 1:
        return out
    outs: list[Any] = [out, k.astype(dtype, copy=False), v.astype(dtype, copy=False)]
    if ctx.num_outputs > 3:
        scores = np.matmul(q, np.swapaxes(k, -1, -2)) * q.dtype.type(scale)
        outs.append(scores.astype(dtype, copy=False))
    return tuple(outs[:ctx.num_outputs])


def _rotate(ctx, x: np.ndarray, positions: np.ndarray, cos_cache, sin_cache, interleaved: int) -> np.ndarray:
    """RotaryEmbedding of x (B, N, S, H) at positions (B, S) (the ONNX kernel's 4-D form)."""
    rot_dim = 2 * cos_cache.shape[1]
    return onnx_attention.rotary_embedding(ctx, x, cos_cache, sin_cache, positions, interleaved=interleaved,
                                           rotary_embedding_dim=rot_dim)


@register("GroupQueryAttention", 1, domain=MS_DOMAIN)
def group_query_attention(ctx, query, key=None, value=None, past_key=None, past_value=None, seqlens_k=None,
                          total_sequence_length=None, cos_cache=None, sin_cache=None, position_ids=None,
                          attention_bias=None, head_sink=None, k_scale=None, v_scale=None, q_norm_weight=None,
                          k_norm_weight=None, query_seqlens=None, *, num_heads=None, kv_num_heads=None, scale=None,
                          softcap=0.0, local_window_size=-1, do_rotary=0, rotary_interleaved=0, smooth_softmax=-1,
                          qk_output=0, causal=1, sliding_window_cache=0, kv_cache_bit_width=0,
                          k_quant_type="NONE", v_quant_type="NONE", qk_norm_epsilon=1e-6, q_norm_epsilon=None,
                          k_norm_epsilon=None):
    """Grouped-query causal attention with a KV cache: batch b holds seqlens_k[b] + 1 valid tokens in all, the
    last S of them new (a first prompt: all of them, right-padded to S); the new keys and values go after the
    first seqlens_k[b] + 1 - S cached ones in present (B, Nkv, max(P, total_sequence_length), H). Optional
    rotary embedding of Q and K (do_rotary), packed QKV, attention_bias, softcap, local window, smooth softmax
    and head sinks. Declines quantized caches and Q/K normalization."""
    if not num_heads or not kv_num_heads:
        raise _error(ctx, "the num_heads and kv_num_heads attributes are required")
    if any(t is not None for t in (k_scale, v_scale, q_norm_weight, k_norm_weight, query_seqlens)) \
            or int(kv_cache_bit_width or 0):
        raise _error(ctx, "quantized KV caches, Q/K normalization and query_seqlens are not supported")
    if seqlens_k is None or total_sequence_length is None:
        raise _error(ctx, "seqlens_k and total_sequence_length are required")
    n, nkv = int(num_heads), int(kv_num_heads)
    dtype = query.dtype
    x = _work(query)
    if key is None:  # packed QKV (B, S, (N + 2 Nkv) H)
        head = x.shape[2] // (n + 2 * nkv)
        q, k, v = np.split(x, [n * head, (n + nkv) * head], axis=2)
    else:
        q, k, v = x, _work(key), _work(value)
        head = q.shape[2] // n
    batch, seq = q.shape[:2]
    q = _split_heads(q, n)
    k = _split_heads(k, nkv)
    v = _split_heads(v, nkv)
    lens = np.asarray(seqlens_k).astype(np.int64).reshape(-1) + 1  # valid tokens of each batch, new ones included
    total = int(_scalar(total_sequence_length, np.int64))
    past_len = 0 if past_key is None else past_key.shape[2]
    first_prompt = past_key is None or (past_len == 0) or (seq == total and seq > 1)
    starts = np.zeros(batch, dtype=np.int64) if first_prompt else lens - seq  # where the new tokens go
    if np.any(starts < 0) or (np.any(starts + seq > max(past_len, total)) and not first_prompt):
        raise _error(ctx, f"seqlens_k {list(lens - 1)} do not fit {seq} new tokens after a past of {past_len}")
    if do_rotary:
        if cos_cache is None or sin_cache is None:
            raise _error(ctx, "do_rotary needs cos_cache and sin_cache")
        if position_ids is not None:
            positions = np.asarray(position_ids).astype(np.int64).reshape(batch, seq)
        else:
            positions = starts[:, None] + np.arange(seq)[None, :]
        q = _rotate(ctx, q, positions, cos_cache, sin_cache, rotary_interleaved)
        k = _rotate(ctx, k, positions, cos_cache, sin_cache, rotary_interleaved)
    present_len = max(past_len, total)
    present_k = np.zeros((batch, nkv, present_len, head), dtype=q.dtype)
    present_v = np.zeros_like(present_k)
    for b in range(batch):
        s0 = int(starts[b])
        if past_key is not None and s0:
            present_k[b, :, :s0] = past_key[b, :, :s0]
            present_v[b, :, :s0] = past_value[b, :, :s0]
        present_k[b, :, s0:s0 + seq] = k[b]
        present_v[b, :, s0:s0 + seq] = v[b]
    scale = 1.0 / math.sqrt(head) if not scale else float(scale)
    out = np.zeros((batch, n, seq, head), dtype=q.dtype)
    window = int(local_window_size)
    for b in range(batch):
        kv_len = int(lens[b]) if not first_prompt else min(int(lens[b]), seq)
        pos = int(starts[b]) + np.arange(seq)[:, None]  # (S, 1) absolute positions of the queries
        j = np.arange(kv_len)[None, :]
        keep = j < kv_len
        if causal:
            keep = keep & (j <= pos)
        if window >= 0:
            keep = keep & (j > pos - window)  # the window counts the query's own key
        bias = np.where(keep, _F32(0), _F32(-np.inf))[None, None]
        if attention_bias is not None:
            ab = np.asarray(attention_bias)
            bias = bias + ab[b if ab.shape[0] > 1 else 0][None, :, :, :kv_len]
        extra = None
        if head_sink is not None:
            extra = np.asarray(head_sink, dtype=q.dtype).reshape(1, n, 1, 1)
        elif int(smooth_softmax) == 1:
            extra = np.zeros((1, 1, 1, 1), dtype=q.dtype)
        out[b:b + 1] = sdpa(q[b:b + 1], present_k[b:b + 1, :, :kv_len], present_v[b:b + 1, :, :kv_len], scale,
                            bias, float(softcap or 0.0), extra)
    y = _merge_heads(out).astype(dtype, copy=False)
    outs = (y, present_k.astype(dtype, copy=False), present_v.astype(dtype, copy=False))
    if ctx.num_outputs > 3:
        raise _error(ctx, "the output_qk output is not supported")
    return outs[:ctx.num_outputs] if ctx.num_outputs > 1 else y


@register("RotaryEmbedding", 1, domain=MS_DOMAIN)
def rotary_embedding(ctx, input, position_ids, cos_cache, sin_cache, *, interleaved=0, num_heads=0,
                     rotary_embedding_dim=0, is_packed_batching=0, scale=1.0):
    """ORT's RotaryEmbedding: input (B, S, D) or (B, N, S, H); position_ids (1) (the first position, the
    others following it) or (B, S); caches (max_position, rotary_dim / 2)."""
    if is_packed_batching:
        raise _error(ctx, "is_packed_batching is not supported")
    if input.ndim not in (3, 4):
        raise _error(ctx, f"input must be (B, S, D) or (B, N, S, H), got {list(input.shape)}")
    batch, seq = input.shape[0], input.shape[-2] if input.ndim == 4 else input.shape[1]
    ids = np.asarray(position_ids).astype(np.int64)
    if ids.size == 1:
        ids = np.broadcast_to(ids.reshape(()) + np.arange(seq), (batch, seq))
    elif ids.shape != (batch, seq):
        raise _error(ctx, f"position_ids of shape {list(ids.shape)} is neither (1) nor (B, S) = {[batch, seq]}")
    heads = int(num_heads or 0)
    rot_dim = int(rotary_embedding_dim or 0)
    if input.ndim == 3 and not heads:
        heads = input.shape[2] // (2 * cos_cache.shape[1])  # the caches span a whole head
    x = _work(input)
    y = onnx_attention.rotary_embedding(ctx, x, _work(cos_cache), _work(sin_cache), ids, interleaved=interleaved,
                                        num_heads=heads, rotary_embedding_dim=rot_dim or 2 * cos_cache.shape[1])
    return y.astype(input.dtype, copy=False)


# ----------------------------------------------------------------------------------------------
# Graph-optimizer fusions: FusedConv, NhwcConv, NhwcFusedConv, FusedGemm, FusedMatMul
# ----------------------------------------------------------------------------------------------

# The attributes of each activation a fused op may name, in the order of FusedConv's activation_params.
_ACTIVATION_PARAMS = {"LeakyRelu": ("alpha",), "Clip": ("min", "max"), "HardSigmoid": ("alpha", "beta"),
                      "Elu": ("alpha",), "ThresholdedRelu": ("alpha",), "Selu": ("alpha", "gamma"),
                      "Celu": ("alpha",), "ScaledTanh": ("alpha", "beta"), "Affine": ("alpha", "beta"),
                      "Softplus": (), "Relu": (), "Sigmoid": (), "Tanh": (), "Gelu": ()}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def fused_activation_of(activation: Any, params: dict[str, float]) -> tuple[str, dict[str, Any]] | None:
    """(op type, attributes) of a fused op's ``activation`` (None where it has none), the way a layer's
    ``fused_activation`` holds it; raises ValueError for an activation not in ACTIVATIONS."""
    if activation is None or _text(activation) in ("", "Identity"):
        return None
    name = _text(activation)
    if name not in ACTIVATIONS or name not in _ACTIVATION_PARAMS:
        raise ValueError(f"unsupported fused activation '{name}'")
    return name, {k: v for k, v in params.items() if k in ACTIVATIONS[name].attrs}


def conv_activation(activation: Any, activation_params: Any) -> tuple[str, dict[str, Any]] | None:
    """FusedConv's ``activation`` and ``activation_params`` as (op type, attributes), or None."""
    name = None if activation is None else _text(activation)
    values = [float(p) for p in (activation_params or [])]
    return fused_activation_of(name, dict(zip(_ACTIVATION_PARAMS.get(name or "", ()), values, strict=False)))


def gemm_activation(activation: Any, alpha: Any, beta: Any, gamma: Any) -> tuple[str, dict[str, Any]] | None:
    """FusedGemm's ``activation`` and ``activation_alpha/beta/gamma`` as (op type, attributes), or None."""
    params = {k: float(v) for k, v in (("alpha", alpha), ("beta", beta), ("gamma", gamma)) if v is not None}
    return fused_activation_of(activation, params)


def _apply_activation(ctx, y: np.ndarray, act: tuple[str, dict[str, Any]] | None) -> np.ndarray:
    if act is None:
        return y
    name, attrs = act
    record = ACTIVATIONS[name]
    values = {**record.attrs, **attrs}
    return record.kernel(y, **values).astype(y.dtype, copy=False)


def _conv_plain(ctx, X, W, B, Z, attrs: dict[str, Any]) -> np.ndarray:
    """Conv(X, W, B) (+ Z) with the ONNX kernels (the residual FusedConv of this engine where Z is given)."""
    if Z is None:
        return onnx_conv.conv(ctx, X, W, B, **attrs)
    return onnx_conv.fused_conv(ctx, X, W, B, Z, **attrs)


@register("FusedConv", 1, domain=MS_DOMAIN)
def fused_conv(ctx, X, W, B=None, Z=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
               pads=None, strides=None, activation=None, activation_params=None):
    """ORT's FusedConv: activation(Conv(X, W, B) + Z)."""
    attrs = {"auto_pad": auto_pad, "dilations": dilations, "group": group, "kernel_shape": kernel_shape,
             "pads": pads, "strides": strides}
    try:
        act = conv_activation(activation, activation_params)
    except ValueError as exc:
        raise _error(ctx, str(exc)) from None
    return _apply_activation(ctx, _conv_plain(ctx, X, W, B, Z, attrs), act)


def _nhwc(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(x, -1, 1))


@register("NhwcConv", 1, domain=MS_DOMAIN)
def nhwc_conv(ctx, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
              strides=None):
    """Conv on channels-last X (N, *spatial, C) with W (M, C/group, *kernel); Y channels-last."""
    y = onnx_conv.conv(ctx, _nhwc(X), W, B, auto_pad=auto_pad, dilations=dilations, group=group,
                       kernel_shape=kernel_shape, pads=pads, strides=strides)
    return np.ascontiguousarray(np.moveaxis(y, 1, -1))


@register("NhwcFusedConv", 1, domain=MS_DOMAIN)
def nhwc_fused_conv(ctx, X, W, B=None, Z=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                    pads=None, strides=None, activation=None, activation_params=None):
    """FusedConv on channels-last X and Z (N, *spatial, C); Y channels-last."""
    y = fused_conv(ctx, _nhwc(X), W, B, None if Z is None else _nhwc(Z), auto_pad=auto_pad, dilations=dilations,
                   group=group, kernel_shape=kernel_shape, pads=pads, strides=strides, activation=activation,
                   activation_params=activation_params)
    return np.ascontiguousarray(np.moveaxis(y, 1, -1))


@register_flops("NhwcConv", "NhwcFusedConv")
def _nhwc_conv_flops(layer, in_shapes, out_shapes) -> int:
    """The convolution's FLOPs, counted in the channels-first layout."""
    x, y = in_shapes[0] if in_shapes else None, out_shapes[0] if out_shapes else None
    if x is None or y is None:
        return 0
    first = [(s[0], s[-1], *s[1:-1]) for s in (x, y)]
    return onnx_conv.conv_flops(layer, [first[0], *in_shapes[1:3]], [first[1]])


@register("FusedGemm", 1, domain=MS_DOMAIN)
def fused_gemm(ctx, A, B, C=None, *, alpha=1.0, beta=1.0, transA=0, transB=0, activation=None,
               activation_alpha=None, activation_beta=None, activation_gamma=None):
    """activation(Gemm(A, B, C))."""
    try:
        act = gemm_activation(activation, activation_alpha, activation_beta, activation_gamma)
    except ValueError as exc:
        raise _error(ctx, str(exc)) from None
    y = onnx_matmul.gemm(ctx, A, B, C, alpha=alpha, beta=beta, transA=transA, transB=transB)
    return _apply_activation(ctx, y, act)


def fused_matmul_operand(x: np.ndarray, trans: int, trans_batch: int) -> np.ndarray:
    """One FusedMatMul operand as MatMul takes it: ``trans_batch`` moves the first axis to just before the
    last ((d0, d1, ..., dk, n) -> (d1, ..., dk, d0, n)), then ``trans`` swaps the last two axes."""
    if x.ndim >= 3 and trans_batch:
        x = np.moveaxis(x, 0, -2)
    if trans and x.ndim >= 2:
        x = np.swapaxes(x, -1, -2)
    return x


@register("FusedMatMul", 1, domain=MS_DOMAIN)
def fused_matmul(ctx, A, B, *, alpha=1.0, transA=0, transB=0, transBatchA=0, transBatchB=0):
    """alpha * op(A) @ op(B), op transposing the batch and the matrix axes as the attributes say."""
    a = fused_matmul_operand(A, transA, transBatchA)
    b = fused_matmul_operand(B, transB, transBatchB)
    y = onnx_matmul.matmul(ctx, np.ascontiguousarray(a), np.ascontiguousarray(b))
    if alpha != 1.0:
        y = (y * y.dtype.type(alpha)).astype(y.dtype, copy=False)
    return y


@register_flops("FusedMatMul")
def _fused_matmul_flops(layer, in_shapes, out_shapes) -> int:
    a, y = in_shapes[0] if in_shapes else None, out_shapes[0] if out_shapes else None
    if a is None or y is None:
        return 0
    trans = layer.attrs.get("transA", 0)
    k = a[-2] if trans else a[-1]
    if layer.attrs.get("transBatchA", 0) and len(a) >= 3:
        k = a[0] if trans else a[-1]
    return 2 * math.prod(y) * k


__all__ = ["MS_DOMAIN", "conv_activation", "fused_activation_of", "fused_matmul_operand", "gemm_activation",
           "key_mask", "sdpa"]
