"""gpu-pixel programs of the pool family: MaxPool (with its Indices output), AveragePool, LpPool and the Global
pools.

Windowed pools draw channels-blocked: the input is switched to channels blocked (a view when it already is, as
a convolution leaves it), and each fragment of the channels-blocked output reduces its window four channels at
a time with vec4 loads (wgsl/pixel/pool.wgsl; 1-D and 2-D pools are 3-D pools with leading spatial dims of 1).
The geometry (pads, ceil mode, auto_pad) is resolved on the host by the CPU module's own helper, so both
backends agree on every output shape. Global pools are reductions over the spatial dims
(``reduce_pixel.reduce_keep``): texel by texel on channels-blocked input, else along the blocked axis.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from wgsentis.backends.gpu import shader_gen
from wgsentis.backends.gpu.tensors import loop_passes
from wgsentis.ops.pool import LONG_GLOBAL_POOL, average_order
from wgsentis.ops.pool_gpu import pad3, window_geometry
from wgsentis.ops.reduce_pixel import OVERHEAD, reduce_keep, reduction, texture
from wgsentis.ops.registry import GPU_PIXEL, register

MAX, AVERAGE, LP2, LP1, LP = range(5)  # pool.wgsl's MODE


def _window_pool(rec, x, geo, mode: int, *, include_pad: bool = False, p: float = 2.0, indices: bool = False,
                 storage_order: int = 0, columns: bool = False):
    """Record a windowed pool of ``x`` (N, C, *spatial): its output (N, C, *outs), channels blocked, and with
    ``indices`` the int64 Indices of MaxPool too; NotImplemented when the window is too long to loop over.
    ``columns``: an average summed column by column (pool.average_order)."""
    kernel, strides, dilations, begins, ends, outs = geo
    k3 = pad3(kernel, 1)
    if not rec.loops_fit(loop_passes(*k3) + OVERHEAD):
        return NotImplemented
    x = rec.relayout(x, 1)  # (N, C, *spatial), channels blocked
    n, c = x.shape[:2]
    spatial = list(x.shape[2:])
    out_shape = (n, c, *outs)
    y = rec.alloc(out_shape, x.dtype, 1)
    idx = rec.alloc(out_shape, np.int64, 1) if indices else None
    if y.size == 0:
        return (y, idx) if indices else y
    if include_pad:
        lo = [-b for b in begins]
        hi = [d + e for d, e in zip(spatial, ends, strict=True)]
    else:
        lo, hi = [0] * len(spatial), spatial
    params: list[int | float] = [
        y.layout.texels, y.layout.shift, *pad3(spatial, 1), *pad3(outs, 1), *pad3(strides, 1),
        *pad3(dilations, 1), *pad3(begins, 0), *pad3(lo, 0), *pad3(hi, 1), float(p), 1.0 / float(p),
        -(-c // 4), x.layout.shift, c, int(bool(storage_order)), len(spatial)]
    kind = x.layout.kind
    consts = {"KD0": k3[0], "KD1": k3[1], "KD2": k3[2]}
    subs = shader_gen.pool_subs(kind, rec.ctx.division_function)
    if indices:
        rec.draw("pixel/pool_indices.wgsl", [x], [y, idx], params, constants=consts, subs=subs)
        return y, idx
    rec.draw("pixel/pool.wgsl", [x], [y], params, constants={**consts, "MODE": mode, "COLUMNS": int(columns)},
             subs=subs)
    return y


@register("MaxPool", 1, backend=GPU_PIXEL)
def max_pool(rec, layer, X, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=None, pads=None,
             storage_order=0, strides=None, **attrs):
    x = texture(X)
    if x is None or x.dtype not in (np.float32, np.int32):
        return NotImplemented
    geo = window_geometry(x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    if geo is None:
        return NotImplemented
    want_indices = len(layer.outputs) > 1 and bool(layer.outputs[1])
    if want_indices and x.size >= 2**31:
        return NotImplemented  # flat indices must fit in int32
    out = _window_pool(rec, x, geo, MAX, indices=want_indices, storage_order=storage_order)
    if out is NotImplemented or want_indices or len(layer.outputs) == 1:
        return out
    return out, None


@register("AveragePool", 1, backend=GPU_PIXEL)
def average_pool(rec, layer, X, *, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None,
                 kernel_shape=None, pads=None, strides=None, **attrs):
    x = texture(X)
    if x is None or x.dtype != np.float32:
        return NotImplemented
    geo = window_geometry(x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    if geo is None:
        return NotImplemented
    kernel, strides, dilations, begins, ends, _outs = geo
    order = average_order(x.shape[2:], kernel, strides, dilations, begins, ends)  # ONNX Runtime's
    if order == "global":
        return global_average_pool(rec, layer, X)  # ONNX Runtime sums such a window as GlobalAveragePool
    return _window_pool(rec, x, geo, AVERAGE, include_pad=bool(count_include_pad), columns=order == "columns")


@register("LpPool", 1, backend=GPU_PIXEL)
def lp_pool(rec, layer, X, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=None, p=2, pads=None,
            strides=None, **attrs):
    x = texture(X)
    if x is None or x.dtype != np.float32:
        return NotImplemented
    geo = window_geometry(x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    if geo is None:
        return NotImplemented
    p = float(p)
    return _window_pool(rec, x, geo, LP2 if p == 2.0 else LP1 if p == 1.0 else LP, p=p)


def _global(rec, X: Any, kind: str, dtypes: tuple[type, ...], p: float = 2.0):
    """A global pool: ``kind`` over the spatial dims, kept as size 1."""
    x = texture(X)
    if x is None or x.dtype not in dtypes or x.ndim < 2:
        return NotImplemented
    axes = set(range(2, x.ndim))
    length = 1
    for d in axes:
        length *= x.shape[d]
    if kind == "max" and length == 0:
        return NotImplemented  # numpy's max of nothing raises: the CPU kernel reports it
    return reduce_keep(rec, x, axes, reduction(kind, length, p))


@register("GlobalAveragePool", 1, backend=GPU_PIXEL)
def global_average_pool(rec, layer, X, **attrs):
    x = texture(X)
    if x is None or x.dtype != np.float32 or x.ndim < 3 or x.size == 0:
        return _global(rec, X, "mean", (np.float32,))
    n, c, length = x.shape[0], x.shape[1], x.size // (x.shape[0] * x.shape[1])
    passes = loop_passes(length // 4, 4) + loop_passes(3)
    if not rec.loops_fit(passes) or length >= LONG_GLOBAL_POOL:  # a long plane: chunked sums, as on the cpu
        return _global(rec, X, "mean", (np.float32,))
    planes = rec.reshape(x, (n, c, length))
    y = rec.map([planes], (n, c, 1), np.float32, 1, "pixel/body/pool_lane_mean.wgsl", [length], label="lane mean",
                subs={"DIV": rec.ctx.division_function})
    return rec.reshape(y, (n, c, *([1] * (x.ndim - 2))))


@register("GlobalMaxPool", 1, backend=GPU_PIXEL)
def global_max_pool(rec, layer, X, **attrs):
    return _global(rec, X, "max", (np.float32, np.int32))


@register("GlobalLpPool", 1, backend=GPU_PIXEL)
def global_lp_pool(rec, layer, X, *, p=2, **attrs):
    p = float(p)
    return _global(rec, X, "l2" if p == 2.0 else "l1" if p == 1.0 else "lp", (np.float32,), p)
