"""gpu-compute programs of the norm family: BatchNormalization (inference), LayerNormalization,
InstanceNormalization, GroupNormalization, RMSNormalization, MeanVarianceNormalization,
LpNormalization and LRN.

The statistic-based norms run two dispatches: per-row statistics (norm_stats.wgsl, one invocation per
row; norm_stats_wg.wgsl, one workgroup per row, when rows are few and long) giving a mean and a
multiplier per row, then one elementwise pass (norm_apply.wgsl) that broadcasts statistics, scale and
bias to every element through strides. Rows are laid out as for the reductions (reduce_gpu.row_params),
so any axis set fits. BatchNormalization and LRN are single elementwise passes.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from wgsentis.backends.gpu.tensors import loop_passes
from wgsentis.ops.elementwise_gpu import broadcast_strides, fused_activation
from wgsentis.ops.reduce_gpu import norm_axis, row_params, sum_passes
from wgsentis.ops.norm import bn_affine
from wgsentis.ops.registry import GPU_COMPUTE, register

MAX_RANK = 6
WG_ROWS = 256  # below this many rows ...
WG_LENGTH = 256  # ... of at least this length, a workgroup reduces each row
# Invocations per row in norm_rows.wgsl. Small on purpose: on lavapipe every invocation adds up all
# WG partial sums after the barrier, and 16 measured 2x faster than 64 on LayerNorm (197, 768).
FUSED_WG = 16
FUSED_MIN_LENGTH = 32  # shorter rows: statistics one invocation per row, then the elementwise pass
# Invocations per row of norm_stats_wg.wgsl when the narrower forms would loop longer than the device runs
# (GPUContext.max_loop_iterations): rows of millions of elements stay on the GPU.
WIDE_WG = 256
STAT_VAR, STAT_MVN, STAT_RMS, STAT_L1, STAT_L2 = range(5)


GRID_WG = 256  # workgroup size of the per-plane elementwise passes (BatchNormalization, LRN)


def _plane_grid(n: int, c: int, inner: int, limit: int) -> tuple[int, int, int] | None:
    """A (ceil(inner / GRID_WG), C, N) grid for per-channel elementwise passes, so that shaders read the
    channel from the workgroup id instead of dividing; None when planes are short or dims exceed the
    device's per-dimension ``limit``."""
    groups = math.ceil(inner / GRID_WG)
    if inner < 64 or max(groups, c, n) > limit:
        return None
    return (groups, c, n)


def _is_gpu(t: Any) -> bool:
    return hasattr(t, "alloc") and hasattr(t, "gpu_type")


def _f32_param(rec, t: Any, name: str):
    """A float32 parameter as a device tensor (host constants uploaded), or None if it is not one."""
    if t is None or getattr(t, "dtype", None) != np.float32:
        return None
    return t if _is_gpu(t) else rec.upload(np.asarray(t), name)


