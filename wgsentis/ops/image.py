"""Image operators (numpy kernels) other than Resize (resize.py): GridSample, AffineGrid, RoiAlign and
NonMaxSuppression.
"""

from __future__ import annotations

import numpy as np

from wgsentis.ops.registry import register
from wgsentis.ops.tensor import check_indices


# ----------------------------------------------------------------------------------------------
# GridSample / AffineGrid
# ----------------------------------------------------------------------------------------------


def _reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Reflect coordinates into [lo, hi] by bouncing off the borders."""
    span = hi - lo
    if span <= 0:
        return np.full_like(x, lo)
    below = x < lo
    above = x > hi
    d = np.where(below, lo - x, np.where(above, x - hi, 0.0))
    flips = np.floor(d / span)
    r = d - flips * span
    even = (flips % 2) == 0
    from_below = np.where(even, lo + r, hi - r)
    from_above = np.where(even, hi - r, lo + r)
    return np.where(below, from_below, np.where(above, from_above, x)).astype(x.dtype)


def _grid_sample(X: np.ndarray, grid: np.ndarray, mode: str, padding_mode: str, align_corners: int) -> np.ndarray:
    """Sample X (N, C, D1..Dk) at grid (N, O1..Om, k) normalized coordinates (x first)."""
    n_batch, channels = X.shape[:2]
    dims = X.shape[2:]
    k = len(dims)
    if grid.shape[-1] != k or grid.shape[0] != n_batch:
        raise ValueError(f"grid shape {grid.shape} does not match input shape {X.shape}")
    out_spatial = grid.shape[1:-1]
    points = int(np.prod(out_spatial)) if out_spatial else 1
    g = grid.reshape(n_batch, points, k)
    compute = np.float64 if X.dtype == np.float64 else np.float32
    # Per spatial axis i (X axis 2+i), the coordinate is grid[..., k-1-i].
    coords = []
    for i, d in enumerate(dims):
        n = g[..., k - 1 - i]
        if align_corners:
            x = (n + 1) / 2.0 * (d - 1)
            lo, hi = 0.0, d - 1.0
        else:
            x = ((n + 1) * d - 1) / 2.0
            lo, hi = -0.5, d - 0.5
        x = x.astype(np.float32)  # coordinates are kept in single precision, as the spec's reference does
        if mode == "nearest":
            x = np.rint(x)  # round half to even, like PyTorch
        if padding_mode == "border":
            x = np.where((x < lo) | (x > hi), np.clip(x, 0, d - 1), x)
        elif padding_mode == "reflection":
            x = _reflect(x, lo, hi)
        coords.append((x, lo, hi))

    def fetch_index(idx: np.ndarray, d: int, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray | None]:
        """Integer tap -> (safe index, validity mask for zero padding)."""
        if padding_mode == "zeros":
            return np.clip(idx, 0, d - 1), (idx >= 0) & (idx < d)
        if padding_mode == "border":
            return np.clip(idx, 0, d - 1), None
        return np.clip(_reflect(idx.astype(np.float64), lo, hi).astype(np.int64), 0, d - 1), None

    # Per axis: tap indices (N, P, T), weights (N, P, T) and validity.
    axis_taps = []
    for (x, lo, hi), d in zip(coords, dims, strict=True):
        if mode == "nearest":
            idx = x.astype(np.int64)[..., None]
            weight = np.ones(idx.shape, dtype=compute)
        else:
            base = np.floor(x)
            frac = (x - base).astype(compute)
            if mode == "linear":
                offsets = np.array([0, 1])
                weight = np.stack([1 - frac, frac], axis=-1)
            else:
                offsets = np.array([-1, 0, 1, 2])
                a = -0.75
                t = frac
                weight = np.stack([
                    ((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a,
                    ((a + 2) * t - (a + 3)) * t * t + 1,
                    ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1,
                    ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a,
                ], axis=-1)
            idx = base.astype(np.int64)[..., None] + offsets
        safe, valid = fetch_index(idx, d, lo, hi)
        if valid is not None:
            weight = np.where(valid, weight, 0).astype(compute)
        axis_taps.append((safe, weight.astype(compute)))

    batch_index = np.arange(n_batch)[:, None]  # (N, 1)
    xt = np.moveaxis(X, 1, -1)  # (N, D1..Dk, C)
    out = np.zeros((n_batch, points, channels), dtype=compute)
    for combo in np.ndindex(*[t[0].shape[-1] for t in axis_taps]):
        index = [batch_index]
        w = None
        for (safe, weight), t in zip(axis_taps, combo, strict=True):
            index.append(safe[..., t])
            w = weight[..., t] if w is None else w * weight[..., t]
        out += xt[tuple(index)] * w[..., None]  # (N, P, C)
    out = np.moveaxis(out, -1, 1).reshape(n_batch, channels, *out_spatial)
    return out.astype(X.dtype)


@register("GridSample", 16)
def grid_sample_16(ctx, X, grid, *, align_corners=0, mode="bilinear", padding_mode="zeros"):
    """2-D grid sampling; modes bilinear / nearest / bicubic."""
    mapped = {"bilinear": "linear", "bicubic": "cubic", "nearest": "nearest"}.get(mode)
    if mapped is None:
        raise ValueError(f"unknown GridSample mode {mode!r}")
    return _grid_sample(X, grid, mapped, padding_mode, align_corners)


@register("GridSample", 20)
def grid_sample(ctx, X, grid, *, align_corners=0, mode="linear", padding_mode="zeros"):
    """N-D grid sampling; modes linear / nearest / cubic."""
    if mode not in ("linear", "nearest", "cubic"):
        raise ValueError(f"unknown GridSample mode {mode!r}")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise ValueError(f"unknown GridSample padding_mode {padding_mode!r}")
    return _grid_sample(X, grid, mode, padding_mode, align_corners)


@register("AffineGrid", 20)
def affine_grid(ctx, theta, size, *, align_corners=0):
    """Sampling grid (N, H, W, 2) or (N, D, H, W, 3) of theta applied to normalized base coordinates."""
    size = [int(s) for s in np.asarray(size).reshape(-1)]
    spatial = size[2:]
    if len(spatial) not in (2, 3):
        raise ValueError(f"AffineGrid size must be 4 or 5 long, got {size}")

    def axis_coords(d: int) -> np.ndarray:
        if align_corners:
            return np.linspace(-1.0, 1.0, d) if d > 1 else np.array([-1.0])
        return (np.arange(d) * 2.0 + 1.0) / d - 1.0

    axes = [axis_coords(d) for d in spatial]
    mesh = np.meshgrid(*axes, indexing="ij")  # per spatial axis, in (D,) H, W order
    # Homogeneous coordinates in x, y, (z), 1 order: x follows the last axis.
    homo = np.stack([*mesh[::-1], np.ones(spatial)], axis=-1).reshape(-1, len(spatial) + 1)
    grid = np.matmul(theta.astype(np.float64), homo.T)  # (N, k, P)
    grid = np.swapaxes(grid, 1, 2).reshape(theta.shape[0], *spatial, len(spatial))
    return grid.astype(theta.dtype)


# ----------------------------------------------------------------------------------------------
# RoiAlign
# ----------------------------------------------------------------------------------------------


def _roi_axis_samples(start: float, bin_size: float, pooled: int, grid: int, length: int):
    """Bilinear sample positions along one axis: low/high indices, weights and validity (pooled, grid)."""
    p = np.arange(pooled)[:, None]
    i = np.arange(grid)[None, :]
    pos = start + p * bin_size + (i + 0.5) * bin_size / grid  # (pooled, grid)
    valid = (pos >= -1.0) & (pos <= length)
    pos = np.maximum(pos, 0)
    low = pos.astype(np.int64)
    at_end = low >= length - 1
    low = np.where(at_end, length - 1, low)
    high = np.where(at_end, length - 1, low + 1)
    pos = np.where(at_end, low, pos)
    frac = pos - low
    w_low = np.where(valid, 1.0 - frac, 0.0)
    w_high = np.where(valid, frac, 0.0)
    return low, high, w_low, w_high


def _roi_align(ctx, X, rois, batch_indices, *, half_pixel: bool, mode: str, output_height: int,
               output_width: int, sampling_ratio: int, spatial_scale: float) -> np.ndarray:
    num_rois = rois.shape[0]
    batch_indices = np.asarray(batch_indices).astype(np.int64, copy=False).reshape(-1)  # (num_rois,)
    if batch_indices.shape != (num_rois,):
        raise ValueError(f"batch_indices must have shape ({num_rois},), got {batch_indices.shape}")
    check_indices(ctx, batch_indices, X.shape[0], "batch_indices", negative_ok=False)
    channels, height, width = X.shape[1:]
    Y = np.zeros((num_rois, channels, output_height, output_width), dtype=np.float64)
    offset = 0.5 if half_pixel else 0.0
    for r in range(num_rois):
        x0, y0, x1, y1 = (float(v) * spatial_scale - offset for v in rois[r])
        roi_w, roi_h = x1 - x0, y1 - y0
        if not half_pixel:
            roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
        bin_h, bin_w = roi_h / output_height, roi_w / output_width
        grid_h = int(sampling_ratio) if sampling_ratio > 0 else int(np.ceil(roi_h / output_height))
        grid_w = int(sampling_ratio) if sampling_ratio > 0 else int(np.ceil(roi_w / output_width))
        count = max(grid_h * grid_w, 1)
        yl, yh, wyl, wyh = _roi_axis_samples(y0, bin_h, output_height, grid_h, height)
        xl, xh, wxl, wxh = _roi_axis_samples(x0, bin_w, output_width, grid_w, width)
        image = X[int(batch_indices[r])].astype(np.float64)  # (C, H, W)
        if mode == "avg":
            # Separable: Ay (PH, H) and Ax (PW, W) accumulate the sample weights per input row/column.
            ay = np.zeros((output_height, height))
            ax = np.zeros((output_width, width))
            rows_h = np.repeat(np.arange(output_height), grid_h)
            rows_w = np.repeat(np.arange(output_width), grid_w)
            np.add.at(ay, (rows_h, yl.reshape(-1)), wyl.reshape(-1))
            np.add.at(ay, (rows_h, yh.reshape(-1)), wyh.reshape(-1))
            np.add.at(ax, (rows_w, xl.reshape(-1)), wxl.reshape(-1))
            np.add.at(ax, (rows_w, xh.reshape(-1)), wxh.reshape(-1))
            Y[r] = np.einsum("ph,chw,qw->cpq", ay, image, ax) / count
        elif mode == "max":
            # Max over samples of the largest weighted corner value (what the reference kernels do).
            best = None
            for yi, wy in ((yl, wyl), (yh, wyh)):
                for xi, wx in ((xl, wxl), (xh, wxh)):
                    vals = image[:, yi[:, :, None, None], xi[None, None, :, :]]  # (C, PH, GH, PW, GW)
                    vals = vals * (wy[:, :, None, None] * wx[None, None, :, :])
                    best = vals if best is None else np.maximum(best, vals)
            Y[r] = best.max(axis=(2, 4))
        else:
            raise ValueError(f"unknown RoiAlign mode {mode!r}")
    return Y.astype(X.dtype)


@register("RoiAlign", 10)
def roi_align_10(ctx, X, rois, batch_indices, *, mode="avg", output_height=1, output_width=1, sampling_ratio=0,
                 spatial_scale=1.0):
    """Opset-10 RoiAlign: ROI corners are used as given (output_half_pixel)."""
    return _roi_align(ctx, X, rois, batch_indices, half_pixel=False, mode=mode, output_height=output_height,
                      output_width=output_width, sampling_ratio=sampling_ratio, spatial_scale=spatial_scale)


@register("RoiAlign", 16)
def roi_align(ctx, X, rois, batch_indices, *, coordinate_transformation_mode="half_pixel", mode="avg",
              output_height=1, output_width=1, sampling_ratio=0, spatial_scale=1.0):
    """Average/max pooling of bilinear samples over each ROI's (output_height, output_width) bins."""
    if coordinate_transformation_mode not in ("half_pixel", "output_half_pixel"):
        raise ValueError(f"unknown coordinate_transformation_mode {coordinate_transformation_mode!r}")
    return _roi_align(ctx, X, rois, batch_indices, half_pixel=coordinate_transformation_mode == "half_pixel",
                      mode=mode, output_height=output_height, output_width=output_width,
                      sampling_ratio=sampling_ratio, spatial_scale=spatial_scale)


