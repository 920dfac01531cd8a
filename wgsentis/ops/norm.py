"""Normalization operators: BatchNormalization, LayerNormalization, InstanceNormalization,
GroupNormalization, LRN, LpNormalization, MeanVarianceNormalization, RMSNormalization.

Inference BatchNormalization folds into one per-channel affine ``x * a + b`` (two passes, done in
place). The statistic-based norms compute their moments in the ``stash_type`` precision (float32
for float16/bfloat16 inputs) and return the input dtype.
"""

from __future__ import annotations

import math

import numpy as np

from wgsentis.ops.numeric import LONG_SUM, sum_dtype
from wgsentis.ops.parallel import kernel_threads, kernel_workspace, run_split
from wgsentis.ops.registry import register, register_flops

_FLOAT_KINDS = (np.dtype(np.float32), np.dtype(np.float64))


def _work_dtype(x: np.ndarray, stash_type: int = 1) -> np.dtype:
    """Precision for statistics: float64 stays float64, float32 otherwise (stash_type 1 = float)."""
    if x.dtype == np.float64 or stash_type == 11:
        return np.dtype(np.float64)
    return np.dtype(np.float32)


def _channel_shape(x: np.ndarray, param: np.ndarray) -> tuple[int, ...]:
    """Broadcast shape of a per-channel parameter (or a (C, *spatial) one, as in spatial=0)."""
    param = np.asarray(param)
    if param.ndim == x.ndim - 1 and param.ndim > 1:
        return (1, *param.shape)
    return (1, -1) + (1,) * (x.ndim - 2)