def coalesce(shape: tuple[int, ...], *stride_lists: list[int]) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 dims and merge adjacent dims that every stride list walks contiguously."""
    dims: list[int] = []
    lists: list[list[int]] = [[] for _ in stride_lists]
    for d, size in enumerate(shape):
        if size == 1:
            continue
        if dims and all(s[-1] == st[d] * size for s, st in zip(lists, stride_lists, strict=True)):
            dims[-1] *= size
            for s, st in zip(lists, stride_lists, strict=True):
                s[-1] = st[d]
            continue
        dims.append(size)
        for s, st in zip(lists, stride_lists, strict=True):
            s.append(st[d])
    if not dims:
        return [1], [[0] for _ in stride_lists]
    return dims, lists


def stats(rec, x, shape: tuple[int, ...], axes: set[int], stat: int, epsilon: float, keep_shape: tuple[int, ...]):
    """Record per-row (mean, multiplier) of ``x`` viewed as ``shape`` reduced over ``axes``; both
    tensors have ``keep_shape``. Returns (mean, inv) or None when the axis set does not fit, or the rows are
    longer than even WIDE_WG invocations each loop over on this device."""
    layout = row_params(shape, axes)
    if layout is None:
        return None
    words, rows, length = layout
    sweeps = 2 if stat == STAT_VAR else 1  # the variance takes a second sweep, around the mean
    wg = FUSED_WG if rows < WG_ROWS and length >= WG_LENGTH else 0  # 0: one invocation per row
    if not rec.loops_fit(_stats_passes(length, words[1], sweeps, wg)):
        wg = WIDE_WG
        if not rec.loops_fit(_stats_passes(length, words[1], sweeps, wg)):
            return None
    mean = rec.alloc(keep_shape, np.float32)
    inv = rec.alloc(keep_shape, np.float32)
    params = [rows, length, float(epsilon), 1.0 / length if length else float("nan"), 0, 0, 0, 0, *words]
    if wg:
        rec.dispatch("compute/norm_stats_wg.wgsl", [x], [mean, inv], params, rows * wg, workgroup=wg,
                     constants={"STAT": stat})
    else:
        rec.dispatch("compute/norm_stats.wgsl", [x], [mean, inv], params, rows, workgroup=64,
                     constants={"STAT": stat})
    return mean, inv


def _stats_passes(length: int, reduced_groups: int, sweeps: int, wg: int) -> int:
    """Loop passes of one invocation of norm_stats.wgsl (``wg`` 0) or norm_stats_wg.wgsl (``wg`` invocations
    per row: a strided part of each sweep, then the sum of the ``wg`` partial sums); each sweep sums in blocks
    (reduce_gpu.sum_passes)."""
    if not wg:
        return sweeps * sum_passes(length, reduced_groups)
    return sweeps * (sum_passes(-(-length // wg), reduced_groups) + loop_passes(wg))


def apply(rec, x, shape: tuple[int, ...], mean, inv, stat_strides: list[int], scale=None, bias=None,
          param_strides: list[int] | None = None):
    """Record y = (x - mean) * inv (* scale) (+ bias) over ``x`` viewed as ``shape``; returns y
    (shaped as x) or NotImplemented past MAX_RANK."""
    param_strides = param_strides or [0] * len(shape)
    dims, (sst, pst) = coalesce(shape, stat_strides, param_strides)
    if len(dims) > MAX_RANK:
        return NotImplemented
    pad = MAX_RANK - len(dims)
    y = rec.alloc(x.shape, np.float32)
    params = [x.size, len(dims), *dims, *([1] * pad), *sst, *([0] * pad), *pst, *([0] * pad)]
    bindings = [x, mean, inv, scale if scale is not None else x, bias if bias is not None else x]
    flags = {"HAS_SCALE": scale is not None, "HAS_BIAS": bias is not None}
    rec.dispatch("compute/norm_apply.wgsl", bindings, [y], params, x.size, workgroup=256, constants=flags)
    return y


def fused_rows(rec, x, rows: int, length: int, stat: int, epsilon: float, keep_shape: tuple[int, ...],
               scale=None, bias=None, pmode: int = 0, pmod: int = 1, runs: int = 1, run_length: int = 1):
    """Record one workgroup per contiguous row of ``x`` (rows x length): statistics and the normalized
    row in one dispatch (norm_rows.wgsl). Returns (y, mean, inv), the last two of ``keep_shape``, or None
    when its loops are longer than the device runs (the separate statistics then take a wider workgroup)."""
    pmode = pmode if scale is not None else 0
    sweeps = 2 if stat == STAT_VAR else 1
    strided = -(-length // FUSED_WG)
    write = loop_passes(runs, -(-run_length // FUSED_WG)) if pmode == 3 else loop_passes(strided)
    if not rec.loops_fit(sweeps * (sum_passes(strided) + loop_passes(FUSED_WG)) + write):
        return None
    y = rec.alloc(x.shape, np.float32)
    mean = rec.alloc(keep_shape, np.float32)
    inv = rec.alloc(keep_shape, np.float32)
    params = [rows, length, float(epsilon), 1.0 / length if length else float("nan"), pmod, runs, run_length]
    bindings = [x, scale if scale is not None else x, bias if bias is not None else x]
    consts = {"STAT": stat, "PMODE": pmode, "HAS_BIAS": bias is not None}
    rec.dispatch("compute/norm_rows.wgsl", bindings, [y, mean, inv], params, rows * FUSED_WG, workgroup=FUSED_WG,
                 constants=consts)
    return y, mean, inv


def _keep_shape(shape: tuple[int, ...], axes: set[int]) -> tuple[int, ...]:
    return tuple(1 if d in axes else s for d, s in enumerate(shape))


def _normalize(rec, x, shape, axes: set[int], stat: int, epsilon: float, scale=None, bias=None,
               param_strides: list[int] | None = None, with_stats: bool = False):
    """Statistics over ``axes`` of x viewed as ``shape``, then the elementwise pass."""
    keep = _keep_shape(shape, axes)
    got = stats(rec, x, shape, axes, stat, epsilon, keep)
    if got is None:
        return NotImplemented
    mean, inv = got
    y = apply(rec, x, shape, mean, inv, broadcast_strides(keep, shape), scale, bias, param_strides)
    if y is NotImplemented or not with_stats:
        return y
    return y, mean, inv


def _normalize_trailing(rec, x, axis: int, stat: int, epsilon: float, scale=None, bias=None,
                        with_stats: bool = False):
    """Normalize over the trailing dims [axis, rank) of x; scale/bias (if any) broadcast onto x."""
    shape = x.shape
    length = math.prod(shape[axis:])
    keep = _keep_shape(shape, set(range(axis, x.ndim)))
    strides = None
    if scale is not None:
        strides = _param_strides(scale, shape)
        if strides is None or (bias is not None and _param_strides(bias, shape) != strides):
            return NotImplemented
    # The usual case: one scale value per position in the row (the normalized shape itself).
    contiguous = broadcast_strides(shape[axis:], shape[axis:])
    per_position = scale is None or strides == [0] * axis + contiguous
    out = None
    if length >= FUSED_MIN_LENGTH and per_position:
        out = fused_rows(rec, x, math.prod(shape[:axis]), length, stat, epsilon, keep, scale, bias, 1)
    if out is not None:
        return out if with_stats else out[0]
    return _normalize(rec, x, shape, set(range(axis, x.ndim)), stat, epsilon, scale, bias, strides, with_stats)


def _param_strides(param, shape: tuple[int, ...]) -> list[int] | None:
    """Strides broadcasting ``param`` (numpy rules) onto ``shape``, or None when it does not broadcast."""
    try:
        if tuple(np.broadcast_shapes(param.shape, shape)) != tuple(shape):
            return None
    except ValueError:
        return None
    return broadcast_strides(param.shape, shape)


# -- BatchNormalization -------------------------------------------------------------------------------
def _bn_affine(hosts: list[np.ndarray], epsilon: float) -> np.ndarray:
    """Inference BatchNormalization's (scale, bias, mean, var) as y = x * a + b: (2, C) rows a and b."""
    s_, b_, m_, v_ = (np.asarray(h, np.float32).reshape(-1) for h in hosts)
    return np.stack(bn_affine(s_, b_, m_, v_, epsilon)).astype(np.float32)


