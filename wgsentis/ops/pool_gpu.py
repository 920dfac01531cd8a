"""gpu-compute programs of the pool family: MaxPool (with its Indices output), AveragePool, LpPool
and the Global pools.

Windowed pools run one invocation per ROW_OUTPUTS consecutive outputs of a row, looping over each one's window
(wgsl/compute/pool.wgsl);
1-D and 2-D pools are 3-D pools with leading size-1 dims. The geometry (pads, ceil mode, auto_pad) is
resolved on the host by the CPU module's own helper, so both backends agree on every output shape.
Global pools are row reductions (wgsl/compute/reduce.wgsl) over the spatial dims.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from wgsentis.backends.gpu.shader_gen import snippet
from wgsentis.backends.gpu.tensors import loop_passes
from wgsentis.backends.gpu.tensors import udiv_words
from wgsentis.ops.conv import spatial_attrs
from wgsentis.ops.elementwise_gpu import bind_division
from wgsentis.ops.pool import LONG_GLOBAL_POOL, average_order, pool_geometry
from wgsentis.ops.reduce_gpu import reduce_to
from wgsentis.ops.registry import GPU_COMPUTE, register

POOL_WG = 64
# Consecutive outputs of a row one pool.wgsl / maxpool_indices.wgsl invocation computes: they share its two udivs
# (pool_window.wgsl), the output sizes' uniform words that replaced override constants. GPU time vs the sizes as
# constants on lavapipe (median paired ratios alternating in one process, 12-20 rounds): one output an invocation
# 1.05-1.18x; eight, MaxPool 3x3 stride 2 on (1, 64, 112, 112) 0.95-0.99x, AveragePool 3x3 on (1, 64, 56, 56)
# 0.98-1.00x, MaxPool 3x3x3 on (1, 16, 16, 56, 56) 0.97-0.99x (four measured 1.04-1.10x, two 0.96-0.99x).
ROW_OUTPUTS = 8


def _is_gpu(t: Any) -> bool:
    return hasattr(t, "alloc") and hasattr(t, "gpu_type")


def window_geometry(x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode):
    """(kernel, strides, dilations, begins, ends, outs) as the CPU kernel resolves them, or None."""
    if kernel_shape is None or x.ndim < 3 or x.ndim > 5:
        return None
    nd = x.ndim - 2
    kernel = [int(k) for k in kernel_shape]
    if len(kernel) != nd:
        return None
    try:
        strides, dilations, pads = spatial_attrs(nd, kernel, strides, dilations, pads)
        begins, ends, outs = pool_geometry(x.shape[2:], kernel, strides, dilations, pads, auto_pad, ceil_mode)
    except ValueError:
        return None
    return kernel, strides, dilations, begins, ends, outs


def pad3(values: list[int], fill: int) -> list[int]:
    return [fill] * (3 - len(values)) + list(values)


def row_outputs(rec, kernel: list[int]) -> int:
    """The outputs of a row one pool invocation computes (pool_window.wgsl's ROW_OUTPUTS, a constant of the
    window): ROW_OUTPUTS, or 1 where that many windows' loops would pass the device's loop limit."""
    return ROW_OUTPUTS if rec.loops_fit(loop_passes(ROW_OUTPUTS, *pad3(kernel, 1))) else 1


def _params(x, geo, include_pad: bool, p: float = 2.0, storage_order: int = 0,
            row: int = ROW_OUTPUTS) -> tuple[list, tuple[int, ...]]:
    """The pool.wgsl / maxpool_indices.wgsl parameter words and the output shape, for ``row`` outputs an
    invocation (``row_outputs``)."""
    kernel, strides, dilations, begins, ends, outs = geo
    spatial = list(x.shape[2:])
    out_shape = (*x.shape[:2], *outs)
    if include_pad:
        lo = [-b for b in begins]
        hi = [n + e for n, e in zip(spatial, ends, strict=True)]
    else:
        lo, hi = [0] * len(spatial), spatial
    params = [math.prod(out_shape), *pad3(spatial, 1), *pad3(outs, 1), *pad3(kernel, 1), *pad3(strides, 1),
              *pad3(dilations, 1), *pad3(begins, 0), *pad3(lo, 0), *pad3(hi, 1), float(p), 1.0 / float(p),
              int(bool(storage_order)), len(spatial), math.prod(x.shape[:2])]
    # 30..33: udiv's divisor words of the invocations per output row and of od1 (pool_window.wgsl). _grid keeps a
    # plane's invocations (the numerators) under 65535 * POOL_WG < 2^22, so the divisors too are in udiv's range.
    od1, od2 = pad3(outs, 1)[1:]
    return [*params, *udiv_words(max(1, -(-od2 // row))), *udiv_words(max(1, od1))], out_shape


def _grid(x, out_shape: tuple[int, ...], limit: int, row: int) -> tuple[int, int, int] | None:
    """(ceil(plane invocations / POOL_WG), planes) for ``row`` outputs an invocation, with planes above the
    device's per-dimension ``limit`` folded into z; None when a plane alone needs more workgroups than one
    dimension holds (the layer falls back)."""
    planes = math.prod(x.shape[:2])
    per_plane = math.ceil(math.prod(out_shape[2:-1]) * -(-out_shape[-1] // row) / POOL_WG)
    if per_plane > limit or planes > limit * limit:
        return None
    if planes <= limit:
        return (per_plane, planes, 1)
    return (per_plane, limit, math.ceil(planes / limit))


def _kind(rec, x) -> str:
    """pool.wgsl's KIND: the element type's functions (compute/kind/pool_<T>.wgsl); a float average divides
    correctly rounded, with the device's division."""
    kind = snippet(f"compute/kind/pool_{x.gpu_type}.wgsl")
    return bind_division(rec, kind) if x.gpu_type == "f32" else kind


