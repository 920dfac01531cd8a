"""Numpy kernels of ONNX Runtime's float ``com.microsoft`` contrib operators, the ones its own tools write, the
attention family aside (contrib_attention.py's): the transformer optimizer's fusions (Gelu, FastGelu, BiasGelu,
QuickGelu, BiasAdd, BiasSplitGelu, the skip, simplified and embed layer norms) and the graph optimizer's fusions
(FusedConv, FusedGemm, FusedMatMul, NhwcConv, NhwcFusedConv), plus SimplifiedLayerNormalization, which ORT
registers in the ONNX domain at version 1 (its version-1 LayerNormalization is norm.py's); and the helpers the
other contrib modules share (``MS_DOMAIN``, ``F32``, ``layer_error``, ``first_scalar``, ``working_float``,
``attr_text``). The quantization tools' operators are contrib_quant.py's, which builds on the helpers here and in
contrib_attention.py.

Semantics are what ONNX Runtime's CPU execution provider computes, since these models are made and checked
with it (where ORT has no CPU kernel, BiasAdd, BiasSplitGelu and NhwcConv, the contrib spec's). The ops reuse
the standard ops' kernels (conv, gemm, layer norm, activations). Their GPU programs are contrib_gpu.py's.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from wgsentis.errors import LayerError
from wgsentis.ops import conv as onnx_conv
from wgsentis.ops import matmul as onnx_matmul
from wgsentis.ops.activations import ACTIVATIONS
from wgsentis.ops.registry import register, register_flops
from wgsentis.ops.tensor import check_indices

MS_DOMAIN = "com.microsoft"
F32 = np.float32
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def layer_error(ctx, detail: str) -> Exception:
    """A LayerError naming ctx's layer (a ValueError where the kernel runs without one)."""
    layer = getattr(ctx, "layer", None)
    if layer is None:
        return ValueError(detail)
    return LayerError(layer.name, layer.op_type, detail)


def shape_of(x: Any) -> tuple[int, ...]:
    """The shape of a host array or a device tensor (anything with ``.shape``), as ints."""
    return tuple(int(d) for d in (x.shape if hasattr(x, "shape") else np.shape(x)))


def expect_shape(ctx, what: str, x: Any, form: str, *dims: int | None) -> None:
    """Raise a LayerError naming input ``what`` (e.g. "input 1 (key)") unless ``x`` has ``len(dims)`` axes and each
    int of ``dims`` is its size on that axis (None: any size). ``form`` is the shape the op expects, e.g.
    "(B, S, D)": its labels name the dim at fault. Kernels and GPU builders call it alike (``ctx``: anything with
    ``.layer``), so a malformed input is the same error on every backend."""
    shape = shape_of(x)
    if len(shape) != len(dims):
        raise layer_error(ctx, f"{what} must be {form}, got shape {list(shape)} "
                               f"(rank {len(shape)}, not {len(dims)})")
    labels = form.split(" with ")[0].strip("()").split(", ")
    for k, (size, want) in enumerate(zip(shape, dims, strict=True)):
        if want is not None and size != want:
            label = f" ({labels[k]})" if len(labels) == len(dims) else ""
            raise layer_error(ctx, f"{what} must be {form}, got shape {list(shape)}: dim {k}{label} is {size}, "
                                   f"expected {want}")


def refuse_shape(ctx, what: str, x: Any, detail: str) -> Exception:
    """A LayerError naming input ``what`` and its shape, with ``detail`` saying what is wrong with it."""
    return layer_error(ctx, f"{what} of shape {list(shape_of(x))}: {detail}")


def first_scalar(value: Any, dtype: Any = np.float64) -> Any:
    """The first element of ``value`` (a scalar or a one-element input) as a ``dtype`` scalar."""
    return np.asarray(value).astype(dtype).reshape(-1)[0]


def working_float(x: np.ndarray) -> np.ndarray:
    """x in a numpy float type the kernels compute in: float32/float64 kept, others widened to float32."""
    return x if x.dtype in (np.float32, np.float64) else x.astype(F32)


# ----------------------------------------------------------------------------------------------
# Gelu family, BiasAdd
# ----------------------------------------------------------------------------------------------

