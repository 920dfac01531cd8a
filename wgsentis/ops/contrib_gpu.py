"""GPU program builders, for gpu-compute and gpu-pixel alike, of ONNX Runtime's float contrib operators
(contrib.py, contrib_attention.py): the Gelu family, BiasAdd, BiasSplitGelu, the skip/simplified/embed layer
norms and ORT's opset-1 LayerNormalization, FusedConv, NhwcConv, FusedGemm, FusedMatMul, RotaryEmbedding,
Attention / MultiHeadAttention without a past; and the composition they are built by (``Composer``,
``register_composite``), which contrib_quant_gpu.py's builders of the quantized ones share.

Each is composed from the standard ops' builders of the same backend (``registry.lookup(op, "", opset,
backend)``), called with a stand-in layer that carries only what they read of one (name, outputs, opset and
the activation to fuse), so every dispatch or draw is one the standard ops already run and test. A builder
answers NotImplemented, and the layer falls back to the CPU kernel, wherever one of the builders it composes
declines or a case is outside what it covers (a past KV cache, unsupported outputs).
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy as np

from wgsentis.backends.gpu.tensors import Declined
from wgsentis.ops import contrib, contrib_attention, quant_gpu, registry
from wgsentis.ops.contrib import MS_DOMAIN
from wgsentis.ops.registry import GPU_COMPUTE, GPU_PIXEL

GPU_BACKENDS = (GPU_COMPUTE, GPU_PIXEL)
# The causal limit as an additive bias: large enough that exp() of it is 0 in float32, finite so that a sum
# with the key mask stays a number on every driver (the CPU kernel uses -inf).
_CAUSAL_FILTER = -1e30


class Composer:
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
        """The outputs of standard op ``op_type`` (at ``opset``) on ``inputs``; raises Declined where its builder
        declines. ``activation``: (op type, attributes) the builder fuses, as a layer's fused_activation."""
        impl = registry.lookup(op_type, "", opset, self.backend)
        if impl is None:
            raise Declined
        try:
            result = impl.build(self.rec, self.stand_in(op_type, opset, outputs, activation, attrs), *inputs,
                                **attrs)
        except Declined:
            raise Declined from None  # the composite declines as a whole (its reason: the layer's arguments)
        if result is NotImplemented:
            raise Declined
        return result

    def mark(self) -> int:
        """Where the layer's allocations stand now: ``release`` frees what comes after it."""
        return len(self.rec.layer_allocs)

    def release(self, mark: int, keep: list[Any]) -> None:
        """Free the allocations made since ``mark`` that none of ``keep`` uses, and advance the recording's clock:
        a composite that steps through time (DynamicQuantizeLSTM) frees each step's temporaries, so the next
        step's reuse their memory and the planner sees short lifetimes instead of thousands alive at once."""
        kept = {id(v.alloc) for v in keep if getattr(v, "alloc", None) is not None}
        program = self.rec.program
        program.free_temporaries(self.rec.layer_allocs[mark:], kept)
        program.advance_clock()

    def quant(self, build: Any, op_type: str, *inputs: Any, outputs: int = 1, **attrs: Any) -> Any:
        """The outputs of one of quant_gpu.py's builders (``build``, standard op ``op_type``'s) on ``inputs``."""
        result = build(self.rec, self.stand_in(op_type, 21, outputs), *inputs, **attrs)
        if result is NotImplemented:
            raise Declined
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


def _wide_codes(x: Any) -> Any:
    """A host array of 8/16-bit codes as int32 (what the device holds); anything else as it is."""
    if isinstance(x, np.ndarray) and x.dtype in quant_gpu.INT_RANGES:
        return x.astype(np.int32)
    return x


def output_wanted(layer, index: int) -> bool:
    """Whether ``layer`` has an output ``index`` that the model names (an omitted optional output has no name)."""
    return index < len(layer.outputs) and bool(layer.outputs[index])


def all_float32(*tensors: Any) -> bool:
    """Whether every one of ``tensors`` given (not None) is float32."""
    return all(t is None or getattr(t, "dtype", None) == np.float32 for t in tensors)