@register("BatchNormalization", 1, backend=GPU_COMPUTE)
def batch_normalization(rec, layer, X, scale, B, mean, var, *, epsilon=1e-5, is_test=0, spatial=1,
                        training_mode=0, **attrs):
    outputs = [o for o in layer.outputs[1:] if o]
    training = bool(training_mode) if layer.opset >= 14 else (len(layer.outputs) > 1 and not is_test)
    if training or outputs or not _is_gpu(X) or X.dtype != np.float32 or X.ndim < 2:
        return NotImplemented  # training statistics run on the CPU
    params = [_f32_param(rec, t, f"{layer.name}:{k}") for k, t in enumerate((scale, B, mean, var), 1)]
    if any(p is None for p in params):
        return NotImplemented
    act_expr, act_params = fused_activation(layer, X.dtype) or ("v", [0.0, 0.0, 0.0])
    c = X.shape[1]
    spatial_size = math.prod(X.shape[2:])
    # spatial=0 form: one parameter per (channel, position), else one per channel.
    per_position = params[0].ndim == X.ndim - 1 and params[0].ndim > 1
    count = c * spatial_size if per_position else c
    if any(p.size != count for p in params):
        return NotImplemented
    y = rec.alloc(X.shape, np.float32)
    n, inner = X.shape[0], spatial_size
    hosts = [t if isinstance(t, np.ndarray) else getattr(t, "host", None) for t in (scale, B, mean, var)]
    grid4 = _plane_grid(n, c, inner // 4, rec.ctx.max_workgroups) if inner % 4 == 0 and not per_position else None
    if grid4 is not None and all(h is not None for h in hosts):
        # Constant parameters: fold them once on the host and run a vec4 per-channel affine pass.
        folded = rec.derived(("bn_affine", float(epsilon)), (hosts[0], *hosts[1:]), lambda: _bn_affine(hosts, epsilon))
        rec.dispatch("compute/channel_affine4.wgsl", [X, rec.upload(folded[0], f"{layer.name}:a"),
                                                       rec.upload(folded[1], f"{layer.name}:b")],
                     [y], [inner // 4, c, *act_params], grid4, workgroup=GRID_WG, subs={"ACT": act_expr})
        return y if len(layer.outputs) == 1 else (y,) + (None,) * (len(layer.outputs) - 1)
    words = [X.size, inner, c, float(epsilon), int(per_position), *act_params]
    grid = _plane_grid(n, c, inner, rec.ctx.max_workgroups)
    folded = all(h is not None for h in hosts)
    if folded:
        # Constant parameters: a and b folded on the host (exactly the CPU's), in SCALE's and BIAS's places.
        shape = (count,)
        a_b = rec.derived(("bn_affine", float(epsilon), shape), (hosts[0], *hosts[1:]),
                          lambda: _bn_affine(hosts, epsilon))
        a_t, b_t = (rec.upload(np.ascontiguousarray(a_b[k]), f"{layer.name}:{'ab'[k]}") for k in (0, 1))
        params = [a_t, b_t, a_t, b_t]
    rec.dispatch("compute/batchnorm.wgsl", [X, *params], [y], words, grid or X.size, workgroup=GRID_WG,
                 constants={"GRID": grid is not None, "FOLDED": folded}, subs={"ACT": act_expr})
    return y if len(layer.outputs) == 1 else (y,) + (None,) * (len(layer.outputs) - 1)


# -- LayerNormalization / RMSNormalization ----------------------------------------------------------------
@register("LayerNormalization", 1, backend=GPU_COMPUTE)
@register("LayerNormalization", 17, backend=GPU_COMPUTE)
def layer_normalization(rec, layer, X, Scale, B=None, *, axis=-1, epsilon=1e-5, stash_type=1, **attrs):
    if not _is_gpu(X) or X.dtype != np.float32:
        return NotImplemented
    n_out = len(layer.outputs)
    if n_out > 1 and stash_type != 1:
        return NotImplemented  # Mean and InvStdDev would be float64
    rank = X.ndim
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        return NotImplemented
    scale = _f32_param(rec, Scale, f"{layer.name}:scale")
    bias = _f32_param(rec, B, f"{layer.name}:bias") if B is not None else None
    if scale is None or (B is not None and bias is None):
        return NotImplemented
    out = _normalize_trailing(rec, X, axis, STAT_VAR, epsilon, scale, bias, with_stats=n_out > 1)
    if out is NotImplemented or n_out == 1:
        return out
    return out[:n_out]


@register("RMSNormalization", 23, backend=GPU_COMPUTE)
def rms_normalization(rec, layer, X, scale, *, axis=-1, epsilon=1e-5, stash_type=1, **attrs):
    if not _is_gpu(X) or X.dtype != np.float32:
        return NotImplemented
    axis = norm_axis(axis, X.ndim)
    gscale = _f32_param(rec, scale, f"{layer.name}:scale")
    if axis is None or gscale is None:
        return NotImplemented
    return _normalize_trailing(rec, X, axis, STAT_RMS, epsilon, gscale)


# -- InstanceNormalization / GroupNormalization / MeanVarianceNormalization ------------------------------
@register("InstanceNormalization", 1, backend=GPU_COMPUTE)
def instance_normalization(rec, layer, input, scale, B, *, epsilon=1e-5, **attrs):
    if not _is_gpu(input) or input.dtype != np.float32 or input.ndim < 3:
        return NotImplemented
    n, c = input.shape[:2]
    gscale = _f32_param(rec, scale, f"{layer.name}:scale")
    gbias = _f32_param(rec, B, f"{layer.name}:bias")
    if gscale is None or gbias is None or gscale.size != c or gbias.size != c:
        return NotImplemented
    shape = (n, c, math.prod(input.shape[2:]))  # (N, C, spatial)
    if shape[2] >= FUSED_MIN_LENGTH:
        keep = (n, c) + (1,) * (input.ndim - 2)
        out = fused_rows(rec, input, n * c, shape[2], STAT_VAR, epsilon, keep, gscale, gbias, 2, c)
        if out is not None:
            return out[0]
    return _normalize(rec, input, shape, {2}, STAT_VAR, epsilon, gscale, gbias, [0, 1, 0])


def _group_norm(rec, layer, X, scale, bias, num_groups, epsilon, per_channel: bool | None):
    if not _is_gpu(X) or X.dtype != np.float32 or X.ndim < 2 or num_groups is None:
        return NotImplemented
    n, c = X.shape[:2]
    g = int(num_groups)
    if g <= 0 or c % g:
        return NotImplemented
    gscale = _f32_param(rec, scale, f"{layer.name}:scale")
    gbias = _f32_param(rec, bias, f"{layer.name}:bias")
    if gscale is None or gbias is None:
        return NotImplemented
    if per_channel is None:
        per_channel = gscale.size == c
    want = c if per_channel else g
    if gscale.size != want or gbias.size != want:
        return NotImplemented
    shape = (n, g, c // g, math.prod(X.shape[2:]))  # (N, G, C/G, spatial)
    if shape[2] * shape[3] >= FUSED_MIN_LENGTH:
        keep = (n, g, 1, 1)
        if per_channel:
            out = fused_rows(rec, X, n * g, shape[2] * shape[3], STAT_VAR, epsilon, keep, gscale, gbias, 3, g,
                             shape[2], shape[3])
        else:
            out = fused_rows(rec, X, n * g, shape[2] * shape[3], STAT_VAR, epsilon, keep, gscale, gbias, 2, g)
        if out is not None:
            return out[0]
    strides = [0, c // g, 1, 0] if per_channel else [0, 1, 0, 0]
    return _normalize(rec, X, shape, {2, 3}, STAT_VAR, epsilon, gscale, gbias, strides)


@register("GroupNormalization", 18, backend=GPU_COMPUTE)
def group_normalization_18(rec, layer, X, scale, bias, *, epsilon=1e-5, num_groups=None, **attrs):
    return _group_norm(rec, layer, X, scale, bias, num_groups, epsilon, None)


@register("GroupNormalization", 21, backend=GPU_COMPUTE)
def group_normalization_21(rec, layer, X, scale, bias, *, epsilon=1e-5, num_groups=None, stash_type=1, **attrs):
    return _group_norm(rec, layer, X, scale, bias, num_groups, epsilon, True)


@register("MeanVarianceNormalization", 9, backend=GPU_COMPUTE)
def mean_variance_normalization(rec, layer, X, *, axes=(0, 2, 3), **attrs):
    if not _is_gpu(X) or X.dtype != np.float32:
        return NotImplemented
    resolved = set()
    for a in axes:
        n = norm_axis(a, X.ndim)
        if n is None:
            return NotImplemented
        resolved.add(n)
    if resolved and resolved == set(range(min(resolved), X.ndim)):
        return _normalize_trailing(rec, X, min(resolved), STAT_MVN, 0.0)
    return _normalize(rec, X, X.shape, resolved, STAT_MVN, 0.0)


# -- LpNormalization / LRN --------------------------------------------------------------------------------
@register("LpNormalization", 1, backend=GPU_COMPUTE)
def lp_normalization(rec, layer, input, *, axis=-1, p=2, **attrs):
    if not _is_gpu(input) or input.dtype != np.float32 or p not in (1, 2):
        return NotImplemented
    a = norm_axis(axis, input.ndim)
    if a is None:
        return NotImplemented
    stat = STAT_L1 if p == 1 else STAT_L2
    if a == input.ndim - 1:
        return _normalize_trailing(rec, input, a, stat, 0.0)
    return _normalize(rec, input, input.shape, {a}, stat, 0.0)


@register("LRN", 1, backend=GPU_COMPUTE)
def lrn(rec, layer, X, *, alpha=1e-4, beta=0.75, bias=1.0, size=None, **attrs):
    if not _is_gpu(X) or X.dtype != np.float32 or X.ndim < 2 or size is None:
        return NotImplemented
    size = int(size)
    lo = (size - 1) // 2
    hi = size - 1 - lo
    inner = math.prod(X.shape[2:])
    y = rec.alloc(X.shape, np.float32)
    params = [X.size, X.shape[1], max(inner, 1), lo, hi, float(np.float32(alpha / size)), float(bias), float(beta)]
    grid = _plane_grid(X.shape[0], X.shape[1], inner, rec.ctx.max_workgroups)
    rec.dispatch("compute/lrn.wgsl", [X], [y], params, grid or X.size, workgroup=GRID_WG,
                 constants={"B075": beta == 0.75, "GRID": grid is not None},
                 loops=loop_passes(min(size, X.shape[1])))
    return y