def _gelu(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    w = working_float(x)
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
    w = working_float(X)
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
        raise layer_error(ctx, f"input's last dimension {y.shape[-1]} is not even")
    return y[..., :half] * _gelu(y[..., half:])


# ----------------------------------------------------------------------------------------------
# Layer norms: SkipLayerNormalization, SkipSimplifiedLayerNormalization, SimplifiedLayerNormalization,
# EmbedLayerNormalization, and ORT's opset-1 LayerNormalization
# ----------------------------------------------------------------------------------------------

def check_skip_norm(ctx, input, skip, gamma, beta=None, bias=None, simplified: bool = False) -> None:
    """The skip layer norms' inputs, checked before any arithmetic (here and in their GPU programs): input
    (B, S, H) (or (S, H)), skip (B, S, H), (1, S, H) or (S, H), gamma, beta and bias (H)."""
    shape = shape_of(input)
    if len(shape) not in (2, 3):
        raise refuse_shape(ctx, "input 0 (input)", input, "must be (B, S, H) or (S, H)")
    hidden = shape[-1]
    skip_shape = shape_of(skip)
    batch_ok = len(skip_shape) == len(shape) and skip_shape[0] in (1, shape[0])
    if not (skip_shape == shape[-2:] or (batch_ok and skip_shape[1:] == shape[1:])):
        raise refuse_shape(ctx, "input 1 (skip)", skip, f"must be the input's shape {list(shape)}, "
                           f"{[1, *shape[1:]] if len(shape) == 3 else list(shape)} or {list(shape[-2:])}")
    names = ["gamma"] + ([] if simplified else ["beta"]) + ["bias"]
    for k, (name, value) in enumerate(zip(names, (gamma, *(() if simplified else (beta,)), bias), strict=True)):
        if value is not None:
            expect_shape(ctx, f"input {k + 2} ({name})", value, f"(H) with H = {hidden}", hidden)


def _skip_sum(ctx, input, skip, bias) -> np.ndarray:
    """input + skip (+ bias): skip is (B, S, H), (1, S, H) or (S, H), broadcast over the batch."""
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
    return y.astype(x.dtype), mean.astype(F32), inv_std.astype(F32)


def _skip_norm_outputs(ctx, y, mean, inv_std, total):
    if ctx.num_outputs == 1:
        return y
    return (y, mean, inv_std, total)[:ctx.num_outputs]


@register("SkipLayerNormalization", 1, domain=MS_DOMAIN)
def skip_layer_normalization(ctx, input, skip, gamma, beta=None, bias=None, *, epsilon=1e-12):
    """LayerNorm(input + skip + bias) over the last axis; outputs (output, mean, inv_std_var,
    input_skip_bias_sum), the statistics of shape (B, S, 1)."""
    check_skip_norm(ctx, input, skip, gamma, beta, bias)
    total = _skip_sum(ctx, input, skip, bias)
    y, mean, inv_std = _normalize_last(total, gamma, beta, float(epsilon), simplified=False)
    return _skip_norm_outputs(ctx, y, mean, inv_std, total)


@register("SkipSimplifiedLayerNormalization", 1, domain=MS_DOMAIN)
def skip_simplified_layer_normalization(ctx, input, skip, gamma, bias=None, *, epsilon=1e-12):
    """RMSNorm(input + skip + bias) over the last axis; outputs (output, mean (zeros: RMS has none),
    inv_std_var, input_skip_bias_sum)."""
    check_skip_norm(ctx, input, skip, gamma, None, bias, simplified=True)
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
        raise layer_error(ctx, f"axis {axis} is out of range for input rank {rank}")
    work = np.float64 if X.dtype == np.float64 or stash_type == 11 else F32
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
        raise layer_error(ctx, f"input_ids must be 2-D (batch, sequence), got {list(input_ids.shape)}")
    if gamma is None or beta is None:
        raise layer_error(ctx, "gamma and beta are required")
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
# Graph-optimizer fusions: FusedConv, NhwcConv, NhwcFusedConv, FusedGemm, FusedMatMul
# ----------------------------------------------------------------------------------------------

# The attributes of each activation a fused op may name, in the order of FusedConv's activation_params.
_ACTIVATION_PARAMS = {"LeakyRelu": ("alpha",), "Clip": ("min", "max"), "HardSigmoid": ("alpha", "beta"),
                      "Elu": ("alpha",), "ThresholdedRelu": ("alpha",), "Selu": ("alpha", "gamma"),
                      "Celu": ("alpha",), "ScaledTanh": ("alpha", "beta"), "Affine": ("alpha", "beta"),
                      "Softplus": (), "Relu": (), "Sigmoid": (), "Tanh": (), "Gelu": ()}


def attr_text(value: Any) -> str:
    """A string attribute as text (the importer may hand it over as bytes)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def fused_activation_of(activation: Any, params: dict[str, float]) -> tuple[str, dict[str, Any]] | None:
    """(op type, attributes) of a fused op's ``activation`` (None where it has none), the way a layer's
    ``fused_activation`` holds it; raises ValueError for an activation not in ACTIVATIONS."""
    if activation is None or attr_text(activation) in ("", "Identity"):
        return None
    name = attr_text(activation)
    if name not in ACTIVATIONS or name not in _ACTIVATION_PARAMS:
        raise ValueError(f"unsupported fused activation '{name}'")
    return name, {k: v for k, v in params.items() if k in ACTIVATIONS[name].attrs}


def conv_activation(activation: Any, activation_params: Any) -> tuple[str, dict[str, Any]] | None:
    """FusedConv's ``activation`` and ``activation_params`` as (op type, attributes), or None."""
    name = None if activation is None else attr_text(activation)
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
        raise layer_error(ctx, str(exc)) from None
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
        raise layer_error(ctx, str(exc)) from None
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


__all__ = ["MS_DOMAIN", "conv_activation", "fused_activation_of", "fused_matmul_operand", "gemm_activation"]