def register_composite(op_type: str, domain: str = MS_DOMAIN, host_inputs: tuple[int, ...] = (),
                       narrow_types: bool = False):
    """Register ``fn(c, *inputs, **attrs)`` (``c`` a Composer) as ``op_type``'s builder on both GPU backends;
    a declined composition answers NotImplemented. ``narrow_types``: it takes 8/16-bit integer tensors with their
    logical dtype (the quantized ops), not widened to int32."""

    def wrap(fn):
        def for_backend(backend: str):
            def build(rec, layer, *inputs, **attrs):
                try:
                    return fn(Composer(rec, layer, backend), *inputs, **attrs)
                except Declined as declined:
                    if declined.args:
                        raise  # a reason the runtime reports as it is
                    return NotImplemented  # the runtime names the arguments the composition declined
                except ValueError:
                    # A malformed parameter (a shape, a block size): the CPU kernel runs and names it.
                    return NotImplemented

            build.__name__ = build.__qualname__ = f"{fn.__name__}_{backend.replace('-', '_')}"
            build.__doc__ = fn.__doc__
            build.__module__ = fn.__module__  # the registering family's (contrib_quant_gpu's too)
            return build

        for backend in GPU_BACKENDS:
            registry.register(op_type, 1, domain, backend=backend, host_inputs=host_inputs,
                              narrow_types=narrow_types)(for_backend(backend))
        return fn

    return wrap


# -- Gelu family, BiasAdd, BiasSplitGelu ---------------------------------------------------------------------

@register_composite("Gelu")
def gelu(c: Composer, X):
    """Gelu (erf)."""
    return c.gelu(X) if all_float32(X) else NotImplemented


@register_composite("BiasGelu")
def bias_gelu(c: Composer, A, B):
    """Gelu(A + B)."""
    return c.gelu(c.add(A, B)) if all_float32(A, B) else NotImplemented


@register_composite("FastGelu")
def fast_gelu(c: Composer, X, bias=None):
    """tanh-approximated Gelu(X + bias)."""
    if not all_float32(X, bias):
        return NotImplemented
    return c.gelu(X if bias is None else c.add(X, bias), "tanh")


@register_composite("QuickGelu")
def quick_gelu(c: Composer, X, *, alpha=1.702):
    """x * sigmoid(alpha x): ONNX's Swish."""
    return c.op("Swish", 24, X, alpha=float(alpha)) if all_float32(X) else NotImplemented


@register_composite("BiasAdd")
def bias_add(c: Composer, X, bias, skip):
    """X + bias + skip."""
    return c.add(c.add(X, bias), skip) if all_float32(X, bias, skip) else NotImplemented


@register_composite("BiasSplitGelu")
def bias_split_gelu(c: Composer, X, bias):
    """(X + bias) halves along the last axis: left * Gelu(right)."""
    if not all_float32(X, bias) or X.shape[-1] % 2:
        return NotImplemented
    total = c.add(X, bias)
    half = X.shape[-1] // 2
    left = c.slice(total, X.ndim - 1, 0, half)
    right = c.slice(total, X.ndim - 1, half, 2 * half)
    return c.mul(left, c.gelu(right))


# -- layer norms -------------------------------------------------------------------------------------------

def _skip_outputs(c: Composer, total, normalized) -> tuple:
    """(output, mean, inv_std_var, input_skip_bias_sum) for the layer's outputs; None where not asked for."""
    layer = c.layer
    y, mean, inv = normalized if isinstance(normalized, tuple) else (normalized, None, None)
    if (output_wanted(layer, 1) and mean is None) or (output_wanted(layer, 2) and inv is None):
        raise Declined
    values = (y, mean, inv, total)
    outs = tuple(v if output_wanted(layer, k) or k == 0 else None for k, v in enumerate(values[:len(layer.outputs)]))
    return outs if len(outs) > 1 else outs[0]


def _skip_total(c: Composer, input, skip, bias):
    if skip.shape[-1] != input.shape[-1] or skip.ndim > input.ndim or input.ndim != 3:
        raise Declined
    total = c.add(input, skip)
    return total if bias is None else c.add(total, bias)


@register_composite("SkipLayerNormalization")
def skip_layer_normalization(c: Composer, input, skip, gamma, beta=None, bias=None, *, epsilon=1e-12):
    """LayerNormalization(input + skip + bias), with its statistics and the sum where asked for."""
    contrib.check_skip_norm(c, input, skip, gamma, beta, bias)
    if not all_float32(input, skip, gamma, beta, bias):
        return NotImplemented
    total = _skip_total(c, input, skip, bias)
    stats = output_wanted(c.layer, 1) or output_wanted(c.layer, 2)
    normalized = c.op("LayerNormalization", 17, total, gamma, beta, outputs=3 if stats else 1, axis=-1,
                      epsilon=float(epsilon))
    return _skip_outputs(c, total, normalized)


@register_composite("SkipSimplifiedLayerNormalization")
def skip_simplified_layer_normalization(c: Composer, input, skip, gamma, bias=None, *, epsilon=1e-12):
    """RMSNormalization(input + skip + bias) and the sum (the statistics outputs fall back)."""
    contrib.check_skip_norm(c, input, skip, gamma, None, bias, simplified=True)
    if not all_float32(input, skip, gamma, bias):
        return NotImplemented
    total = _skip_total(c, input, skip, bias)
    return _skip_outputs(c, total, c.op("RMSNormalization", 23, total, gamma, axis=-1, epsilon=float(epsilon)))