def _window_constants(params: list, row: int) -> dict[str, int]:
    """The window size per dim (from params 7..9) and the outputs an invocation computes as pipeline constants
    (pool_window.wgsl): the layer's geometry, which a new input size keeps (the output sizes are uniform words)."""
    return {"KD0": params[7], "KD1": params[8], "KD2": params[9], "ROW_OUTPUTS": row}


def _window_passes(params: list, row: int) -> int:
    """Loop passes of one pool.wgsl / maxpool_indices.wgsl invocation: ``row`` windows' nested loops, from the
    same numbers as their pipeline constants (``_window_constants``)."""
    return loop_passes(row, params[7], params[8], params[9])


def _window_pool(rec, x, geo, mode: int, include_pad: bool = False, p: float = 2.0, columns: bool = False):
    """Record a windowed pool of ``x``; ``columns``: an average summed column by column (pool.average_order)."""
    row = row_outputs(rec, geo[0])
    params, out_shape = _params(x, geo, include_pad, p, row=row)
    grid = _grid(x, out_shape, rec.ctx.max_workgroups, row)
    if grid is None:
        return NotImplemented
    y = rec.alloc(out_shape, x.dtype)
    if y.size:
        rec.dispatch("compute/pool.wgsl", [x], [y], params, grid, workgroup=POOL_WG,
                     constants={"MODE": mode, "COLUMNS": int(columns), "P_ONE": int(p == 1.0),
                                **_window_constants(params, row)},
                     subs={"T": x.gpu_type, "KIND": _kind(rec, x), "POOL_T": x.gpu_type},
                     loops=_window_passes(params, row))
    return y