# ----------------------------------------------------------------------------------------------
# NonMaxSuppression
# ----------------------------------------------------------------------------------------------


def _iou_with(boxes: np.ndarray, i: int, others: np.ndarray) -> np.ndarray:
    """IoU of box i with boxes[others]; boxes are (x_min, y_min, x_max, y_max) normalised corners."""
    b = boxes[i]
    o = boxes[others]
    ix = np.minimum(b[2], o[:, 2]) - np.maximum(b[0], o[:, 0])
    iy = np.minimum(b[3], o[:, 3]) - np.maximum(b[1], o[:, 1])
    inter = np.where((ix > 0) & (iy > 0), ix * iy, 0.0)
    area_b = (b[2] - b[0]) * (b[3] - b[1])
    area_o = (o[:, 2] - o[:, 0]) * (o[:, 3] - o[:, 1])
    union = area_b + area_o - inter
    ok = (inter > 0) & (area_b > 0) & (area_o > 0) & (union > 0)
    return np.where(ok, inter / np.where(union > 0, union, 1.0), 0.0)


@register("NonMaxSuppression", 10)
def non_max_suppression(ctx, boxes, scores, max_output_boxes_per_class=None, iou_threshold=None,
                        score_threshold=None, *, center_point_box=0):
    """Greedy per-(batch, class) selection by descending score; output rows are [batch, class, box]."""
    max_out = 0 if max_output_boxes_per_class is None or np.asarray(max_output_boxes_per_class).size == 0 \
        else max(int(np.asarray(max_output_boxes_per_class).reshape(-1)[0]), 0)
    iou_t = 0.0 if iou_threshold is None or np.asarray(iou_threshold).size == 0 \
        else float(np.asarray(iou_threshold).reshape(-1)[0])
    score_t = None if score_threshold is None or np.asarray(score_threshold).size == 0 \
        else float(np.asarray(score_threshold).reshape(-1)[0])
    b = boxes.astype(np.float64)
    if center_point_box:
        half_w, half_h = b[..., 2] / 2, b[..., 3] / 2
        corners = np.stack([b[..., 0] - half_w, b[..., 1] - half_h, b[..., 0] + half_w, b[..., 1] + half_h], -1)
    else:
        # [y1, x1, y2, x2] with corners in either order.
        corners = np.stack([np.minimum(b[..., 1], b[..., 3]), np.minimum(b[..., 0], b[..., 2]),
                            np.maximum(b[..., 1], b[..., 3]), np.maximum(b[..., 0], b[..., 2])], -1)
    selected: list[tuple[int, int, int]] = []
    for batch in range(scores.shape[0]):
        for cls in range(scores.shape[1]):
            if max_out == 0:
                continue
            s = scores[batch, cls]
            candidates = np.arange(s.shape[0])
            if score_t is not None:
                candidates = candidates[s > score_t]
            # Descending score; equal scores keep the lower box index first (stable sort).
            order = candidates[np.argsort(-s[candidates].astype(np.float64), kind="stable")]
            kept: list[int] = []
            for idx in order:
                if len(kept) >= max_out:
                    break
                if kept and np.any(_iou_with(corners[batch], int(idx), np.array(kept)) > iou_t):
                    continue
                kept.append(int(idx))
                selected.append((batch, cls, int(idx)))
    return np.array(selected, dtype=np.int64).reshape(-1, 3)
