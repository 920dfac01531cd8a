"""Numpy kernels of ONNX Runtime's float ``com.microsoft`` attention operators, the transformer optimizer's
fusions: Attention, MultiHeadAttention, GroupQueryAttention and RotaryEmbedding; their FLOP counts (QAttention's
included); and the attention core they share (``sdpa``, ``key_mask``, ``attention_core``, ``softmax_last_axis``),
which contrib_quant.py's QAttention and contrib_gpu.py's programs reuse. The other float contrib operators, and the
helpers all contrib modules share, are contrib.py's.

Semantics are what ONNX Runtime's CPU execution provider computes, since these models are made and checked
with it (where ORT has no CPU kernel, the packed MultiHeadAttention forms, the contrib spec's). RotaryEmbedding
reuses the ONNX RotaryEmbedding kernel (attention.py). Their GPU programs are contrib_gpu.py's.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from wgsentis.ops import attention as onnx_attention
from wgsentis.ops.contrib import (F32, MS_DOMAIN, expect_shape, first_scalar, layer_error, refuse_shape, shape_of,
                                  working_float)
from wgsentis.ops.registry import register, register_flops

# ORT's default additive mask value for masked-out keys (Attention, MultiHeadAttention, QAttention).
_MASK_FILTER = -10000.0


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


def softmax_last_axis(scores: np.ndarray) -> np.ndarray:
    """The softmax of ``scores`` along their last axis."""
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
        probs = softmax_last_axis(scores)
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
            raise layer_error(ctx, f"mask of shape {list(m.shape)} fits none of (B), (2B), (B, T), (B, S, T), "
                                   f"(B, 1, M, M) with B={batch}, S={q_len}, T={kv_len}")
    bias = None if keep is None else np.where(keep, F32(0), F32(filter_value))
    if causal:
        # ORT leaves the keys after a query out of its softmax altogether (a key-masked key only weighs
        # exp(filter_value) less): a query whose every visible key is masked still attends to those keys.
        causal_keep = (np.arange(kv_len)[None, :] <= np.arange(q_len)[:, None] + past_len)[None, None]
        causal_bias = np.where(causal_keep, F32(0), F32(-np.inf))
        bias = causal_bias if bias is None else bias + causal_bias
    return bias


def _with_bias(mask_bias: np.ndarray | None, attention_bias: np.ndarray | None) -> np.ndarray | None:
    if attention_bias is None:
        return mask_bias
    return attention_bias if mask_bias is None else mask_bias + attention_bias


def attention_core(ctx, qkv: np.ndarray, sizes: tuple[int, int, int], num_heads: int, mask_index, past,
                   attention_bias, scale, unidirectional, mask_filter_value):
    """Attention (and QAttention) after the input projection: qkv (B, S, Dq+Dk+Dv). Returns (output, present)."""
    dq, dk, dv = sizes
    batch, seq = qkv.shape[:2]
    if dq % num_heads or dk % num_heads or dv % num_heads:
        raise layer_error(ctx, f"qkv_hidden_sizes {list(sizes)} are not multiples of num_heads {num_heads}")
    q = _split_heads(qkv[..., :dq], num_heads)
    k = _split_heads(qkv[..., dq:dq + dk], num_heads)
    v = _split_heads(qkv[..., dq + dk:], num_heads)
    past_len = 0
    if past is not None:
        if past.ndim != 5 or past.shape[0] != 2:
            raise layer_error(ctx, f"past must be (2, B, N, P, H), got {list(past.shape)}")
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
        raise layer_error(ctx, "the num_heads attribute is required")
    if do_rotary:
        raise layer_error(ctx, "do_rotary=1 is not supported (apply a RotaryEmbedding node before it instead)")
    if past_present_share_buffer or past_sequence_length is not None:
        raise layer_error(ctx, "a past/present buffer shared in place (past_present_share_buffer, "
                               "past_sequence_length) is not supported")
    total = weights.shape[1]
    sizes = tuple(int(s) for s in qkv_hidden_sizes) if qkv_hidden_sizes else (total // 3,) * 3
    if len(sizes) != 3 or sum(sizes) != total:
        raise layer_error(ctx, f"qkv_hidden_sizes {list(sizes)} do not add up to the weights' {total} columns")
    w = working_float(input)
    qkv = np.matmul(w, weights.astype(w.dtype, copy=False))
    if bias is not None:
        qkv += bias.astype(w.dtype, copy=False)
    result = attention_core(ctx, qkv, sizes, int(num_heads), mask_index, past, attention_bias, scale,
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


def _attention_bias_check(ctx, what: str, attention_bias, batch: int, heads: int, seq: int, kv_len: int) -> None:
    """attention_bias (B or 1, N or 1, S, T), checked before it is added to the scores."""
    expect_shape(ctx, what, attention_bias, f"(B or 1, N or 1, S, T) with B = {batch}, N = {heads}, S = {seq}, "
                 f"T = {kv_len}", None, None, seq, kv_len)
    shape = shape_of(attention_bias)
    for k, (size, full) in enumerate(((shape[0], batch), (shape[1], heads))):
        if size not in (1, full):
            raise refuse_shape(ctx, what, attention_bias, f"dim {k} is {size}, expected 1 or {full}")


def check_mha(ctx, query, key, value, bias, attention_bias, past_key, past_value, num_heads: int) -> None:
    """MultiHeadAttention's inputs checked before any arithmetic (here and in its GPU program): a (B, S, D) query
    with separate (B, L, D) key and (B, L, Dv) value, or (B, N, L, H) key and value, or a packed (B, L, N, 2, H)
    key; or a packed (B, S, N, 3, H) query; bias (Dq + Dk + Dv); past (B, N, P, H); D a multiple of num_heads."""
    n = int(num_heads)
    q_shape = shape_of(query)
    if len(q_shape) == 5:  # packed QKV
        expect_shape(ctx, "input 0 (query)", query, f"(B, S, N, 3, H) with N = {n}", None, None, n, 3, None)
        batch, seq, head = q_shape[0], q_shape[1], q_shape[4]
        kv_len, widths = seq, (n * head,) * 3
    elif len(q_shape) == 3:
        batch, seq, dq = q_shape
        if dq % n:
            raise refuse_shape(ctx, "input 0 (query)", query, f"dim 2 (D) {dq} is not a multiple of num_heads {n}")
        head = dq // n
        if key is None:
            raise layer_error(ctx, "key is required unless the query packs Q, K and V")
        k_shape = shape_of(key)
        if len(k_shape) == 5:
            expect_shape(ctx, "input 1 (key)", key, f"(B, L, N, 2, H) with B = {batch}, N = {n}, H = {head}",
                         batch, None, n, 2, head)
            kv_len, widths = k_shape[1], (dq, dq, dq)
        elif len(k_shape) == 4:
            expect_shape(ctx, "input 1 (key)", key, f"(B, N, L, H) with B = {batch}, N = {n}, H = {head}",
                         batch, n, None, head)
            kv_len = k_shape[2]
            if value is None:
                raise layer_error(ctx, "value is required with a separate key")
            expect_shape(ctx, "input 2 (value)", value, f"(B, N, L, Hv) with B = {batch}, N = {n}, L = {kv_len}",
                         batch, n, kv_len, None)
            widths = (dq, dq, n * shape_of(value)[3])
        else:
            expect_shape(ctx, "input 1 (key)", key, f"(B, L, D) with B = {batch}, D = {dq} (the query's)",
                         batch, None, dq)
            kv_len = k_shape[1]
            if value is None:
                raise layer_error(ctx, "value is required with a separate key")
            expect_shape(ctx, "input 2 (value)", value, f"(B, L, Dv) with B = {batch}, L = {kv_len}",
                         batch, kv_len, None)
            dv = shape_of(value)[2]
            if dv % n:
                raise refuse_shape(ctx, "input 2 (value)", value, f"dim 2 (Dv) {dv} is not a multiple of num_heads {n}")
            widths = (dq, dq, dv)
    else:
        raise refuse_shape(ctx, "input 0 (query)", query, "must be (B, S, D) or a packed (B, S, N, 3, H)")
    if bias is not None:
        expect_shape(ctx, "input 3 (bias)", bias, f"(Dq + Dk + Dv) with Dq + Dk + Dv = {sum(widths)}", sum(widths))
    past_len = 0
    for k, past in ((6, past_key), (7, past_value)):
        if past is not None:
            name = "past_key" if k == 6 else "past_value"
            expect_shape(ctx, f"input {k} ({name})", past, f"(B, N, P, H) with B = {batch}, N = {n}, H = {head}",
                         batch, n, None, head if k == 6 else None)
            past_len = shape_of(past)[2]
    if (past_key is None) != (past_value is None):
        raise layer_error(ctx, "past_key and past_value come together")
    if past_key is not None and shape_of(past_key)[2] != shape_of(past_value)[2]:
        raise refuse_shape(ctx, "input 7 (past_value)", past_value,
                           f"its dim 2 (P) differs from past_key's {shape_of(past_key)[2]}")
    if attention_bias is not None:
        _attention_bias_check(ctx, "input 5 (attention_bias)", attention_bias, batch, n, seq, past_len + kv_len)


def _mha_inputs(ctx, query, key, value, bias, num_heads: int):
    """(q, k, v) as (B, N, S, H) from MultiHeadAttention's forms: separate (B, S, D) inputs, key/value already
    (B, N, L, H), packed KV key (B, L, N, 2, H), packed QKV query (B, S, N, 3, H); bias (Dq + Dk + Dv) is
    added to the 3-D forms' projections."""
    if query.ndim == 5:  # packed QKV
        if key is not None or value is not None:
            raise layer_error(ctx, "a packed (B, S, N, 3, H) query takes no key or value")
        if bias is not None:
            n, h = query.shape[2], query.shape[4]
            query = query + bias.reshape(3, n, h).transpose(1, 0, 2)
        q, k, v = (query[:, :, :, i].transpose(0, 2, 1, 3) for i in range(3))
        return q, k, v
    if query.ndim != 3:
        raise layer_error(ctx, f"query must be (B, S, D) or (B, S, N, 3, H), got {list(query.shape)}")
    dq = query.shape[2]
    if bias is not None:
        query = query + bias[:dq]
    q = _split_heads(query, num_heads)
    if key is None:
        raise layer_error(ctx, "key is required unless the query packs Q, K and V")
    if key.ndim == 5:  # packed KV
        if value is not None:
            raise layer_error(ctx, "a packed (B, L, N, 2, H) key takes no value")
        if bias is not None:
            n, h = key.shape[2], key.shape[4]
            key = key + bias[dq:].reshape(2, n, h).transpose(1, 0, 2)
        return q, key[:, :, :, 0].transpose(0, 2, 1, 3), key[:, :, :, 1].transpose(0, 2, 1, 3)
    if value is None:
        raise layer_error(ctx, "value is required with a separate key")
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
        raise layer_error(ctx, "the num_heads attribute is required")
    if past_sequence_length is not None or cache_indirection is not None:
        raise layer_error(ctx, "past_sequence_length and cache_indirection (beam search buffers) are not supported")
    check_mha(ctx, query, key, value, bias, attention_bias, past_key, past_value, int(num_heads))
    dtype = query.dtype
    q, k, v = _mha_inputs(ctx, working_float(query), key if key is None else working_float(key),
                          value if value is None else working_float(value), bias, int(num_heads))
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


