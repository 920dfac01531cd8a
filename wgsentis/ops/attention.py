"""Attention-family operators (numpy kernels): scaled dot-product Attention (MHA/GQA/MQA with masks,
KV cache, causal and sliding-window masking, softcap), RotaryEmbedding, FlexAttention (score/prob
modifier subgraphs), LinearAttention (linear / gated / delta recurrences), SwiGLU and
CausalConvWithState.
"""

from __future__ import annotations

import numpy as np

from wgsentis.dtypes import ONNX_TO_NUMPY
from wgsentis.ops.registry import register, register_flops
from wgsentis.ops.tensor import check_indices


def _softmax_last(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis; a row that is all ``-inf`` gives zeros instead of NaN."""
    x_max = np.max(x, axis=-1, keepdims=True)
    x_max = np.where(np.isneginf(x_max), np.zeros((), dtype=x.dtype), x_max)
    e = np.exp(x - x_max)
    total = np.sum(e, axis=-1, keepdims=True)
    total = np.where(total == 0, np.ones((), dtype=x.dtype), total)
    return e / total


def _heads_to_4d(x: np.ndarray, num_heads: int) -> np.ndarray:
    """(B, S, H*D) -> (B, H, S, D)."""
    batch, seq, hidden = x.shape
    if hidden % num_heads:
        raise ValueError(f"hidden size {hidden} is not divisible by num_heads {num_heads}")
    return x.reshape(batch, seq, num_heads, hidden // num_heads).transpose(0, 2, 1, 3)


def _grouped_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` where ``a`` has Hq heads and ``b`` has Hkv heads (Hq a multiple of Hkv).

    Query head ``h`` uses kv head ``h // (Hq // Hkv)`` (the interleaved repeat of GQA), done by
    folding the group into a new axis instead of materialising repeated K/V.
    """
    hq, hkv = a.shape[1], b.shape[1]
    if hq == hkv or hkv == 1:
        # numpy computes bfloat16 products in float32: cast back to keep the ONNX dtype.
        return np.matmul(a, b).astype(a.dtype, copy=False)
    if hq % hkv:
        raise ValueError(f"q_num_heads {hq} is not a multiple of kv_num_heads {hkv}")
    group = hq // hkv
    a5 = a.reshape(a.shape[0], hkv, group, *a.shape[2:])  # (B, Hkv, G, M, K)
    out = np.matmul(a5, b[:, :, None]).astype(a.dtype, copy=False)  # (B, Hkv, G, M, N)
    return out.reshape(out.shape[0], hq, *out.shape[3:])


def _window_allowed(q_len: int, kv_len: int, offset, causal: bool, left: int, right: int) -> np.ndarray | None:
    """Boolean (q, kv) or (B, 1, q, kv) mask of keys a query may see under causal/window rules.

    ``offset`` is the count of valid keys before the query block: a scalar, or a (B,) array for
    an external cache described by ``nonpad_kv_seqlen``.
    """
    if not causal and left < 0 and right < 0:
        return None
    i_idx = np.arange(q_len).reshape(q_len, 1)
    j_idx = np.arange(kv_len).reshape(1, kv_len)
    if np.ndim(offset) > 0:
        pos = i_idx + np.reshape(offset, (-1, 1, 1, 1))  # (B, 1, q, 1)
    else:
        pos = i_idx + int(offset)
    diff = pos - j_idx
    allowed = np.ones(diff.shape, dtype=bool)
    if causal:
        allowed &= diff >= 0
    if left >= 0:
        allowed &= diff <= left
    if right >= 0:
        allowed &= -diff <= right
    return allowed


@register("Attention", 23)
def attention(ctx, Q, K, V, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None, *,
              is_causal=0, kv_num_heads=None, q_num_heads=None, qk_matmul_output_mode=0, scale=None,
              softcap=0.0, softmax_precision=None, left_window_size=-1, right_window_size=-1):
    """softmax(softcap(Q K^T * scale) + bias) V with GQA, KV cache, causal/window masks.

    Q, K are each pre-scaled by sqrt(scale) (as the spec's function body does) before the matmul.
    """
    if (past_key is None) != (past_value is None):
        raise ValueError("past_key and past_value must be provided together")
    if Q.ndim != K.ndim or Q.ndim != V.ndim or Q.ndim not in (3, 4):
        raise ValueError(f"Q, K, V must all be 3D or all 4D, got {Q.shape}, {K.shape}, {V.shape}")
    dtype = Q.dtype
    is_3d = Q.ndim == 3
    if is_3d:
        if q_num_heads is None or kv_num_heads is None:
            raise ValueError("3D inputs need the q_num_heads and kv_num_heads attributes")
        Q = _heads_to_4d(Q, q_num_heads)
        K = _heads_to_4d(K, kv_num_heads)
        V = _heads_to_4d(V, kv_num_heads)
    batch, hq, q_len, head_size = Q.shape

    if scale is None:
        scale = 1.0 / np.sqrt(head_size)
    sqrt_scale = dtype.type(np.sqrt(scale))

    # KV cache: present = concat(past, new) along the sequence axis.
    if past_key is not None:
        K = np.concatenate((past_key, K), axis=2)
        V = np.concatenate((past_value, V), axis=2)
    present_key, present_value = K, V
    kv_len = K.shape[2]

    # Additive bias (broadcastable to (B, Hq, q, kv)); None means no bias at all.
    bias = None
    if attn_mask is not None:
        pad = kv_len - attn_mask.shape[-1]
        if pad > 0:  # a short mask is padded with "not attended"
            fill = False if attn_mask.dtype == np.bool_ else -np.inf
            attn_mask = np.pad(attn_mask, [(0, 0)] * (attn_mask.ndim - 1) + [(0, pad)], constant_values=fill)
        if attn_mask.dtype == np.bool_:
            bias = np.where(attn_mask, dtype.type(0), dtype.type(-np.inf))
        else:
            bias = attn_mask.astype(dtype, copy=False)
    if past_key is not None:
        offset = past_key.shape[2]
    elif nonpad_kv_seqlen is not None:
        offset = np.asarray(nonpad_kv_seqlen).reshape(-1) - q_len
    else:
        offset = 0
    allowed = _window_allowed(q_len, kv_len, offset, bool(is_causal), int(left_window_size),
                              int(right_window_size))
    if nonpad_kv_seqlen is not None:
        pad_ok = (np.arange(kv_len) < np.asarray(nonpad_kv_seqlen).reshape(-1, 1)).reshape(batch, 1, 1, kv_len)
        allowed = pad_ok if allowed is None else allowed & pad_ok
    if allowed is not None:
        rule_bias = np.where(allowed, dtype.type(0), dtype.type(-np.inf))
        bias = rule_bias if bias is None else bias + rule_bias

    scores = _grouped_matmul(Q * sqrt_scale, np.swapaxes(K * sqrt_scale, -1, -2))  # (B, Hq, q, kv)
    raw_scores = scores
    if softcap and softcap > 0:
        scores = (np.tanh(scores / dtype.type(softcap)) * dtype.type(softcap)).astype(dtype, copy=False)
    capped_scores = scores
    if bias is not None:
        scores = scores + bias
    biased_scores = scores

    if softmax_precision is not None:
        scores = scores.astype(ONNX_TO_NUMPY[int(softmax_precision)])
    probs = _softmax_last(scores)
    if bias is not None:
        # A query row whose bias is all -inf has no key to attend: its output is zero, not NaN.
        fully_masked = np.isneginf(np.max(bias, axis=-1, keepdims=True))
        if fully_masked.any():
            probs = np.where(fully_masked, np.zeros((), dtype=probs.dtype), probs)
    probs = probs.astype(dtype, copy=False)

    Y = _grouped_matmul(probs, V)  # (B, Hq, q, Dv)
    if is_3d:
        Y = Y.transpose(0, 2, 1, 3).reshape(batch, q_len, -1)
    outputs = [Y, present_key, present_value]
    if ctx.num_outputs > 3:
        mode = int(qk_matmul_output_mode)
        qk_out = {0: raw_scores, 1: capped_scores, 2: biased_scores, 3: probs}.get(mode)
        if qk_out is None:
            raise ValueError(f"unsupported qk_matmul_output_mode {mode}")
        outputs.append(np.broadcast_to(qk_out, (batch, hq, q_len, kv_len)).astype(dtype))
    return tuple(outputs[:ctx.num_outputs]) if ctx.num_outputs > 1 else Y


@register_flops("Attention", "FlexAttention")
def _attention_flops(layer, in_shapes, out_shapes):
    """2 * B * Hq * q * kv * (D + Dv): the QK^T and PV matmuls (a multiply-add counts 2 FLOPs)."""
    y = out_shapes[0] if out_shapes else None
    q, k = in_shapes[0], in_shapes[1]
    if y is None or q is None or k is None:
        return 0
    if len(q) == 4:
        batch, heads, q_len, head = q
        kv_len = k[2]
        dv = y[3]
    else:
        heads = int(layer.attrs.get("q_num_heads") or 1)
        batch, q_len = q[0], q[1]
        head = q[2] // heads
        kv_len = k[1]
        dv = y[2] // heads
    if len(in_shapes) > 4 and in_shapes[4] is not None:
        kv_len += in_shapes[4][2]
    return 2 * batch * heads * q_len * kv_len * (head + dv)


@register("RotaryEmbedding", 23)
def rotary_embedding(ctx, X, cos_cache, sin_cache, position_ids=None, *, interleaved=0, num_heads=None,
                     rotary_embedding_dim=0):
    """Rotate the first ``rotary_embedding_dim`` features of each head by position-dependent angles.

    X is (B, H, S, D) or (B, S, H*D); caches are (max_pos, dim/2) indexed by position_ids, or
    (B, S, dim/2) when position_ids is absent.
    """
    shape = X.shape
    if X.ndim == 4:
        x = X.transpose(0, 2, 1, 3)  # (B, S, H, D)
    elif X.ndim == 3:
        if not num_heads:
            raise ValueError("3D input needs the num_heads attribute")
        x = X.reshape(shape[0], shape[1], num_heads, shape[2] // num_heads)
    else:
        raise ValueError(f"RotaryEmbedding input must be 3D or 4D, got {shape}")
    head_size = x.shape[3]
    rot_dim = int(rotary_embedding_dim) or head_size
    half = rot_dim // 2
    if position_ids is not None:
        if cos_cache.shape[0] != sin_cache.shape[0]:
            raise ValueError(f"cos_cache and sin_cache differ in rows: {cos_cache.shape[0]} vs {sin_cache.shape[0]}")
        position_ids = np.asarray(position_ids).astype(np.int64, copy=False)  # (B, S)
        # Rows of the (max_position_id_plus_1, dim/2) caches: 0 .. max_position_id, never negative.
        check_indices(ctx, position_ids, cos_cache.shape[0], "position_ids", negative_ok=False)
        cos_cache = cos_cache[position_ids]
        sin_cache = sin_cache[position_ids]
    if cos_cache.shape[-1] != half or sin_cache.shape[-1] != half:
        raise ValueError(f"cos/sin cache last dim must be rotary_embedding_dim/2 = {half}")
    if cos_cache.ndim == 2:  # (S, half) shared by the whole batch
        cos_cache, sin_cache = cos_cache[None], sin_cache[None]
    cos = cos_cache[:, :, None, :]  # (B, S, 1, half)
    sin = sin_cache[:, :, None, :]
    x_rot = x[..., :rot_dim]
    if interleaved:
        x1, x2 = x_rot[..., 0::2], x_rot[..., 1::2]
    else:
        x1, x2 = x_rot[..., :half], x_rot[..., half:]
    real = cos * x1 - sin * x2
    imag = sin * x1 + cos * x2
    out = np.array(x, dtype=X.dtype)  # a copy in (B, S, H, D) order
    if interleaved:
        out[..., 0:rot_dim:2] = real
        out[..., 1:rot_dim:2] = imag
    else:
        out[..., :half] = real
        out[..., half:rot_dim] = imag
    if X.ndim == 4:
        return np.ascontiguousarray(out.transpose(0, 2, 1, 3))
    return out.reshape(shape)


_FLEX_SOFTMAX_DTYPES = {1: np.float32, 10: np.float16, 11: np.float64, 16: ONNX_TO_NUMPY[16]}


@register("FlexAttention", 1, domain="ai.onnx.preview")
def flex_attention(ctx, Q, K, V, *, scale=None, score_mod=None, prob_mod=None, softmax_precision=None):
    """Attention whose scores and probabilities may be rewritten by the score_mod/prob_mod subgraphs."""
    if Q.ndim != 4 or K.ndim != 4 or V.ndim != 4:
        raise ValueError(f"FlexAttention needs 4D Q, K, V, got {Q.shape}, {K.shape}, {V.shape}")
    dtype = Q.dtype
    if scale is None:
        scale = 1.0 / np.sqrt(Q.shape[3])
    if softmax_precision is not None:
        compute = np.dtype(_FLEX_SOFTMAX_DTYPES[int(softmax_precision)])
    else:
        compute = np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)
    sqrt_scale = np.array(np.sqrt(np.float32(scale)), dtype=dtype)
    scores = _grouped_matmul(Q * sqrt_scale, np.swapaxes(K * sqrt_scale, -1, -2)).astype(compute)
    if score_mod is not None:
        scores = np.asarray(ctx.run_graph(score_mod, [scores])[0], dtype=compute)
    scores_max = np.max(scores, axis=-1, keepdims=True)
    e = np.exp(scores - scores_max)
    probs = e / np.sum(e, axis=-1, keepdims=True)
    if prob_mod is not None:
        probs = np.asarray(ctx.run_graph(prob_mod, [probs])[0], dtype=compute)
    return _grouped_matmul(probs, V.astype(compute)).astype(V.dtype)


@register("LinearAttention", 27)
def linear_attention(ctx, query, key, value, past_state=None, decay=None, beta=None, *, chunk_size=64,
                     kv_num_heads=None, q_num_heads=None, scale=0.0, update_rule="gated_delta"):
    """Recurrent linear attention: S_t = decay_t * S_{t-1} (+ delta correction) + k_t v_t^T; o_t = scale q_t S_t.

    Computed step by step in float32 (the state recurrence is inherently sequential).
    """
    if update_rule not in ("linear", "gated", "delta", "gated_delta"):
        raise ValueError(f"unsupported update_rule {update_rule!r}")
    if not q_num_heads or not kv_num_heads or q_num_heads % kv_num_heads:
        raise ValueError(f"q_num_heads ({q_num_heads}) must be a positive multiple of kv_num_heads ({kv_num_heads})")
    gated = update_rule in ("gated", "gated_delta")
    delta = update_rule in ("delta", "gated_delta")
    if gated and decay is None:
        raise ValueError(f"update_rule {update_rule!r} needs the decay input")
    if delta and beta is None:
        raise ValueError(f"update_rule {update_rule!r} needs the beta input")
    batch, steps, _ = query.shape
    d_k = query.shape[-1] // q_num_heads
    d_v = value.shape[-1] // kv_num_heads
    group = q_num_heads // kv_num_heads
    q4 = _heads_to_4d(query, q_num_heads).astype(np.float32)  # (B, Hq, T, dk)
    k4 = _heads_to_4d(key, kv_num_heads).astype(np.float32)  # (B, Hkv, T, dk)
    v4 = _heads_to_4d(value, kv_num_heads).astype(np.float32)  # (B, Hkv, T, dv)
    if gated:
        if decay.shape[-1] == kv_num_heads:
            decay4 = decay.reshape(batch, steps, kv_num_heads, 1).transpose(0, 2, 1, 3)
        else:
            decay4 = _heads_to_4d(decay, kv_num_heads)
        gate = np.exp(decay4.astype(np.float32))  # (B, Hkv, T, dk or 1)
    if delta:
        beta4 = beta.reshape(batch, steps, beta.shape[-1], 1).transpose(0, 2, 1, 3).astype(np.float32)
    if past_state is not None:
        state_dtype = past_state.dtype
        state = past_state.astype(np.float32)  # (B, Hkv, dk, dv)
    else:
        state_dtype = query.dtype
        state = np.zeros((batch, kv_num_heads, d_k, d_v), dtype=np.float32)
    scale_val = np.float32(scale if scale else 1.0 / np.sqrt(d_k))
    # Query heads grouped by kv head: (B, Hkv, G, T, dk).
    q5 = q4.reshape(batch, kv_num_heads, group, steps, d_k)
    out = np.empty((batch, kv_num_heads, group, steps, d_v), dtype=np.float32)
    for t in range(steps):
        k_t = k4[:, :, t, :]  # (B, Hkv, dk)
        v_t = v4[:, :, t, :]  # (B, Hkv, dv)
        if gated:
            state = state * gate[:, :, t, :][..., None]
        if delta:
            retrieved = np.einsum("bhdm,bhd->bhm", state, k_t)
            v_t = beta4[:, :, t, :] * (v_t - retrieved)
        state = state + k_t[..., :, None] * v_t[..., None, :]
        out[:, :, :, t, :] = scale_val * np.matmul(q5[:, :, :, t, :], state)  # (B, Hkv, G, dv)
    output = out.reshape(batch, q_num_heads, steps, d_v).transpose(0, 2, 1, 3).reshape(batch, steps, -1)
    return output.astype(query.dtype), state.astype(state_dtype)


@register("SwiGLU", 28)
def swiglu(ctx, A, B, *, alpha=1.0):
    """Swish_alpha(A) * B, with Swish_alpha(a) = a * sigmoid(alpha * a)."""
    if A.shape != B.shape:
        raise ValueError(f"SwiGLU needs equal shapes, got {A.shape} and {B.shape}")
    sig = (1.0 / (1.0 + np.exp(-alpha * A))).astype(A.dtype)
    return np.asarray(A * sig * B, dtype=A.dtype)


@register("CausalConvWithState", 27)
def causal_conv_with_state(ctx, input, weight, bias=None, past_state=None, *, activation="none"):
    """Depthwise causal 1-D convolution over (B, C, L), left-padded by a carried state of k-1 steps."""
    if activation not in ("none", "silu", "swish"):
        raise ValueError(f"unsupported activation {activation!r}")
    if input.ndim != 3 or weight.ndim != 3:
        raise ValueError(f"input must be (B, C, L) and weight (C, 1, k), got {input.shape}, {weight.shape}")
    batch, channels, length = input.shape
    k = weight.shape[2]
    if past_state is None:
        past_state = np.zeros((batch, channels, k - 1), dtype=input.dtype)
    padded = np.concatenate([past_state.astype(input.dtype, copy=False), input], axis=2)  # (B, C, L+k-1)
    acc = np.zeros((batch, channels, length), dtype=np.float32 if input.dtype != np.float64 else np.float64)
    w = weight[:, 0, :].astype(acc.dtype)  # (C, k)
    for tap in range(k):
        acc += padded[:, :, tap:tap + length] * w[None, :, tap, None]
    if bias is not None:
        acc += bias.astype(acc.dtype)[None, :, None]
    conv = acc.astype(input.dtype)
    if activation in ("silu", "swish"):
        c32 = conv.astype(np.float32)
        conv = (c32 / (1.0 + np.exp(-c32))).astype(input.dtype)
    present = padded[:, :, padded.shape[2] - (k - 1):]
    return conv, np.ascontiguousarray(present)
