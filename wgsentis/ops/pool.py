"""Pooling operators: MaxPool, AveragePool, LpPool, their Global variants, MaxUnpool, MaxRoiPool.

Windowed pools are vectorised over kernel taps, never over outputs: the input is padded once
and each of the k*k taps contributes one slice covering every output position, folded in with
``np.maximum`` / ``np.add``. 2-D float pools (the CNN case) run split over channel ranges on the
worker's threads: at stride 1 on flat planes (``FlatWindows``), where every tap is one
contiguous run, reduced separably (rows, then columns: kh + kw passes instead of kh * kw);
strided, separably on the padded planes (each row's taps at the column stride, then the rows').
A window covering the whole unpadded input is a plain reduction. Other ranks, integer inputs
and MaxPool's Indices take the general strided-slice loop.
Averages divide by a count that is separable per spatial dim (pads and the ceil-mode overhang are boxes),
computed once as an outer product, in the pool's last pass. ONNX leaves an average's summation order open;
AveragePool follows ONNX Runtime's (MLAS, ``average_order``): column sums first where its vector kernel runs
(2-D and 3-D, a last stride of at most 2, windows of at most 32), GlobalAveragePool's order for a window over the
whole input, a row-major running sum elsewhere; then a division, so that quantized models that re-round every
pooled value stay with ONNX Runtime.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from wgsentis.ops.conv import spatial_attrs
from wgsentis.ops.conv_windows import FlatWindows, pad_spatial, tap_slices
from wgsentis.ops.numeric import LONG_SUM, sum_dtype
from wgsentis.ops.parallel import TRANSIENT, HostWorkspace, kernel_threads, kernel_workspace, run_split
from wgsentis.ops.registry import register, register_flops
from wgsentis.ops.tensor import check_indices

_FLOAT_KINDS = (np.dtype(np.float32), np.dtype(np.float64))


def pool_geometry(in_spatial, kernel, strides, dilations, pads, auto_pad: str, ceil_mode: int
                  ) -> tuple[list[int], list[int], list[int]]:
    """(pads_begin, pads_end, out_spatial) of a pool; ``pads_end`` excludes any ceil-mode overhang."""
    nd = len(in_spatial)
    begins, ends, outs = [], [], []
    for i in range(nd):
        size, s = in_spatial[i], strides[i]
        span = (kernel[i] - 1) * dilations[i] + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            # As the reference and onnxruntime: the undilated kernel sets the padding, which may be
            # negative (kernel < stride), and then crops the input.
            # onnxruntime's split of a negative total truncates toward zero (C++ integer division).
            out = -(-size // s)
            total = (out - 1) * s + kernel[i] - size
            b = int(total / 2) if auto_pad == "SAME_UPPER" else int((total + 1) / 2)
            e = total - b
        elif auto_pad == "VALID":
            b = e = 0
            out = (size - span) // s + 1
        elif auto_pad in ("NOTSET", ""):
            b, e = pads[i], pads[nd + i]
            room = size + b + e - span
            if ceil_mode:
                out = -(-room // s) + 1
                # The last window must start inside the input or the begin padding.
                if (out - 1) * s >= size + b:
                    out -= 1
            else:
                out = room // s + 1
        else:
            raise ValueError(f"unknown auto_pad {auto_pad!r}")
        out = max(out, 0)  # a window larger than the padded input leaves an empty output dim
        begins.append(b)
        ends.append(e)
        outs.append(out)
    return begins, ends, outs


def _padded(x: np.ndarray, begins, outs, kernel, strides, dilations, value) -> np.ndarray:
    """``x`` padded with ``value``: ``begins`` before, and after as far as the last window reaches."""
    ends = [max(0, (o - 1) * s + (k - 1) * d + 1 - b - n)
            for o, s, k, d, b, n in zip(outs, strides, kernel, dilations, begins, x.shape[2:], strict=True)]
    return pad_spatial(x, begins, ends, value)


def _taps(kernel):
    return itertools.product(*(range(k) for k in kernel))


def _min_value(dtype: np.dtype):
    if np.issubdtype(dtype, np.integer):
        return np.iinfo(dtype).min
    return -np.inf


# Input elements below which a pool runs on one thread. Its passes are single numpy calls, and two threads
# making short calls wait on each other for the GIL: 3x3 MaxPool on two threads against one, 512ch@14
# 0.63x, 256ch@28 0.80x, 128ch@56 0.98x, 64ch@112 1.17x.
_PARALLEL_MIN_ELEMENTS = 1 << 19


def _flat_pool_2d(x: np.ndarray, kernel, strides, dilations, begins, outs, reduce: np.ufunc, pad_value,
                  threads: int, divisor: np.ndarray | None = None,
                  columns_first: bool = False, workspace: HostWorkspace = TRANSIENT) -> np.ndarray | None:
    """``reduce`` (np.maximum or np.add) over every window of a 2-D float ``x`` (N, C, H, W) padded with
    ``pad_value``, separably: each row's taps, then the rows' (``columns_first``: each column's, then the
    columns'), divided by ``divisor`` (an (oh, ow) plane, an average's counts) if given; None where the flat
    form does not apply (another rank, dtype, or a negative pad)."""
    if x.ndim != 4 or x.dtype not in _FLOAT_KINDS or any(b < 0 for b in begins) or 0 in x.shape:
        return None
    n, c, h, w = x.shape
    planes = x.reshape(n * c, h, w)
    if (reduce is np.maximum and list(kernel) == [h, w] and list(outs) == [1, 1] and not any(begins)
            and all(k == 1 or d == 1 for k, d in zip(kernel, dilations, strict=True))):
        # one window over the whole plane: a reduction, not k*k passes
        return planes.reshape(n * c, h * w).max(axis=1).reshape(n, c, 1, 1)
    geo = FlatWindows((h, w), kernel, strides, dilations, begins, outs, workspace)
    kh, kw = kernel
    sh, sw = strides
    dh, dw = dilations
    oh, ow = outs
    y = np.empty((n * c, *outs), dtype=x.dtype)

    def fold(dst: np.ndarray, taps: list[np.ndarray]) -> None:
        """dst = reduce over ``taps``, the first pair folded straight into dst (no copy pass)."""
        if len(taps) == 1:
            np.copyto(dst, taps[0])
            return
        reduce(taps[0], taps[1], out=dst)
        for tap in taps[2:]:
            reduce(dst, tap, out=dst)

    def unit_stride(lo: int, hi: int) -> None:
        # Separable on the padded planes taken as one flat run: each row's kw taps, then the kh taps of
        # those rows, every tap one contiguous slice of the whole buffer. Positions whose windows would
        # cross into the next plane are never valid outputs (every plane has room for its windows), so
        # they are computed and cropped. One long pass instead of one per plane: numpy's loop over
        # hundreds of short rows cost 2-3x (Inception-v2's 3x3/1 AveragePool, 256ch@28: 0.50 -> 0.25 ms).
        rows = hi - lo
        plane = geo.hq * geo.wq
        flat = geo.phases(planes[lo:hi], pad_value, "pool").reshape(rows * plane)
        # (tap offsets in the flat run, in folding order: along a row, then down the rows, or the reverse)
        steps = [[j * dw for j in range(kw)], [i * dh * geo.wq for i in range(kh)]]
        first, second = steps[::-1] if columns_first else steps
        part_span = rows * plane - first[-1]
        part = workspace.scratch("pool_rows", (part_span,), x.dtype)
        fold(part, [flat[o:o + part_span] for o in first])
        acc = workspace.scratch("pool_acc", (rows, geo.hq, geo.wq), x.dtype)
        span = part_span - second[-1]
        fold(acc.reshape(rows * plane)[:span], [part[o:o + span] for o in second])
        if divisor is None:
            y[lo:hi] = acc[:, :oh, :ow]
        else:
            np.divide(acc[:, :oh, :ow], divisor, out=y[lo:hi])

    def strided(lo: int, hi: int) -> None:
        # Separable on the padded planes (the input itself when no window leaves it): the kw taps of each
        # row at the column stride, then the kh taps of those at the row stride (squeezenet's 3x3/2
        # pools, 128ch@55: 0.43 -> 0.28 ms).
        span_w, span_h = (ow - 1) * sw + 1, (oh - 1) * sh + 1
        inside = not any(begins) and span_h + (kh - 1) * dh <= h and span_w + (kw - 1) * dw <= w
        padded = planes[lo:hi] if inside else geo.padded(planes[lo:hi], pad_value, "pool")
        if columns_first:
            col_red = workspace.scratch("pool_rows", (hi - lo, oh, padded.shape[2]), x.dtype)
            fold(col_red, [padded[:, i * dh:i * dh + span_h:sh] for i in range(kh)])
            fold(y[lo:hi], [col_red[:, :, j * dw:j * dw + span_w:sw] for j in range(kw)])
        else:
            row_red = workspace.scratch("pool_rows", (hi - lo, padded.shape[1], ow), x.dtype)
            fold(row_red, [padded[:, :, j * dw:j * dw + span_w:sw] for j in range(kw)])
            fold(y[lo:hi], [row_red[:, i * dh:i * dh + span_h:sh] for i in range(kh)])
        if divisor is not None:
            y[lo:hi] /= divisor

    big = x.size >= _PARALLEL_MIN_ELEMENTS
    run_split(n * c, threads if big else 1, unit_stride if (sh, sw) == (1, 1) else strided, workspace=workspace)
    return y.reshape(n, c, *outs)


def _resolve(x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode):
    if kernel_shape is None:
        raise ValueError("pool requires kernel_shape")
    nd = x.ndim - 2
    kernel = [int(k) for k in kernel_shape]
    if len(kernel) != nd:
        raise ValueError(f"kernel_shape {kernel} does not match input rank {x.ndim}")
    strides, dilations, pads = spatial_attrs(nd, kernel, strides, dilations, pads)
    begins, ends, outs = pool_geometry(x.shape[2:], kernel, strides, dilations, pads, auto_pad, ceil_mode)
    return kernel, strides, dilations, begins, ends, outs


# --------------------------------------------------------------------------------------------
# MaxPool
# --------------------------------------------------------------------------------------------

@register("MaxPool", 1)
def max_pool(ctx, X, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=None, pads=None,
             storage_order=0, strides=None):
    """MaxPool with ceil_mode, dilations, auto_pad and the optional Indices output (flat, NCHW-based)."""
    kernel, strides, dilations, begins, _ends, outs = _resolve(X, kernel_shape, strides, dilations, pads,
                                                               auto_pad, ceil_mode)
    if 0 in outs:
        empty = np.zeros((*X.shape[:2], *outs), dtype=X.dtype)
        return (empty, np.zeros(empty.shape, dtype=np.int64)) if ctx.num_outputs > 1 else empty
    x = X if X.dtype in _FLOAT_KINDS or np.issubdtype(X.dtype, np.integer) else X.astype(np.float32)
    want_indices = ctx.output_wanted(1)
    if not want_indices:
        y = _flat_pool_2d(x, kernel, strides, dilations, begins, outs, np.maximum, _min_value(x.dtype),
                          kernel_threads(ctx), workspace=kernel_workspace(ctx))
        if y is not None:
            y = y.astype(X.dtype, copy=False)
            return (y, None) if ctx.num_outputs > 1 else y
    xp = _padded(x, begins, outs, kernel, strides, dilations, _min_value(x.dtype))
    y = None
    best_tap = np.zeros((*x.shape[:2], *outs), dtype=np.int64) if want_indices else None
    for k_index, tap in enumerate(_taps(kernel)):
        src = xp[tap_slices(tap, strides, dilations, outs)]
        if y is None:
            y = src.copy()
        elif want_indices:
            better = src > y
            np.copyto(y, src, where=better)
            best_tap[better] = k_index
        else:
            np.maximum(y, src, out=y)
    y = y.astype(X.dtype, copy=False)
    if not want_indices:
        return (y, None) if ctx.num_outputs > 1 else y
    # Flat index into the unpadded input, row-major (storage_order 0) or column-major spatial dims.
    nd = len(kernel)
    tap_coords = np.unravel_index(best_tap, kernel)
    spatial = x.shape[2:]
    positions = []
    for i in range(nd):
        o_shape = [1] * (nd + 2)
        o_shape[2 + i] = outs[i]
        start = (np.arange(outs[i]) * strides[i] - begins[i]).reshape(o_shape)
        positions.append(start + tap_coords[i] * dilations[i])
    spatial_size = math.prod(spatial)
    base = np.arange(x.shape[0] * x.shape[1], dtype=np.int64).reshape(x.shape[:2] + (1,) * nd) * spatial_size
    index = np.zeros_like(best_tap)
    order = range(nd) if not storage_order else reversed(range(nd))
    for i in order:
        index = index * spatial[i] + positions[i]
    return y, (index + base).astype(np.int64)


# --------------------------------------------------------------------------------------------
# AveragePool / LpPool
# --------------------------------------------------------------------------------------------

def _window_counts(in_spatial, kernel, strides, dilations, begins, ends, outs, include_pad: bool) -> np.ndarray:
    """Number of taps per output that fall in the input (plus the explicit pads if ``include_pad``)."""
    counts = None
    for i in range(len(kernel)):
        lo, hi = (-begins[i], in_spatial[i] + ends[i]) if include_pad else (0, in_spatial[i])
        pos = (np.arange(outs[i])[:, None] * strides[i] - begins[i]
               + np.arange(kernel[i])[None, :] * dilations[i])  # (out_i, k_i)
        per_dim = ((pos >= lo) & (pos < hi)).sum(axis=1)
        counts = per_dim if counts is None else np.multiply.outer(counts, per_dim)
    return counts


def _sum_pool(x, kernel, strides, dilations, begins, outs, power=None, threads: int = 1,
              divisor: np.ndarray | None = None, order: str = "rows", workspace: HostWorkspace = TRANSIENT):
    """Sum over each window (zero padding) of x, or of |x|**power, divided by ``divisor`` (an outputs-shaped
    plane) if given. ``order`` (of a plain sum): "columns" sums each window column by column and then the
    columns (2-D on flat planes; other ranks: the last axis's taps outermost), "generic" one running sum in
    row-major tap order, "rows" whatever is fastest (separable rows-then-columns on 2-D planes). A window of
    ``LONG_SUM`` taps or more sums in float64 in tap order, whatever ``order`` says, and is rounded once."""
    if 0 in outs:
        return np.zeros((*x.shape[:2], *outs), dtype=x.dtype)
    long_window = x.dtype.kind == "f" and x.dtype.itemsize <= 4 and math.prod(kernel) >= LONG_SUM
    if long_window:
        order = "generic"
    if power is None and order != "generic":
        y = _flat_pool_2d(x, kernel, strides, dilations, begins, outs, np.add, 0, threads, divisor,
                          columns_first=order == "columns", workspace=workspace)
        if y is not None:
            return y
    xp = _padded(x, begins, outs, kernel, strides, dilations, 0)
    y = np.zeros((*x.shape[:2], *outs), dtype=np.float64 if long_window else x.dtype)
    if power is None and order == "columns":
        for last in range(kernel[-1]):
            column = np.zeros_like(y)
            for tap in _taps(kernel[:-1]):
                column += xp[tap_slices((*tap, last), strides, dilations, outs)]
            y += column
    for tap in _taps(kernel) if power is not None or order != "columns" else ():
        src = xp[tap_slices(tap, strides, dilations, outs)]
        if power is None:
            y += src
        elif power == 1:
            y += np.abs(src)
        elif power == 2:
            y += src * src
        else:
            y += np.abs(src) ** power
    if divisor is not None:
        y /= divisor
    return y.astype(x.dtype, copy=False)


def average_order(in_spatial, kernel, strides, dilations, begins, ends) -> str:
    """The order in which ONNX Runtime's CPU AveragePool kernel (MLAS ``MlasPool``) sums a window: "global" for
    one window over the whole unpadded input (its global kernel: ``lane_sums``, as GlobalAveragePool), "columns"
    where its vector kernel runs (2-D and 3-D, the last stride at most 2, every window dim at most 32, the padded
    width within its 2045-float reduction buffer: each column's sum down the rows, then the columns'), else
    "generic" (one running sum in row-major order; dilated windows, which MLAS does not take, too). (With its
    graph optimizations on, ORT's NCHWc transform gives pools of 16 channels or more other kernels.)"""
    if any(d != 1 for d in dilations):
        return "generic"
    if list(kernel) == list(in_spatial) and all(s == 1 for s in strides) and not any(begins) and not any(ends):
        return "global"
    if (len(kernel) >= 2 and strides[-1] <= 2 and all(k <= 32 for k in kernel)
            and begins[-1] + ends[-1] + in_spatial[-1] <= 2045):
        return "columns"
    return "generic"


@register("AveragePool", 1)
def average_pool(ctx, X, *, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None,
                 kernel_shape=None, pads=None, strides=None):
    """AveragePool with count_include_pad, ceil_mode and dilations (overhang never counts), summed in ONNX
    Runtime's order (``average_order``) and divided by the count."""
    kernel, strides, dilations, begins, ends, outs = _resolve(X, kernel_shape, strides, dilations, pads,
                                                              auto_pad, ceil_mode)
    x = X if X.dtype in _FLOAT_KINDS else X.astype(np.float32)
    order = average_order(x.shape[2:], kernel, strides, dilations, begins, ends)
    if order == "global" and x.dtype == np.float32 and x.size:
        return global_average_pool(ctx, X)
    counts = _window_counts(x.shape[2:], kernel, strides, dilations, begins, ends, outs,
                            bool(count_include_pad))
    divisor = np.maximum(counts, 1).astype(x.dtype)
    y = _sum_pool(x, kernel, strides, dilations, begins, outs, threads=kernel_threads(ctx), divisor=divisor,
                  order="generic" if order == "global" else order, workspace=kernel_workspace(ctx))
    return y.astype(X.dtype, copy=False)


@register("LpPool", 1)
def lp_pool(ctx, X, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=None, p=2, pads=None,
            strides=None):
    """LpPool: (sum over the window of |x|^p)^(1/p), zero padding."""
    kernel, strides, dilations, begins, _ends, outs = _resolve(X, kernel_shape, strides, dilations, pads,
                                                               auto_pad, ceil_mode)
    x = X if X.dtype in _FLOAT_KINDS else X.astype(np.float32)
    p = float(p)
    power = int(p) if p.is_integer() else p
    y = _sum_pool(x, kernel, strides, dilations, begins, outs, power=power)
    y = np.sqrt(y) if power == 2 else y ** (1.0 / p)
    return y.astype(X.dtype, copy=False)


# --------------------------------------------------------------------------------------------
# Global pools
# --------------------------------------------------------------------------------------------

@register("GlobalAveragePool", 1)
def global_average_pool(ctx, X):
    axes = tuple(range(2, X.ndim))
    if any(X.shape[a] == 0 for a in axes):  # the mean of nothing: NaN, as numpy has it, without its warning
        return np.full((*X.shape[:2], *([1] * len(axes))), np.nan, X.dtype)
    x = X if X.dtype in _FLOAT_KINDS else X.astype(np.float32)
    if x.dtype != np.float32:
        return np.asarray(x.mean(axis=axes, keepdims=True)).astype(X.dtype, copy=False)
    rows = x.reshape(x.shape[0] * x.shape[1], math.prod(x.shape[2:]))  # (N * C, spatial); N * C may be 0
    if rows.shape[1] >= LONG_GLOBAL_POOL:  # past ORT's order's own accuracy: a float64 sum, rounded once
        means = (np.sum(rows, axis=1, dtype=np.float64) / rows.shape[1]).astype(np.float32)
        return means.reshape(*X.shape[:2], *([1] * len(axes)))
    means = lane_sums(rows) / np.float32(rows.shape[1])
    return means.reshape(*X.shape[:2], *([1] * len(axes)))


# A GlobalAveragePool (or whole-input AveragePool) plane of at least this many elements is summed in float64
# rather than in ONNX Runtime's order (``lane_sums``: four float32 running sums, whose error grows with the plane:
# 2.8e-6 relative at 1e5 elements, 1.9e-5 at 9e6). Below it the order stays ORT's, bit for bit, which quantized
# models need; above it no model of the zoo has a plane, and the float64 sum is ~1e-7 at any size.
LONG_GLOBAL_POOL = 1 << 16


def lane_sums(rows: np.ndarray) -> np.ndarray:
    """The float32 sum of each row of ``rows`` (R, L) in ONNX Runtime's order (its Eigen reductions on 4-float
    packets): four running lane sums over the whole packets, those combined as (s0 + s2) + (s1 + s3), then the
    leftover elements added one by one. Quantized models re-round every layer's output, so a different order
    (numpy's pairwise sum) would move some values by one quantization step."""
    count, length = rows.shape
    packets = length // 4
    lanes = np.zeros((count, 4), np.float32)
    if packets:
        # Summed packet by packet (np.add.reduce along a non-innermost axis accumulates in order).
        lanes = np.add.reduce(rows[:, : 4 * packets].reshape(count, packets, 4), axis=1, dtype=np.float32)
    total = (lanes[:, 0] + lanes[:, 2]) + (lanes[:, 1] + lanes[:, 3])
    for k in range(4 * packets, length):
        total = total + rows[:, k]
    return total


@register("GlobalMaxPool", 1)
def global_max_pool(ctx, X):
    axes = tuple(range(2, X.ndim))
    return np.asarray(X.max(axis=axes, keepdims=True))


@register("GlobalLpPool", 1)
def global_lp_pool(ctx, X, *, p=2):
    axes = tuple(range(2, X.ndim))
    x = X if X.dtype in _FLOAT_KINDS else X.astype(np.float32)
    p = float(p)
    y = (np.abs(x) ** p).sum(axis=axes, keepdims=True, dtype=sum_dtype(x, axes)) ** (1.0 / p)
    return np.asarray(y).astype(X.dtype, copy=False)


# --------------------------------------------------------------------------------------------
# MaxUnpool / MaxRoiPool
# --------------------------------------------------------------------------------------------

@register("MaxUnpool", 9)
def max_unpool(ctx, X, I, output_shape=None, *, kernel_shape=None, pads=None, strides=None):
    """MaxUnpool: scatter X to the flat positions I of the inferred (or given) output shape."""
    nd = X.ndim - 2
    kernel = [int(k) for k in kernel_shape]
    strides, _, pads = spatial_attrs(nd, kernel, strides, None, pads)
    inferred = list(X.shape[:2]) + [(X.shape[2 + i] - 1) * strides[i] - pads[i] - pads[nd + i] + kernel[i]
                                    for i in range(nd)]
    flat = np.zeros(math.prod(inferred), dtype=X.dtype)
    index = np.asarray(I).astype(np.int64, copy=False).reshape(-1)
    # Linear row-major indices into the inferred (N, C, D1, ...) output: 0 .. size-1, never negative.
    check_indices(ctx, index, flat.size, "I (flat output index)", negative_ok=False)
    flat[index] = X.reshape(-1)
    y = flat.reshape(inferred)
    if output_shape is None:
        return y
    shape = [int(v) for v in np.asarray(output_shape).reshape(-1)]
    if shape == inferred:
        return y
    out = np.zeros(shape, dtype=X.dtype)
    region = tuple(slice(0, min(a, b)) for a, b in zip(inferred, shape, strict=True))
    out[region] = y[region]
    return out


@register("MaxRoiPool", 1)
def max_roi_pool(ctx, X, rois, *, pooled_shape=None, spatial_scale=1.0):
    """MaxRoiPool (Caffe/Fast R-CNN semantics): max over each of pooled_h x pooled_w bins per ROI."""
    if pooled_shape is None:
        raise ValueError("MaxRoiPool requires pooled_shape")
    ph, pw = (int(v) for v in pooled_shape)
    n, c, h, w = X.shape
    boxes = np.asarray(rois, dtype=np.float64)  # (num_rois, 5): batch_id, x1, y1, x2, y2
    if not np.isfinite(boxes[:, 0]).all():
        raise ValueError("MaxRoiPool: a rois batch_id is not finite")
    batch_ids = np.trunc(boxes[:, 0]).astype(np.int64)  # truncated toward zero, as onnxruntime does
    check_indices(ctx, batch_ids, n, "rois batch_id", negative_ok=False)
    y = np.zeros((rois.shape[0], c, ph, pw), dtype=X.dtype)
    for r, roi in enumerate(boxes):
        batch = int(batch_ids[r])
        x1, y1, x2, y2 = (int(np.round(v * spatial_scale)) for v in roi[1:5])
        roi_h = max(y2 - y1 + 1, 1)
        roi_w = max(x2 - x1 + 1, 1)
        bin_h, bin_w = roi_h / ph, roi_w / pw
        for i in range(ph):
            hs = min(max(math.floor(i * bin_h) + y1, 0), h)
            he = min(max(math.ceil((i + 1) * bin_h) + y1, 0), h)
            for j in range(pw):
                ws = min(max(math.floor(j * bin_w) + x1, 0), w)
                we = min(max(math.ceil((j + 1) * bin_w) + x1, 0), w)
                if he > hs and we > ws:
                    y[r, :, i, j] = X[batch, :, hs:he, ws:we].max(axis=(1, 2))
    return y


# --------------------------------------------------------------------------------------------
# FLOPs
# --------------------------------------------------------------------------------------------

@register_flops("MaxPool", "AveragePool", "LpPool")
def pool_flops(layer, in_shapes, out_shapes) -> int:
    """One FLOP per window element read per output: prod(output shape) * prod(kernel_shape)."""
    if not out_shapes or out_shapes[0] is None:
        return 0
    kernel = layer.attrs.get("kernel_shape") or []
    return math.prod(out_shapes[0]) * math.prod(int(k) for k in kernel)


@register_flops("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def global_pool_flops(layer, in_shapes, out_shapes) -> int:
    """One FLOP per input element read (the window is the whole spatial extent)."""
    if not in_shapes or in_shapes[0] is None:
        return 0
    return math.prod(in_shapes[0])