def check_gqa(ctx, query, key, value, past_key, past_value, seqlens_k, attention_bias, n: int, nkv: int) -> int:
    """GroupQueryAttention's inputs checked before any arithmetic: query (B, S, D) (or packed QKV
    (B, S, (N + 2 Nkv) H)), key and value (B, S, Nkv H), past (B, Nkv, P, H), seqlens_k (B), num_heads a multiple
    of kv_num_heads. Returns the head size."""
    if n <= 0 or nkv <= 0 or n % nkv:
        raise layer_error(ctx, f"num_heads {n} is not a positive multiple of kv_num_heads {nkv}")
    expect_shape(ctx, "input 0 (query)", query, "(B, S, D)", None, None, None)
    batch, seq, width = shape_of(query)
    if key is None:
        if width % (n + 2 * nkv):
            raise refuse_shape(ctx, "input 0 (query)", query, f"dim 2 {width} of packed QKV is not a multiple of "
                               f"num_heads + 2 x kv_num_heads = {n + 2 * nkv}")
        head = width // (n + 2 * nkv)
    else:
        if width % n:
            raise refuse_shape(ctx, "input 0 (query)", query, f"dim 2 (D) {width} is not a multiple of num_heads {n}")
        head = width // n
        for k, (name, x) in enumerate((("key", key), ("value", value)), start=1):
            if x is None:
                raise layer_error(ctx, f"{name} is required with a separate key")
            expect_shape(ctx, f"input {k} ({name})", x, f"(B, S, Nkv x H) with B = {batch}, S = {seq}, "
                         f"Nkv x H = {nkv * head}", batch, seq, nkv * head)
    for k, (name, past) in ((3, ("past_key", past_key)), (4, ("past_value", past_value))):
        if past is not None:
            expect_shape(ctx, f"input {k} ({name})", past, f"(B, Nkv, P, H) with B = {batch}, Nkv = {nkv}, "
                         f"H = {head}", batch, nkv, None, head)
    if (past_key is None) != (past_value is None):
        raise layer_error(ctx, "past_key and past_value come together")
    if seqlens_k is not None and int(np.size(seqlens_k)) != batch:
        raise refuse_shape(ctx, "input 5 (seqlens_k)", seqlens_k, f"must hold one length per batch, {batch}")
    if attention_bias is not None:
        expect_shape(ctx, "input 10 (attention_bias)", attention_bias, f"(B or 1, N or 1, S, T) with S = {seq}",
                     None, None, seq, None)
        ab = shape_of(attention_bias)
        if ab[0] not in (1, batch) or ab[1] not in (1, n):
            raise refuse_shape(ctx, "input 10 (attention_bias)", attention_bias,
                               f"dims 0 and 1 must be 1 or B = {batch}, and 1 or N = {n}")
    return head


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
        raise layer_error(ctx, "the num_heads and kv_num_heads attributes are required")
    if any(t is not None for t in (k_scale, v_scale, q_norm_weight, k_norm_weight, query_seqlens)) \
            or int(kv_cache_bit_width or 0):
        raise layer_error(ctx, "quantized KV caches, Q/K normalization and query_seqlens are not supported")
    if seqlens_k is None or total_sequence_length is None:
        raise layer_error(ctx, "seqlens_k and total_sequence_length are required")
    n, nkv = int(num_heads), int(kv_num_heads)
    head = check_gqa(ctx, query, key, value, past_key, past_value, seqlens_k, attention_bias, n, nkv)
    dtype = query.dtype
    x = working_float(query)
    if key is None:  # packed QKV (B, S, (N + 2 Nkv) H)
        q, k, v = np.split(x, [n * head, (n + nkv) * head], axis=2)
    else:
        q, k, v = x, working_float(key), working_float(value)
    batch, seq = q.shape[:2]
    q = _split_heads(q, n)
    k = _split_heads(k, nkv)
    v = _split_heads(v, nkv)
    lens = np.asarray(seqlens_k).astype(np.int64).reshape(-1) + 1  # valid tokens of each batch, new ones included
    total = int(first_scalar(total_sequence_length, np.int64))
    past_len = 0 if past_key is None else past_key.shape[2]
    first_prompt = past_key is None or (past_len == 0) or (seq == total and seq > 1)
    starts = np.zeros(batch, dtype=np.int64) if first_prompt else lens - seq  # where the new tokens go
    if np.any(starts < 0) or (np.any(starts + seq > max(past_len, total)) and not first_prompt):
        raise layer_error(ctx, f"seqlens_k {list(lens - 1)} do not fit {seq} new tokens after a past of {past_len}")
    if do_rotary:
        if cos_cache is None or sin_cache is None:
            raise layer_error(ctx, "do_rotary needs cos_cache and sin_cache")
        expect_shape(ctx, "input 7 (cos_cache)", cos_cache, "(max_position, rotary_dim / 2)", None, None)
        expect_shape(ctx, "input 8 (sin_cache)", sin_cache, "(max_position, rotary_dim / 2) as cos_cache",
                     *shape_of(cos_cache))
        if 2 * shape_of(cos_cache)[1] > head:
            raise refuse_shape(ctx, "input 7 (cos_cache)", cos_cache, f"rotates {2 * shape_of(cos_cache)[1]} "
                               f"features of heads of {head}")
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
        bias = np.where(keep, F32(0), F32(-np.inf))[None, None]
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
        raise layer_error(ctx, "the output_qk output is not supported")
    return outs[:ctx.num_outputs] if ctx.num_outputs > 1 else y