@register_composite("SimplifiedLayerNormalization", domain="")
def simplified_layer_normalization(c: Composer, X, scale, *, axis=-1, epsilon=1e-5, stash_type=1):
    """ORT's SimplifiedLayerNormalization: RMSNormalization (inv_std_var falls back)."""
    if not all_float32(X, scale) or output_wanted(c.layer, 1) or stash_type != 1:
        return NotImplemented
    return c.op("RMSNormalization", 23, X, scale, axis=axis, epsilon=float(epsilon))


@register_composite("EmbedLayerNormalization")
def embed_layer_normalization(c: Composer, input_ids, segment_ids, word_embedding, position_embedding,
                              segment_embedding=None, gamma=None, beta=None, mask=None, position_ids=None, *,
                              epsilon=1e-12, mask_index_type=1):
    """Gathers of the three tables (ids bounds-checked on the device), their sum, LayerNormalization; the
    mask index as the count of set mask entries per row (zeros without a mask)."""
    if not all_float32(word_embedding, position_embedding, segment_embedding, gamma, beta) or gamma is None \
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
    if output_wanted(c.layer, 1):
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


@register_composite("FusedConv", host_inputs=(1, 2))
def fused_conv(c: Composer, X, W, B=None, Z=None, *, activation=None, activation_params=None, **attrs):
    """activation(Conv(X, W, B) + Z): the Conv builder (this engine's FusedConv's where Z is given) with the
    activation fused into its epilogue."""
    try:
        act = contrib.conv_activation(activation, activation_params)
    except ValueError:
        return NotImplemented  # the CPU kernel names it
    if Z is None:
        return c.op("Conv", 11, X, W, B, activation=act, **_conv_attrs(attrs))
    return c.op("FusedConv", 1, X, W, B, Z, activation=act, **_conv_attrs(attrs))


@register_composite("NhwcConv", host_inputs=(1, 2))
def nhwc_conv(c: Composer, X, W, B=None, **attrs):
    """Conv between two transposes: channels-last X and Y."""
    if not all_float32(X) or X.ndim < 3:
        return NotImplemented
    rank = X.ndim
    x = c.transpose(X, [0, rank - 1, *range(1, rank - 1)])
    y = c.op("Conv", 11, x, W, B, **_conv_attrs(attrs))
    return c.transpose(y, [0, *range(2, rank), 1])


@register_composite("FusedGemm")
def fused_gemm(c: Composer, A, B, C=None, *, alpha=1.0, beta=1.0, transA=0, transB=0, activation=None,
               activation_alpha=None, activation_beta=None, activation_gamma=None):
    """activation(Gemm(A, B, C)), the activation in the Gemm builder's epilogue."""
    try:
        act = contrib.gemm_activation(activation, activation_alpha, activation_beta, activation_gamma)
    except ValueError:
        return NotImplemented
    return c.op("Gemm", 13, A, B, C, activation=act, alpha=alpha, beta=beta, transA=transA, transB=transB)


def _matmul_operand(c: Composer, x: Any, trans: int, trans_batch: int) -> Any:
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(contrib.fused_matmul_operand(x, trans, trans_batch))
    rank = x.ndim
    perm = list(range(rank))
    if rank >= 3 and trans_batch:
        perm = [*range(1, rank - 1), 0, rank - 1]
    if trans and rank >= 2:
        perm[-1], perm[-2] = perm[-2], perm[-1]
    return x if perm == list(range(rank)) else c.transpose(x, perm)


@register_composite("FusedMatMul")
def fused_matmul(c: Composer, A, B, *, alpha=1.0, transA=0, transB=0, transBatchA=0, transBatchB=0):
    """alpha * op(A) @ op(B): transposes (on the host for constants), MatMul, a scale."""
    if not all_float32(A, B):
        return NotImplemented
    y = c.op("MatMul", 13, _matmul_operand(c, A, transA, transBatchA), _matmul_operand(c, B, transB, transBatchB))
    return y if float(alpha) == 1.0 else c.mul(y, np.array(alpha, np.float32))


# -- RotaryEmbedding ---------------------------------------------------------------------------------------

def _rotate(c: Composer, x: Any, cos: Any, sin: Any, half: int, interleaved: int) -> Any:
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


@register_composite("RotaryEmbedding")
def rotary_embedding(c: Composer, input, position_ids, cos_cache, sin_cache, *, interleaved=0, num_heads=0,
                     rotary_embedding_dim=0, is_packed_batching=0, scale=1.0):
    """Rotary embedding: cos and sin gathered by position (a host table for host positions), x viewed as
    (B, S, N, H) (or (B, N, S, H)), the halves (or the even and odd features) rotated and put back."""
    if is_packed_batching or not all_float32(input, cos_cache, sin_cache):
        return NotImplemented
    contrib_attention.check_rotary(c, input, cos_cache, sin_cache, num_heads, rotary_embedding_dim)
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

