"""gpu-pixel programs of the norm family: BatchNormalization (inference), InstanceNormalization,
LayerNormalization, GroupNormalization, RMSNormalization, MeanVarianceNormalization, LpNormalization and LRN.

The statistic-based norms are reductions (``reduce_pixel.reduce_keep``: the mean, then the inverse standard
deviation as a reduction of squares centred on that mean, as numpy computes the moments; RMSNormalization's
inverse root mean square is one uncentred reduction of squares) followed by one
texel-wise draw (``reduce_pixel.apply``) that broadcasts statistics, scale and bias onto x in whatever layout x
has. BatchNormalization folds its constant parameters on the host into y = x * a + b per channel
(norm.bn_affine, in float32 as ONNX Runtime forms them) and draws that with its fused activation; LRN draws on
channels-blocked x, loading the neighbouring channel blocks (wgsl/pixel/norm_lrn.wgsl).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from wgsentis.backends.gpu import shader_gen
from wgsentis.backends.gpu.tensors import GTensor, loop_passes
from wgsentis.backends.pixel_layout import MAX_RANK
from wgsentis.ops.matmul_gpu import fused
from wgsentis.ops.norm import bn_affine
from wgsentis.ops.reduce_pixel import (
    OVERHEAD,
    Reduction,
    apply,
    div4_helper,
    host_param,
    norm_axis,
    reduce_keep,
    reduction,
    texel_strides,
    texture,
)
from wgsentis.ops.registry import GPU_PIXEL, register

# (x - mean) * inv_std, times the scale, plus the bias, by (whether a scale is given, whether a bias is)
NORMALIZE = {(False, False): "pixel/expr/normalize.wgsl", (True, False): "pixel/expr/normalize_scale.wgsl",
             (False, True): "pixel/expr/normalize_bias.wgsl", (True, True): "pixel/expr/normalize_scale_bias.wgsl"}


def _param(rec, t: Any, shape: tuple[int, ...], name: str) -> Any:
    """A float32 parameter read as ``shape`` (a host array, cached, or a texture tensor view), or None."""
    if t is None or getattr(t, "dtype", None) != np.float32 or math.prod(t.shape) != math.prod(shape):
        return None
    if isinstance(t, np.ndarray):
        return host_param(rec, t, shape, name)
    g = texture(t)
    if g is None:
        return None
    return rec.view(g, shape) or rec.reshape(g, shape)


def _broadcasts(t: Any, shape: tuple[int, ...]) -> bool:
    """Whether ``t`` broadcasts onto ``shape`` (numpy's rules) without growing it."""
    try:
        return len(t.shape) <= len(shape) and tuple(np.broadcast_shapes(t.shape, shape)) == tuple(shape)
    except ValueError:
        return False


def moments(rec, x: GTensor, axes: set[int], epsilon: float) -> tuple[GTensor, GTensor] | None:
    """(mean, 1 / sqrt(var + epsilon)) of x over ``axes``, kept as size 1; None past what the device runs."""
    length = math.prod(x.shape[d] for d in axes)
    scale = 1.0 / length if length else float("nan")
    mean = reduce_keep(rec, x, axes, Reduction("sum", post="scale", scale=scale))
    if mean is NotImplemented:
        return None
    inv = reduce_keep(rec, x, axes, Reduction("sum", "sq", "invstd", scale=scale, eps=float(epsilon)), center=mean)
    if inv is NotImplemented:
        return None
    return mean, inv


def _activation(rec, layer) -> tuple[str, list[float]] | None:
    """WGSL ``act4(v)``: the layer's fused activation lane by lane (its parameters the words pe(0)...), and those
    parameters; None when it has no WGSL form."""
    try:
        expr, params = fused(layer)
    except (KeyError, ValueError):
        return None
    return shader_gen.activation4(expr, rec.ctx.division_function), [float(p) for p in params]


# -- BatchNormalization -------------------------------------------------------------------------------------
def _fold(hosts: list[np.ndarray], epsilon: float, shape: tuple[int, ...], row: int) -> np.ndarray:
    """Row ``row`` (0: a, 1: b) of inference BatchNormalization as y = x * a + b, in ``shape``."""
    s_, b_, m_, v_ = (np.asarray(h, np.float32).reshape(-1) for h in hosts)
    return bn_affine(s_, b_, m_, v_, epsilon)[row].astype(np.float32).reshape(shape)


def _host(t: Any) -> np.ndarray | None:
    if isinstance(t, np.ndarray):
        return t
    return t.host if isinstance(t, GTensor) else None


@register("BatchNormalization", 1, backend=GPU_PIXEL)
def batch_normalization(rec, layer, X, scale, B, mean, var, *, epsilon=1e-5, is_test=0, spatial=1,
                        training_mode=0, **attrs):
    x = texture(X)
    outputs = [o for o in layer.outputs[1:] if o]
    training = bool(training_mode) if layer.opset >= 14 else (len(layer.outputs) > 1 and not is_test)
    if training or outputs or x is None or x.dtype != np.float32 or not 2 <= x.ndim <= MAX_RANK:
        return NotImplemented  # training statistics run on the CPU
    act = _activation(rec, layer)
    if act is None:
        return NotImplemented
    helper, act_words = act
    c = x.shape[1]
    per_position = scale.ndim == x.ndim - 1 and scale.ndim > 1  # spatial=0: one value per (channel, position)
    shape = tuple(x.shape[1:]) if per_position else (c,) + (1,) * (x.ndim - 2)
    raw = (scale, B, mean, var)
    if any(getattr(t, "dtype", None) != np.float32 or math.prod(t.shape) != math.prod(shape) for t in raw):
        return NotImplemented
    hosts = [_host(t) for t in raw]
    if all(h is not None for h in hosts):
        # Constant parameters: folded once per program into a and b.
        fold_shape = shape if per_position else (c,)
        a, b = (rec.program.constants.derived(("pixel-bn", float(epsilon), fold_shape, row), tuple(hosts),
                                              lambda row=row: _fold(hosts, epsilon, fold_shape, row))
                for row in (0, 1))
        if per_position:
            y = apply(rec, x, [a, b], "pixel/expr/bn_folded.wgsl", act_words, helper)
        else:
            y = _channel_affine(rec, layer, x, a, b, act_words)
    else:
        ops = [_param(rec, t, shape, f"{layer.name}:{k}") for k, t in enumerate(raw)]
        if any(o is None for o in ops):
            return NotImplemented
        y = apply(rec, x, ops, "pixel/expr/bn_params.wgsl", [*act_words, float(np.float32(epsilon))], helper)
    return y if len(layer.outputs) == 1 else (y,) + (None,) * (len(layer.outputs) - 1)


def _channel_affine(rec, layer, x: GTensor, a: np.ndarray, b: np.ndarray, act_words: list[float]) -> GTensor:
    """y = act(x * a[c] + b[c]) texel by texel in x's layout (wgsl/pixel/norm_affine.wgsl), a and b (C,)."""
    y = rec.alloc(x.shape, np.float32, x.layout.axis)
    ga, gb = rec.upload(a, f"{layer.name}:a", 0), rec.upload(b, f"{layer.name}:b", 0)
    expr, _params = fused(layer)
    params = [x.layout.texels, x.layout.shift, texel_strides(x.layout)[1], x.layout.blocked_shape[1],
              ga.layout.shift, *x.layout.lane_params(), *act_words]
    rec.draw("pixel/norm_affine.wgsl", [x, ga, gb], [y], params, constants={"CHANNELS_BLOCKED": x.layout.axis == 1},
             subs={"ACT": shader_gen.with_division(expr, rec.ctx.division_function)})
    return y


# -- statistic-based norms ----------------------------------------------------------------------------------
def _normalized(rec, x: GTensor, axes: set[int], epsilon: float, scale: Any = None, bias: Any = None,
                with_stats: bool = False):
    """(x - mean) * inv (* scale) (+ bias) over ``axes``; scale and bias already broadcast onto x."""
    stats = moments(rec, x, axes, epsilon)
    if stats is None:
        return NotImplemented
    mean, inv = stats
    ops: list[Any] = [mean, inv, *(p for p in (scale, bias) if p is not None)]
    expr = NORMALIZE[scale is not None, bias is not None]
    y = apply(rec, x, ops, expr)
    return (y, mean, inv) if with_stats else y


@register("InstanceNormalization", 1, backend=GPU_PIXEL)
def instance_normalization(rec, layer, input, scale, B, *, epsilon=1e-5, **attrs):
    x = texture(input)
    if x is None or x.dtype != np.float32 or not 3 <= x.ndim <= MAX_RANK:
        return NotImplemented
    shape = (x.shape[1],) + (1,) * (x.ndim - 2)
    s, b = _param(rec, scale, shape, f"{layer.name}:scale"), _param(rec, B, shape, f"{layer.name}:bias")
    if s is None or b is None:
        return NotImplemented
    return _normalized(rec, x, set(range(2, x.ndim)), epsilon, s, b)


@register("LayerNormalization", 1, backend=GPU_PIXEL)
@register("LayerNormalization", 17, backend=GPU_PIXEL)
def layer_normalization(rec, layer, X, Scale, B=None, *, axis=-1, epsilon=1e-5, stash_type=1, **attrs):
    x = texture(X)
    if x is None or x.dtype != np.float32 or x.ndim > MAX_RANK:
        return NotImplemented
    n_out = len(layer.outputs)
    if n_out > 1 and stash_type != 1:
        return NotImplemented  # Mean and InvStdDev would be float64
    rank = x.ndim
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        return NotImplemented
    params = []
    for t in (Scale, B):
        if t is None:
            params.append(None)
            continue
        if getattr(t, "dtype", None) != np.float32 or not _broadcasts(t, x.shape):
            return NotImplemented
        params.append(t)
    out = _normalized(rec, x, set(range(axis, rank)), epsilon, *params, with_stats=n_out > 1)
    if out is NotImplemented or n_out == 1:
        return out
    return out[:n_out]


@register("RMSNormalization", 23, backend=GPU_PIXEL)
def rms_normalization(rec, layer, X, scale, *, axis=-1, epsilon=1e-5, stash_type=1, **attrs):
    """x / sqrt(mean(x^2 over [axis, rank)) + epsilon) * scale: the inverse root as one reduction of squares, then
    one apply draw (stash_type 11 would compute in float64 on the CPU: float32 here, as on gpu-compute)."""
    x = texture(X)
    if x is None or x.dtype != np.float32 or x.ndim > MAX_RANK:
        return NotImplemented
    a = norm_axis(axis, x.ndim) if x.ndim else None
    if a is None or getattr(scale, "dtype", None) != np.float32 or not _broadcasts(scale, x.shape):
        return NotImplemented
    axes = set(range(a, x.ndim))
    length = math.prod(x.shape[d] for d in axes)
    inv = reduce_keep(rec, x, axes, Reduction("sum", "sq", "invstd", scale=1.0 / length if length else float("nan"),
                                              eps=float(epsilon)))
    if inv is NotImplemented:
        return inv
    return apply(rec, x, [inv, scale], "pixel/expr/rms_normalize.wgsl")


def _group_norm(rec, layer, X, scale, bias, num_groups, epsilon, per_channel: bool | None):
    x = texture(X)
    if x is None or x.dtype != np.float32 or not 2 <= x.ndim < MAX_RANK or num_groups is None:
        return NotImplemented
    n, c = x.shape[:2]
    g = int(num_groups)
    if g <= 0 or c % g:
        return NotImplemented
    if per_channel is None:
        per_channel = math.prod(getattr(scale, "shape", ())) == c
    spatial = tuple(x.shape[2:])
    grouped = (n, g, c // g, *spatial)  # (N, G, C/G, *spatial)
    pshape = (g, c // g) + (1,) * len(spatial) if per_channel else (g,) + (1,) * (len(spatial) + 1)
    s = _param(rec, scale, pshape, f"{layer.name}:scale")
    b = _param(rec, bias, pshape, f"{layer.name}:bias")
    if s is None or b is None:
        return NotImplemented
    xg = rec.reshape(x, grouped, -1)
    y = _normalized(rec, xg, set(range(2, len(grouped))), epsilon, s, b)
    if y is NotImplemented:
        return y
    return rec.reshape(y, x.shape, x.layout.axis)


@register("GroupNormalization", 18, backend=GPU_PIXEL)
def group_normalization_18(rec, layer, X, scale, bias, *, epsilon=1e-5, num_groups=None, **attrs):
    return _group_norm(rec, layer, X, scale, bias, num_groups, epsilon, None)


@register("GroupNormalization", 21, backend=GPU_PIXEL)
def group_normalization_21(rec, layer, X, scale, bias, *, epsilon=1e-5, num_groups=None, stash_type=1, **attrs):
    return _group_norm(rec, layer, X, scale, bias, num_groups, epsilon, True)


@register("MeanVarianceNormalization", 9, backend=GPU_PIXEL)
def mean_variance_normalization(rec, layer, X, *, axes=(0, 2, 3), **attrs):
    x = texture(X)
    if x is None or x.dtype != np.float32 or x.ndim > MAX_RANK:
        return NotImplemented
    resolved = set()
    for a in axes:
        d = norm_axis(a, x.ndim)
        if d is None:
            return NotImplemented
        resolved.add(d)
    length = math.prod(x.shape[d] for d in resolved)
    mean = reduce_keep(rec, x, resolved, reduction("mean", length))
    if mean is NotImplemented:
        return mean
    square = reduce_keep(rec, x, resolved, Reduction("sum", "sq", "scale", scale=1.0 / length if length else
                                                     float("nan")))
    if square is NotImplemented:
        return square
    # (x - mean) / (sqrt(max(E[x^2] - mean^2, 0)) + 1e-9), as the CPU kernel
    return apply(rec, x, [mean, square], "pixel/expr/mean_variance_normalize.wgsl", helpers=div4_helper(rec))


@register("LpNormalization", 1, backend=GPU_PIXEL)
def lp_normalization(rec, layer, input, *, axis=-1, p=2, **attrs):
    x = texture(input)
    if x is None or x.dtype != np.float32 or p not in (1, 2) or x.ndim == 0 or x.ndim > MAX_RANK:
        return NotImplemented
    a = norm_axis(axis, x.ndim)
    if a is None:
        return NotImplemented
    norm = reduce_keep(rec, x, {a}, reduction("l1" if p == 1 else "l2", x.shape[a]))
    if norm is NotImplemented:
        return norm
    return apply(rec, x, [norm], "pixel/expr/lp_normalize.wgsl", helpers=div4_helper(rec))


@register("LRN", 1, backend=GPU_PIXEL)
def lrn(rec, layer, X, *, alpha=1e-4, beta=0.75, bias=1.0, size=None, **attrs):
    x = texture(X)
    if x is None or x.dtype != np.float32 or x.ndim < 2 or x.ndim > MAX_RANK or size is None:
        return NotImplemented
    size = int(size)
    if size < 1 or not rec.loops_fit(loop_passes(size // 4 + 3) + OVERHEAD):
        return NotImplemented
    lo = (size - 1) // 2
    hi = size - 1 - lo
    x = rec.relayout(x, 1)  # channels blocked: a window is the neighbouring texels' lanes
    y = rec.alloc(x.shape, np.float32, 1)
    if y.size == 0:
        return y
    inner, blocks, rem = x.layout.lane_params()
    params = [x.layout.texels, x.layout.shift, inner, blocks, x.shape[1], lo, hi, float(np.float32(alpha / size)),
              float(bias), float(beta), rem]
    rec.draw("pixel/norm_lrn.wgsl", [x], [y], params, constants={"B075": beta == 0.75},
             subs={"DIV": rec.ctx.division_function})
    return y