def check_rotary(ctx, input, cos_cache, sin_cache, num_heads: int, rotary_embedding_dim: int) -> tuple[int, int]:
    """RotaryEmbedding's inputs checked before any arithmetic (here and in its GPU program): input (B, S, D) or
    (B, N, S, H), caches (max_position, rotary_dim / 2) alike, rotary_dim at most the head size and even, D a
    multiple of the head size. Returns (heads, rotary_dim)."""
    shape = shape_of(input)
    if len(shape) not in (3, 4):
        raise refuse_shape(ctx, "input 0 (input)", input, "must be (B, S, D) or (B, N, S, H)")
    cos_shape = shape_of(cos_cache)
    expect_shape(ctx, "input 2 (cos_cache)", cos_cache, "(max_position, rotary_dim / 2)", None, None)
    expect_shape(ctx, "input 3 (sin_cache)", sin_cache,
                 f"(max_position, rotary_dim / 2) as cos_cache {list(cos_shape)}", *cos_shape)
    half = cos_shape[1]
    rot_dim = int(rotary_embedding_dim or 0) or 2 * half
    if rot_dim != 2 * half:
        raise refuse_shape(ctx, "input 2 (cos_cache)", cos_cache,
                           f"dim 1 must be rotary_embedding_dim / 2 = {rot_dim // 2}")
    heads = int(num_heads or 0)
    if len(shape) == 4:
        heads, head = shape[1], shape[3]
    else:
        head = shape[2] // heads if heads > 0 else 2 * half  # without num_heads, the caches span a whole head
        if heads < 0 or not head or shape[2] % head or (heads and head * heads != shape[2]):
            raise refuse_shape(ctx, "input 0 (input)", input, f"dim 2 (D) {shape[2]} is not a whole number of heads "
                               f"({'num_heads ' + str(num_heads) if num_heads else 'of size ' + str(2 * half)})")
        heads = heads or shape[2] // head
    if rot_dim > head:
        raise refuse_shape(ctx, "input 0 (input)", input, f"its head size {head} is less than the rotary "
                           f"dimension {rot_dim} (2 x cos_cache dim 1)")
    return heads, rot_dim