def _moments(x: np.ndarray, axes: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, x - mean, biased variance) over ``axes`` with kept dims, in x's dtype; long rows accumulate in
    float64 (``numeric.sum_dtype``), so their error does not grow with the row."""
    acc = sum_dtype(x, axes)
    mean = _mean(x, axes, acc).astype(x.dtype, copy=False)
    centered = x - mean
    var = _mean(centered * centered, axes, acc).astype(x.dtype, copy=False)
    return mean, centered, var


def _mean(x: np.ndarray, axes: tuple[int, ...], acc: np.dtype | None) -> np.ndarray:
    """``np.mean(x, axes, keepdims=True, dtype=acc)``, bit for bit, without its Python wrapper: the same sum and
    the same division by the element count (as numpy's intp, cast back unsafely). The wrapper cost a decoder's
    LayerNormalization on one token (256 values) more than its arithmetic; float16 keeps numpy's own path,
    which sums in float32."""
    if x.dtype.kind != "f" or x.dtype.itemsize < 4:
        return np.mean(x, axis=axes, keepdims=True, dtype=acc)
    total = np.add.reduce(x, axis=axes, dtype=acc, keepdims=True)
    return np.true_divide(total, np.intp(math.prod(x.shape[a] for a in axes)), out=total, casting="unsafe")


# --------------------------------------------------------------------------------------------
# BatchNormalization
# --------------------------------------------------------------------------------------------


def bn_affine(scale: np.ndarray, bias: np.ndarray, mean: np.ndarray, var: np.ndarray,
              epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    """Inference BatchNormalization as y = x * a + b, in the parameters' precision and ONNX Runtime's order
    (a = scale * (1 / sqrt(var + epsilon)), b = bias - mean * a), so that quantized models, which re-round
    every layer's output, see the same values as under ONNX Runtime."""
    dtype = np.result_type(scale, var)
    inv_std = dtype.type(1) / np.sqrt(var + dtype.type(epsilon))
    a = scale * inv_std
    return a, bias - mean * a

@register("BatchNormalization", 1)
def batch_normalization(ctx, X, scale, B, mean, var, *, consumed_inputs=None, epsilon=1e-5, is_test=0,
                        momentum=0.9, spatial=1, training_mode=0):
    """BatchNormalization: inference affine; batch statistics when training_mode=1 (opset 14+)
    or when an opset < 14 node asks for its running/saved statistics outputs."""
    dtype = X.dtype if X.dtype in _FLOAT_KINDS else np.dtype(np.float32)
    x = X.astype(dtype, copy=False)
    pshape = _channel_shape(x, scale)
    scale_c = np.asarray(scale).astype(dtype).reshape(pshape)
    bias_c = np.asarray(B).astype(dtype).reshape(pshape)
    training = bool(training_mode) if ctx.opset >= 14 else (ctx.num_outputs > 1 and not is_test)
    if not training:
        a, b = bn_affine(scale_c, bias_c, np.asarray(mean).astype(dtype).reshape(pshape),
                         np.asarray(var).astype(dtype).reshape(pshape), epsilon)
        y = x * a
        y += b
        if y.dtype == X.dtype and hasattr(ctx, "take_activation"):
            # A fused activation (DenseNet's BatchNormalization + Relu) in place: no pass of its own,
            # no second output array.
            activation = ctx.take_activation()
            if activation is not None:
                activation(y)
        y = y.astype(X.dtype, copy=False)
        return y if ctx.num_outputs == 1 else (y,) + (None,) * (ctx.num_outputs - 1)
    axes = (0, *range(2, x.ndim)) if pshape[1] == -1 else (0,)  # spatial=0: per-element statistics
    batch_mean, centered, batch_var = _moments(x, axes)
    y = centered / np.sqrt(batch_var + dtype.type(epsilon)) * scale_c + bias_c
    batch_mean = batch_mean.reshape(np.shape(mean))
    batch_var = batch_var.reshape(np.shape(var))
    mom = dtype.type(momentum)
    running_mean = np.asarray(mean).astype(dtype) * mom + batch_mean * (1 - mom)
    running_var = np.asarray(var).astype(dtype) * mom + batch_var * (1 - mom)
    p_dtype = np.asarray(mean).dtype
    outs = (y.astype(X.dtype, copy=False), running_mean.astype(p_dtype), running_var.astype(p_dtype),
            batch_mean.astype(p_dtype), batch_var.astype(p_dtype))
    return outs[:ctx.num_outputs] if ctx.num_outputs > 1 else outs[0]


# --------------------------------------------------------------------------------------------
# LayerNormalization / RMSNormalization
# --------------------------------------------------------------------------------------------

# ONNX Runtime registers LayerNormalization in the ONNX domain from version 1 (its optimizer writes it into
# models of opsets before 17): the same operator.
@register("LayerNormalization", 1)
@register("LayerNormalization", 17)
def layer_normalization(ctx, X, Scale, B=None, *, axis=-1, epsilon=1e-5, stash_type=1):
    """LayerNormalization over dims [axis, rank); outputs Y, Mean and InvStdDev (stash dtype)."""
    rank = X.ndim
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        raise ValueError(f"LayerNormalization axis {axis} out of range for rank {rank}")
    if (axis == rank - 1 and ctx.num_outputs == 1 and stash_type == 1 and X.dtype == np.float32
            and Scale.dtype == np.float32 and (B is None or B.dtype == np.float32) and X.shape[-1] < LONG_SUM):
        return _layer_norm_rows(X, Scale, B, epsilon)
    work = _work_dtype(X, stash_type)
    x = X.astype(work, copy=False)
    axes = tuple(range(axis, rank))
    mean, centered, var = _moments(x, axes)
    inv_std = 1.0 / np.sqrt(var + work.type(epsilon))
    y = centered * inv_std
    y *= Scale.astype(work, copy=False)
    if B is not None:
        y += B.astype(work, copy=False)
    y = y.astype(X.dtype, copy=False)
    if ctx.num_outputs == 1:
        return y
    return (y, mean.astype(work, copy=False), inv_std.astype(work, copy=False))[:ctx.num_outputs]


def _layer_norm_rows(x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None, epsilon: float) -> np.ndarray:
    """LayerNormalization of float32 rows shorter than ``LONG_SUM`` over the last axis, Y only: the general path's
    arithmetic, bit for bit (float32 sums; a float32 division by the row length is the float64 one rounded once),
    in a third of its numpy calls: a decoder's nine a token on one 256-wide row cost their dtype checks and
    conversions more than their arithmetic."""
    n = x.shape[-1]
    mean = np.add.reduce(x, axis=-1, keepdims=True)
    mean /= n
    centered = x - mean
    var = np.add.reduce(centered * centered, axis=-1, keepdims=True)
    var /= n
    var += np.float32(epsilon)
    y = centered * (1.0 / np.sqrt(var))
    y *= scale
    if bias is not None:
        y += bias
    return y


@register("RMSNormalization", 23)
def rms_normalization(ctx, X, scale, *, axis=-1, epsilon=1e-5, stash_type=1):
    """RMSNormalization: x / sqrt(mean(x^2 over [axis, rank)) + epsilon) * scale."""
    rank = X.ndim
    axis = axis + rank if axis < 0 else axis
    work = _work_dtype(X, stash_type)
    x = X.astype(work, copy=False)
    axes = tuple(range(axis, rank))
    mean_sq = np.mean(x * x, axis=axes, keepdims=True, dtype=sum_dtype(x, axes)).astype(work, copy=False)
    y = x * (1.0 / np.sqrt(mean_sq + work.type(epsilon))).astype(work)
    y *= scale.astype(work, copy=False)
    return y.astype(X.dtype, copy=False)


# --------------------------------------------------------------------------------------------
# InstanceNormalization / GroupNormalization / MeanVarianceNormalization
# --------------------------------------------------------------------------------------------

@register("InstanceNormalization", 1)
def instance_normalization(ctx, input, scale, B, *, consumed_inputs=None, epsilon=1e-5):
    """InstanceNormalization: per (n, c) statistics over the spatial dims."""
    work = _work_dtype(input)
    x = input.astype(work, copy=False)
    _, centered, var = _moments(x, tuple(range(2, x.ndim)))
    pshape = (1, -1) + (1,) * (x.ndim - 2)
    y = centered * (scale.astype(work).reshape(pshape) / np.sqrt(var + work.type(epsilon)))
    y += B.astype(work).reshape(pshape)
    return y.astype(input.dtype, copy=False)


def _group_norm(ctx, X, scale, bias, num_groups, epsilon, stash_type, per_channel: bool | None):
    if num_groups is None:
        raise ValueError("GroupNormalization requires num_groups")
    n, c = X.shape[:2]
    g = int(num_groups)
    if c % g:
        raise ValueError(f"GroupNormalization: {c} channels not divisible by num_groups {g}")
    work = _work_dtype(X, stash_type)
    x = X.astype(work, copy=False).reshape(n, g, -1)
    _, centered, var = _moments(x, (2,))
    y = (centered / np.sqrt(var + work.type(epsilon))).reshape(X.shape)
    scale = np.asarray(scale).astype(work).reshape(-1)
    bias = np.asarray(bias).astype(work).reshape(-1)
    if per_channel is None:
        per_channel = scale.size == c
    if not per_channel:
        # Opset 18: one scale/bias per group, expanded onto that group's channels.
        scale = np.repeat(scale, c // g)
        bias = np.repeat(bias, c // g)
    pshape = (1, c) + (1,) * (X.ndim - 2)
    y *= scale.reshape(pshape)
    y += bias.reshape(pshape)
    return y.astype(X.dtype, copy=False)


@register("GroupNormalization", 18)
def group_normalization_18(ctx, X, scale, bias, *, epsilon=1e-5, num_groups=None):
    """GroupNormalization-18: scale and bias hold one value per group (per channel also accepted)."""
    return _group_norm(ctx, X, scale, bias, num_groups, epsilon, 1, None)


@register("GroupNormalization", 21)
def group_normalization_21(ctx, X, scale, bias, *, epsilon=1e-5, num_groups=None, stash_type=1):
    """GroupNormalization-21: scale and bias hold one value per channel."""
    return _group_norm(ctx, X, scale, bias, num_groups, epsilon, stash_type, True)


@register("MeanVarianceNormalization", 9)
def mean_variance_normalization(ctx, X, *, axes=(0, 2, 3)):
    """MeanVarianceNormalization: (x - mean) / (sqrt(E[x^2] - E[x]^2) + 1e-9) over ``axes``."""
    work = _work_dtype(X)
    x = X.astype(work, copy=False)
    axes = tuple(int(a) + x.ndim if int(a) < 0 else int(a) for a in axes)
    acc = sum_dtype(x, axes)
    mean = x.mean(axis=axes, keepdims=True, dtype=acc).astype(work, copy=False)
    var = np.mean(x * x, axis=axes, keepdims=True, dtype=acc).astype(work, copy=False) - mean * mean
    y = (x - mean) / (np.sqrt(np.maximum(var, 0)) + work.type(1e-9))
    return y.astype(X.dtype, copy=False)


# --------------------------------------------------------------------------------------------
# LRN / LpNormalization
# --------------------------------------------------------------------------------------------

_LRN_SPLIT_ELEMENTS = 1 << 18  # below this, one thread: a hand-off costs more


@register("LRN", 1)
def lrn(ctx, X, *, alpha=1e-4, beta=0.75, bias=1.0, size=None):
    """LRN across channels: x / (bias + alpha/size * windowed sum of x^2)^beta.

    The window sum is ``size`` shifted-slice adds over the zero-padded channel axis. Every output
    position depends only on its own column of channels, so large inputs are split over the worker's
    threads along the first spatial axis, computed in place in the output (ZFNet's first LRN, 96ch@110,
    inside the model: 2.6 -> 1.6-1.8 ms on 2 threads)."""
    if size is None:
        raise ValueError("LRN requires size")
    size = int(size)
    work = _work_dtype(X)
    x = X.astype(work, copy=False)
    c = x.shape[1]
    lo = (size - 1) // 2
    hi = size - 1 - lo
    y = np.empty(x.shape, dtype=work)
    workspace = kernel_workspace(ctx)

    def part(index: tuple) -> None:
        xs = x[index]
        sq = workspace.scratch("lrn_sq", (xs.shape[0], c + lo + hi, *xs.shape[2:]), work)
        sq[:, :lo] = 0
        sq[:, lo + c:] = 0
        np.multiply(xs, xs, out=sq[:, lo:lo + c])
        denom = y[index]  # the window sum, then the denominator, then the output, in place
        np.copyto(denom, sq[:, 0:c])
        for offset in range(1, size):
            denom += sq[:, offset:offset + c]
        denom *= work.type(alpha / size)
        denom += work.type(bias)
        if beta == 0.75:
            # x^0.75 = sqrt(x) * sqrt(sqrt(x)) is much cheaper than pow.
            root = np.sqrt(denom)
            np.sqrt(root, out=denom)
            denom *= root
        else:
            np.power(denom, work.type(beta), out=denom)
        np.divide(xs, denom, out=denom)

    threads = kernel_threads(ctx)
    if x.ndim > 2 and x.shape[2] >= threads > 1 and x.size >= _LRN_SPLIT_ELEMENTS:
        run_split(x.shape[2], threads, lambda a, b: part((slice(None), slice(None), slice(a, b))),
                  workspace=workspace)
    else:
        part((slice(None),) * x.ndim)
    return y.astype(X.dtype, copy=False)


@register("LpNormalization", 1)
def lp_normalization(ctx, input, *, axis=-1, p=2):
    """LpNormalization along ``axis`` (p = 1 or 2); a zero norm gives 0."""
    x = input
    if p == 1:
        norm = np.abs(x).sum(axis=axis, keepdims=True, dtype=sum_dtype(x, axis)).astype(x.dtype, copy=False)
    elif p == 2:
        norm = np.sqrt((x * x).sum(axis=axis, keepdims=True, dtype=sum_dtype(x, axis))).astype(x.dtype, copy=False)
    else:
        raise ValueError(f"LpNormalization supports p = 1 or 2, got {p}")
    safe = np.where(norm == 0, 1, norm)
    y = np.where(norm == 0, 0, x / safe)
    return y.astype(input.dtype, copy=False)


# --------------------------------------------------------------------------------------------
# FLOPs
# --------------------------------------------------------------------------------------------

def _elements(shapes) -> int:
    return math.prod(shapes[0]) if shapes and shapes[0] is not None else 0


@register_flops("BatchNormalization")
def batch_norm_flops(layer, in_shapes, out_shapes) -> int:
    """2 FLOPs per element: inference BatchNormalization is the folded affine x * a + b."""
    return 2 * _elements(in_shapes)


@register_flops("LayerNormalization", "InstanceNormalization", "GroupNormalization", "RMSNormalization",
                "MeanVarianceNormalization")
def moment_norm_flops(layer, in_shapes, out_shapes) -> int:
    """8 FLOPs per element: mean (1), centre (1), square + sum (2), normalise (2), scale + bias (2)."""
    return 8 * _elements(in_shapes)


@register_flops("LRN")
def lrn_flops(layer, in_shapes, out_shapes) -> int:
    """(size + 4) FLOPs per element: square, size-wide window sum, scale/offset, power and divide."""
    return (int(layer.attrs.get("size", 1)) + 4) * _elements(in_shapes)


@register_flops("LpNormalization")
def lp_norm_flops(layer, in_shapes, out_shapes) -> int:
    """3 FLOPs per element: |x| or x^2, the sum, and the divide."""
    return 3 * _elements(in_shapes)