@register("MaxPool", 1, backend=GPU_COMPUTE)
def max_pool(rec, layer, X, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=None, pads=None,
             storage_order=0, strides=None, **attrs):
    if not _is_gpu(X) or X.gpu_type not in ("f32", "i32"):
        return NotImplemented
    geo = window_geometry(X, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    if geo is None:
        return NotImplemented
    want_indices = len(layer.outputs) > 1 and bool(layer.outputs[1])
    if not want_indices:
        y = _window_pool(rec, X, geo, 0)
        return (y, None) if len(layer.outputs) > 1 and y is not NotImplemented else y
    if X.size >= 2**31:
        return NotImplemented  # flat indices must fit in int32
    row = row_outputs(rec, geo[0])
    params, out_shape = _params(X, geo, False, storage_order=storage_order, row=row)
    grid = _grid(X, out_shape, rec.ctx.max_workgroups, row)
    if grid is None:
        return NotImplemented
    y = rec.alloc(out_shape, X.dtype)
    idx = rec.alloc(out_shape, np.int64)
    if y.size:
        rec.dispatch("compute/maxpool_indices.wgsl", [X], [y, idx], params, grid, workgroup=POOL_WG,
                     constants=_window_constants(params, row),
                     subs={"T": X.gpu_type, "LOWEST": snippet(f"compute/kind/lowest_{X.gpu_type}.wgsl")},
                     loops=_window_passes(params, row))
    return y, idx


@register("AveragePool", 1, backend=GPU_COMPUTE)
def average_pool(rec, layer, X, *, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None,
                 kernel_shape=None, pads=None, strides=None, **attrs):
    if not _is_gpu(X) or X.dtype != np.float32:
        return NotImplemented
    geo = window_geometry(X, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    if geo is None:
        return NotImplemented
    kernel, strides, dilations, begins, ends, _outs = geo
    order = average_order(X.shape[2:], kernel, strides, dilations, begins, ends)  # ONNX Runtime's
    if order == "global":
        return global_average_pool(rec, layer, X)  # ONNX Runtime sums such a window as GlobalAveragePool
    return _window_pool(rec, X, geo, 1, include_pad=bool(count_include_pad), columns=order == "columns")


@register("LpPool", 1, backend=GPU_COMPUTE)
def lp_pool(rec, layer, X, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=None, p=2, pads=None,
            strides=None, **attrs):
    if not _is_gpu(X) or X.dtype != np.float32:
        return NotImplemented
    geo = window_geometry(X, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode)
    if geo is None:
        return NotImplemented
    p = float(p)
    return _window_pool(rec, X, geo, 2 if p == 2.0 else 3, p=p)


def _global(rec, X, kind: str):
    if not _is_gpu(X) or X.ndim < 2:
        return NotImplemented
    out_shape = (*X.shape[:2], *([1] * (X.ndim - 2)))
    return reduce_to(rec, X, set(range(2, X.ndim)), kind, out_shape)


@register("GlobalAveragePool", 1, backend=GPU_COMPUTE)
def global_average_pool(rec, layer, X, **attrs):
    """Each (n, c) plane's mean summed in ONNX Runtime's order (compute/lane_mean.wgsl, one invocation per plane)
    while a plane's loop stays under the driver's loop limit and the plane is shorter than LONG_GLOBAL_POOL (as
    the cpu kernel: past it ORT's order loses accuracy), else the general tree reduction (blocked sums)."""
    if getattr(X, "dtype", None) != np.float32:
        return NotImplemented
    if not _is_gpu(X) or X.ndim < 3 or X.alloc is None or X.size == 0:
        return _global(rec, X, "mean")
    rows, length = X.shape[0] * X.shape[1], math.prod(X.shape[2:])
    passes = loop_passes(length // 4) + loop_passes(3)
    if not rec.loops_fit(passes) or length >= LONG_GLOBAL_POOL:
        return _global(rec, X, "mean")
    y = rec.alloc((*X.shape[:2], *([1] * (X.ndim - 2))), np.float32)
    rec.dispatch("compute/lane_mean.wgsl", [X], [y], [rows, length], rows,
                 subs={"DIV": rec.ctx.division_function}, loops=passes)
    return y


@register("GlobalMaxPool", 1, backend=GPU_COMPUTE)
def global_max_pool(rec, layer, X, **attrs):
    if getattr(X, "dtype", None) not in (np.float32, np.int32):
        return NotImplemented
    return _global(rec, X, "max")


@register("GlobalLpPool", 1, backend=GPU_COMPUTE)
def global_lp_pool(rec, layer, X, *, p=2, **attrs):
    if getattr(X, "dtype", None) != np.float32:
        return NotImplemented
    if float(p) == 2.0:
        return _global(rec, X, "l2")
    if float(p) == 1.0:
        return _global(rec, X, "l1")
    return NotImplemented  # other p: (sum |x|^p)^(1/p) has no reduce kind yet