@register("RotaryEmbedding", 1, domain=MS_DOMAIN)
def rotary_embedding(ctx, input, position_ids, cos_cache, sin_cache, *, interleaved=0, num_heads=0,
                     rotary_embedding_dim=0, is_packed_batching=0, scale=1.0):
    """ORT's RotaryEmbedding: input (B, S, D) or (B, N, S, H); position_ids (1) (the first position, the
    others following it) or (B, S); caches (max_position, rotary_dim / 2)."""
    if is_packed_batching:
        raise layer_error(ctx, "is_packed_batching is not supported")
    check_rotary(ctx, input, cos_cache, sin_cache, num_heads, rotary_embedding_dim)
    batch, seq = input.shape[0], input.shape[-2] if input.ndim == 4 else input.shape[1]
    ids = np.asarray(position_ids).astype(np.int64)
    if ids.size == 1:
        ids = np.broadcast_to(ids.reshape(()) + np.arange(seq), (batch, seq))
    elif ids.shape != (batch, seq):
        raise layer_error(ctx, f"position_ids of shape {list(ids.shape)} is neither (1) nor (B, S) = {[batch, seq]}")
    heads = int(num_heads or 0)
    rot_dim = int(rotary_embedding_dim or 0)
    if input.ndim == 3 and not heads:
        heads = input.shape[2] // (2 * cos_cache.shape[1])  # the caches span a whole head
    x = working_float(input)
    y = onnx_attention.rotary_embedding(ctx, x, working_float(cos_cache), working_float(sin_cache), ids,
                                        interleaved=interleaved, num_heads=heads,
                                        rotary_embedding_dim=rot_dim or 2 * cos_cache.shape[1])
    return y.astype(input.dtype, copy=False)


__all__ = ["key_mask", "sdpa"]