def _heads(c: Composer, x: Any, heads: int, perm: list[int]) -> Any:
    """(B, S, N*H) -> (B, S, N, H) -> transposed by ``perm``."""
    b, s, d = x.shape
    return c.transpose(c.reshape(x, (b, s, heads, d // heads)), perm)


def _key_mask_bias(c: Composer, mask: Any, batch: int, q_len: int, kv_len: int, causal: bool,
                   filter_value: float) -> Any:
    """The additive (B|1, 1, S|1, T) mask of ``mask`` ((B) key lengths or (B, T) 0/1, int32) and the causal
    limit, or None; a host mask (or none) gives a host constant."""
    bias = None
    if mask is not None:
        if getattr(mask, "dtype", None) != np.int32:
            raise Declined
        if isinstance(mask, np.ndarray):
            bias = np.asarray(contrib_attention.key_mask(None, mask, batch, q_len, kv_len, 0, False, filter_value),
                              np.float32)
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
            raise Declined
    if causal:
        allowed = np.arange(kv_len)[None, :] <= np.arange(q_len)[:, None]  # no past: as the CPU kernel
        causal_bias = np.where(allowed, np.float32(0), np.float32(_CAUSAL_FILTER))[None, None]
        bias = causal_bias if bias is None else (bias + causal_bias if isinstance(bias, np.ndarray)
                                                 else c.add(bias, causal_bias))
    return bias


def _attend(c: Composer, q: Any, k_t: Any, v: Any, scale: float, bias: Any) -> Any:
    """softmax(q k_t * scale + bias) v for q (B, N, S, H), k_t (B, N, H, T), v (B, N, T, Hv): (B, S, N*Hv)."""
    scores = c.mul(c.op("MatMul", 13, q, k_t), np.array(scale, np.float32))
    if bias is not None:
        scores = c.add(scores, bias)
    context = c.op("MatMul", 13, c.op("Softmax", 13, scores, axis=-1), v)  # (B, N, S, Hv)
    b, n, s, hv = context.shape
    return c.reshape(c.transpose(context, [0, 2, 1, 3]), (b, s, n * hv))


@register_composite("Attention")
def attention(c: Composer, input, weights, bias=None, mask_index=None, past=None, attention_bias=None,
              past_sequence_length=None, *, num_heads=None, qkv_hidden_sizes=None, unidirectional=0, scale=None,
              mask_filter_value=None, do_rotary=0, rotary_embedding_dim=0, past_present_share_buffer=0):
    """Attention without a past: the packed projection (MatMul + bias), heads split by Slice, Reshape and
    Transpose, scores by MatMul, the mask as an additive bias, Softmax, the context by MatMul."""
    if past is not None or past_sequence_length is not None or do_rotary or output_wanted(c.layer, 1) \
            or not num_heads or not all_float32(input, weights, bias, attention_bias) or input.ndim != 3:
        return NotImplemented
    heads = int(num_heads)
    total = weights.shape[1]
    sizes = [int(s) for s in qkv_hidden_sizes] if qkv_hidden_sizes else [total // 3] * 3
    if len(sizes) != 3 or sum(sizes) != total or any(s % heads for s in sizes):
        return NotImplemented
    qkv = c.op("MatMul", 13, input, weights)
    if bias is not None:
        qkv = c.add(qkv, bias)
    return packed_attention(c, qkv, sizes, heads, mask_index, attention_bias, unidirectional, scale,
                            mask_filter_value)


def packed_attention(c: Composer, qkv: Any, sizes: list[int], heads: int, mask_index: Any, attention_bias: Any,
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


@register_composite("MultiHeadAttention")
def multi_head_attention(c: Composer, query, key=None, value=None, bias=None, key_padding_mask=None,
                         attention_bias=None, past_key=None, past_value=None, past_sequence_length=None,
                         cache_indirection=None, *, num_heads=None, scale=None, mask_filter_value=None,
                         unidirectional=0):
    """MultiHeadAttention on separate (B, S, D) query, key and value (optional bias, key_padding_mask,
    attention_bias), without a past; packed and 4-D forms fall back."""
    if num_heads:
        contrib_attention.check_mha(c, query, key, value, bias, attention_bias, past_key, past_value, int(num_heads))
    if any(t is not None for t in (past_key, past_value, past_sequence_length, cache_indirection)) \
            or len(c.layer.outputs) > 1 or not num_heads or key is None or value is None \
            or query.ndim != 3 or key.ndim != 3 or value.ndim != 3 \
            or not all_float32(query, key, value, bias, attention_bias):
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


__all__ = ["GPU_BACKENDS"]
