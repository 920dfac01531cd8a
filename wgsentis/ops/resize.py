"""Resize and Upsample (numpy kernels) and the coordinate rules every backend shares: the geometry (scales,
sizes, roi, keep_aspect_ratio_policy), linear and cubic in ONNX Runtime's float order from per-axis tap tables
(``resize_plan``), nearest and antialias as per-axis passes (``source_coords``, ``axis_taps``). The GPU programs
(resize_gpu.py) build their tables from these same functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from wgsentis.ops.registry import register, register_flops


def source_coords(mode: str, out_len: int, in_len: int, scale: float, roi_lo: float, roi_hi: float) -> np.ndarray:
    """Source coordinate of every output index along one axis, for a coordinate_transformation_mode."""
    y = np.arange(out_len, dtype=np.float64)
    out_width = scale * in_len  # the un-rounded output length
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (y + 0.5) / scale - 0.5 if out_len > 1 else np.full(out_len, -0.5)
    if mode == "align_corners":
        return y * (in_len - 1) / (out_width - 1) if out_width != 1 else np.zeros(out_len)
    if mode == "asymmetric":
        return y / scale
    if mode == "tf_half_pixel_for_nn":
        return (y + 0.5) / scale
    if mode == "half_pixel_symmetric":
        adjustment = out_len / out_width
        offset = in_len / 2 * (1 - adjustment)
        return offset + (y + 0.5) / scale - 0.5
    if mode == "tf_crop_and_resize":
        if out_width == 1:
            x = np.full(out_len, (roi_hi - roi_lo) * (in_len - 1) / 2)
        else:
            x = y * (roi_hi - roi_lo) * (in_len - 1) / (out_width - 1)
        return x + roi_lo * (in_len - 1)
    raise ValueError(f"unknown coordinate_transformation_mode {mode!r}")


def _nearest_index(x: np.ndarray, nearest_mode: str, downsampling: bool) -> np.ndarray:
    if nearest_mode == "round_prefer_floor":
        return np.ceil(x - 0.5)
    if nearest_mode == "round_prefer_ceil":
        return np.floor(x + 0.5)
    if nearest_mode == "floor":
        return np.floor(x)
    if nearest_mode == "ceil":
        return np.ceil(x)
    if nearest_mode == "simple":  # opset < 11 (Upsample, Resize-10)
        return np.ceil(x) if downsampling else np.floor(x)
    raise ValueError(f"unknown nearest_mode {nearest_mode!r}")


def _cubic_kernel(d: np.ndarray, a: float) -> np.ndarray:
    d = np.abs(d)
    d2, d3 = d * d, d * d * d
    near = (a + 2) * d3 - (a + 3) * d2 + 1
    far = a * d3 - 5 * a * d2 + 8 * a * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def axis_taps(mode: str, x: np.ndarray, in_len: int, scale: float, *, nearest_mode: str, cubic_a: float,
               antialias: bool, exclude_outside: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """Tap indices (out, taps) into the input axis and their weights (None for nearest)."""
    if mode == "nearest":
        idx = _nearest_index(x, nearest_mode, scale < 1).astype(np.int64)
        return idx[:, None], None
    # The kernel is stretched by 1/scale when antialiasing a downsample.
    support_scale = min(scale, 1.0) if antialias else 1.0
    if mode == "linear":
        start = int(np.floor(-1 / support_scale) + 1)
    elif mode == "cubic":
        start = int(np.floor(-2 / support_scale) + 1)
    else:
        raise ValueError(f"unknown Resize mode {mode!r}")
    offsets = np.arange(start, 2 - start)  # e.g. [0, 1] for linear, [-1, 0, 1, 2] for cubic
    base = np.floor(x)
    taps = base[:, None] + offsets[None, :]  # (out, n)
    distance = (taps - x[:, None]) * support_scale
    if mode == "linear":
        weights = np.clip(1 - np.abs(distance), 0, 1)
    else:
        weights = _cubic_kernel(distance, cubic_a)
    if antialias:
        weights = weights / weights.sum(axis=1, keepdims=True)
    taps = taps.astype(np.int64)
    if exclude_outside:
        outside = (taps < 0) | (taps >= in_len)
        weights = np.where(outside, 0.0, weights)
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    # Taps past either end read the border sample (edge padding); the caller clamps them.
    return taps, weights


def _periodic_plan(taps: np.ndarray, weights: np.ndarray, in_len: int) -> list | None:
    """For an integer upscale k, per output phase r: (first tap offset, weights), else None.

    With out = k * in and phase r = j % k, tap t of output j is ``j // k + c_r + t`` with weights
    that depend only on r (away from the clamped borders), so each phase is a few shifted slices
    of the edge-padded input instead of gathers (which are slow along the innermost axis).
    """
    out_len = taps.shape[0]
    if out_len % in_len or out_len == in_len:
        return None
    k = out_len // in_len
    base = np.arange(out_len) // k
    plan = []
    for r in range(k):
        offsets = taps[r::k] - base[r::k, None]  # (in, taps)
        phase_w = weights[r::k]
        if np.any(offsets != offsets[0]) or np.any(phase_w != phase_w[0]):
            return None
        plan.append((offsets[0], phase_w[0]))
    return plan


def _resize_axis(data: np.ndarray, axis: int, taps: np.ndarray, weights: np.ndarray | None,
                 outside: np.ndarray | None, extrapolation_value: float) -> np.ndarray:
    """Apply one axis' taps: a gather (nearest) or a weighted sum of gathers, one per tap."""
    in_len = data.shape[axis]
    plan = _periodic_plan(taps, weights, in_len) if weights is not None and outside is None else None
    if plan is not None:
        # Integer upscale: phase r of the output is a weighted sum of shifted input slices.
        pad = int(max(np.abs(offsets).max() for offsets, _ in plan)) + 1
        widths = [(0, 0)] * data.ndim
        widths[axis] = (pad, pad)
        padded = np.pad(data, widths, mode="edge")
        k = len(plan)
        out_shape = list(data.shape)
        out_shape[axis] = in_len * k
        result = np.empty(out_shape, dtype=data.dtype)
        for r, (offsets, phase_w) in enumerate(plan):
            dst = [slice(None)] * data.ndim
            dst[axis] = slice(r, None, k)
            target = result[tuple(dst)]
            first = True
            for offset, w in zip(offsets.tolist(), phase_w.tolist(), strict=True):
                if w == 0:
                    continue
                src = [slice(None)] * data.ndim
                src[axis] = slice(pad + offset, pad + offset + in_len)
                term = padded[tuple(src)]
                if first:
                    np.multiply(term, data.dtype.type(w), out=target)
                    first = False
                else:
                    target += term * data.dtype.type(w)
            if first:
                target[...] = 0
        return result
    taps = np.clip(taps, 0, in_len - 1)
    if weights is None:
        result = np.take(data, taps[:, 0], axis=axis)
    else:
        shape = [1] * data.ndim
        shape[axis] = taps.shape[0]
        w = weights.astype(data.dtype)
        result = None
        for t in range(taps.shape[1]):
            term = np.take(data, taps[:, t], axis=axis)
            term *= w[:, t].reshape(shape)  # in place: these passes are memory-bound
            if result is None:
                result = term
            else:
                result += term
    if outside is not None and outside.any():
        shape = [1] * data.ndim
        shape[axis] = outside.shape[0]
        result = np.where(outside.reshape(shape), np.asarray(extrapolation_value, dtype=result.dtype), result)
    return result


def resize_geometry(shape, scales, sizes, roi, axes, policy: str, *, single: bool = False):
    """Resize's geometry, shared by the CPU kernel and the GPU program: the resized axes, and per axis
    its scale, output length and roi bounds. Raises ValueError for inconsistent scales/sizes/roi.

    ``single``: the scales as ONNX Runtime holds them, float32 (sizes give f32(out) / f32(in), and a
    keep_aspect_ratio_policy picks among those), for the linear and cubic kernels that follow its arithmetic;
    else float64 ratios (nearest and antialias). The output lengths are the same either way."""
    rank = len(shape)
    axes = list(range(rank)) if axes is None else [int(a) % rank for a in axes]
    if scales is not None and np.asarray(scales).size == 0:
        scales = None
    if sizes is not None and np.asarray(sizes).size == 0:
        sizes = None
    if roi is not None and np.asarray(roi).size == 0:
        roi = None
    if (scales is None) == (sizes is None):
        raise ValueError("Resize needs exactly one of scales and sizes")
    scale_of = dict.fromkeys(range(rank), 1.0)
    out_of = {i: shape[i] for i in range(rank)}
    if scales is not None:
        scale_values = np.asarray(scales, dtype=np.float64).reshape(-1)
        if scale_values.size != len(axes):
            raise ValueError(f"scales has {scale_values.size} values for {len(axes)} axes")
        for a, s in zip(axes, scale_values, strict=True):
            if s <= 0:
                raise ValueError(f"scales must be positive, got {s}")
            scale_of[a] = float(s)
            out_of[a] = int(shape[a] * s)  # floor
    else:
        size_values = np.asarray(sizes, dtype=np.int64).reshape(-1)
        if size_values.size != len(axes):
            raise ValueError(f"sizes has {size_values.size} values for {len(axes)} axes")
        ratios = {}
        for a, n in zip(axes, size_values, strict=True):
            ratios[a] = int(n) / shape[a]
            scale_of[a] = float(np.float32(n) / np.float32(shape[a])) if single else ratios[a]
            out_of[a] = int(n)
        if policy != "stretch":
            pick = {"not_larger": min, "not_smaller": max}.get(policy)
            if pick is None:
                raise ValueError(f"unknown keep_aspect_ratio_policy {policy!r}")
            common = pick(ratios.values())
            scale = pick(scale_of[a] for a in axes)
            for a in axes:
                scale_of[a] = scale
                out_of[a] = int(common * shape[a] + 0.5)  # round half up
    roi_lo = dict.fromkeys(range(rank), 0.0)
    roi_hi = dict.fromkeys(range(rank), 1.0)
    if roi is not None:
        roi_values = np.asarray(roi, dtype=np.float64).reshape(-1)
        n_axes = len(axes) if roi_values.size == 2 * len(axes) else rank
        roi_axes = axes if n_axes == len(axes) else list(range(rank))
        for i, a in enumerate(roi_axes):
            roi_lo[a] = float(roi_values[i])
            roi_hi[a] = float(roi_values[n_axes + i])
    return axes, scale_of, out_of, roi_lo, roi_hi


# -- linear and cubic in ONNX Runtime's arithmetic ---------------------------------------------------------
# ONNX fixes what linear and cubic Resize compute but not in which float order; ONNX Runtime's CPU kernels
# (upsample.h / upsample.cc / upsamplebase.h) fix one, and a model that re-quantizes a resized tensor again and
# again amplifies every ulp of difference. So these kernels take ORT's steps, all in float32:
# - the source coordinate x of each output index by ORT's float32 formula (scale a float32; an axis whose
#   scale is 1 keeps its indices);
# - linear: x clamped into [0, len - 1], taps i1 = trunc(x), i2 = min(i1 + 1, len - 1), weights
#   (|x - i2|, |x - i1|), both 0.5 where i1 == i2; the output is the sum, left to right from the first term,
#   of the 2^k corner terms (w_inner * ... * w_outer) * value, corners ordered innermost axis fastest (ORT's
#   bilinear / trilinear expression);
# - cubic: Keys coefficients of the fraction x - floor(x), with exclude_outside their sum from 0; separable,
#   the innermost axis first, each pass acc = 0; acc += value * w / divisor, where the innermost pass has
#   w = c / sum and divisor 1 ((c / sum) * value in ORT) and the outer ones w = c, divisor = sum.
# ORT runs bilinear on (H, W) of a 2-D or 4-D tensor (axes 1 and 2 of an NHWC-like one, where scales[1] != 1),
# trilinear on the last three axes of a 3-D or 5-D one, bicubic on the last two of a 2-D or 4-D one; those
# axes are interpolated together even when one keeps its length (its weights 1 and 0, or 0.5 and 0.5 on the
# last index, still round), so they are all in the group here. Other resized axes join the group, in the same
# order rules (ORT refuses them). The output lengths stay the spec's (ORT computes in * scale in float32: 7 for
# 10 * 0.7), and so do align_corners and tf_crop_and_resize where in * scale is not whole (ORT divides by the
# rounded length). No driver may fuse a product into the sum that follows it: the GPU programs round each
# product on its own (math.wgsl's opaque()); lavapipe does not fuse in any case. int8/uint8 linear on an
# NHWC-like 4-D tensor runs ORT's fixed-point form (10-bit weights, the 20-bit product sum divided with
# truncation); other integer types interpolate in float32 and truncate toward zero, as ORT's static_cast does.


@dataclass(frozen=True)
class AxisTable:
    """How one axis of the group is interpolated: per output index its taps into the input (clamped into it),
    their weights, the divisor of this axis' pass (cubic; 1 elsewhere), and whether the coordinate falls
    outside the input (tf_crop_and_resize, where the output is the extrapolation value)."""

    taps: np.ndarray  # (out, T) int64
    weights: np.ndarray  # (out, T) float32
    divisors: np.ndarray  # (out,) float32
    outside: np.ndarray  # (out,) bool
    coords: np.ndarray  # (out,) float32: the clamped source coordinate (the fixed-point weights start from it)


@dataclass(frozen=True)
class ResizePlan:
    """A linear or cubic Resize as every backend runs it: the output shape, the group's tables (axis -> table,
    outermost axis first) and how they combine: "corners" (linear) or "passes" (cubic)."""

    out_shape: tuple[int, ...]
    tables: dict[int, AxisTable]
    combine: str
    crop: bool


def _coords_f32(ctm: str, out_len: int, in_len: int, scale: float, roi_lo: float, roi_hi: float,
                length: float) -> np.ndarray:
    """ORT's float32 source coordinate of every output index along one axis (upsamplebase.h). ``length`` is the
    un-rounded output length (in_len * scale, or the given size): where it is not out_len, align_corners and
    tf_crop_and_resize divide by it as the spec says (ORT divides by out_len there, a different result, not an
    order)."""
    y = np.arange(out_len, dtype=np.float32)
    s, n_in, n_out = np.float32(scale), np.float32(in_len), np.float32(length)
    half, one = np.float32(0.5), np.float32(1)
    if s == 1 and ctm != "tf_crop_and_resize":
        return y  # ORT keeps the indices; every formula below gives them too
    if ctm == "half_pixel":
        return (y + half) / s - half
    if ctm == "pytorch_half_pixel":
        return (y + half) / s - half if out_len > 1 else np.zeros(out_len, np.float32)
    if ctm == "align_corners":
        return y * (n_in - one) / (n_out - one) if length != 1 else np.zeros(out_len, np.float32)
    if ctm == "asymmetric":
        return y / s
    if ctm == "tf_half_pixel_for_nn":
        return (y + half) / s
    if ctm == "half_pixel_symmetric":
        offset = n_in / 2 * (one - np.float32(out_len) / (s * n_in))
        return (np.float64(offset) + (y.astype(np.float64) + 0.5) / np.float64(s) - 0.5).astype(np.float32)
    if ctm == "tf_crop_and_resize":
        lo, hi = np.float32(roi_lo), np.float32(roi_hi)
        if length != 1:
            return lo * (n_in - one) + y * (hi - lo) * (n_in - one) / (n_out - one)
        return np.full(out_len, 0.5 * np.float64(lo + hi) * np.float64(n_in - one), np.float32)
    raise ValueError(f"unknown coordinate_transformation_mode {ctm!r}")


def _linear_table(x: np.ndarray, in_len: int, outside: np.ndarray) -> AxisTable:
    clamped = np.maximum(np.float32(0), np.minimum(x, np.float32(in_len - 1)))
    first = np.minimum(clamped.astype(np.int64), in_len - 1)
    second = np.minimum(first + 1, in_len - 1)
    to_first = np.abs(clamped - first.astype(np.float32))
    to_second = np.abs(clamped - second.astype(np.float32))
    same = first == second
    to_first[same] = 0.5
    to_second[same] = 0.5
    return AxisTable(np.stack([first, second], 1), np.stack([to_second, to_first], 1),
                     np.ones(len(x), np.float32), outside, clamped)


def _cubic_coefficients(s: np.ndarray, a: np.float32) -> np.ndarray:
    """Keys' four coefficients (taps floor(x) - 1 .. floor(x) + 2) of the fractions s, in ORT's float32 order."""
    t = np.abs(s)
    one, two = np.float32(1), np.float32(2)
    c0 = ((a * (t + one) - 5 * a) * (t + one) + 8 * a) * (t + one) - 4 * a
    c1 = ((a + 2) * t - (a + 3)) * t * t + one
    c2 = ((a + 2) * (one - t) - (a + 3)) * (one - t) * (one - t) + one
    c3 = ((a * (two - t) - 5 * a) * (two - t) + 8 * a) * (two - t) - 4 * a
    return np.stack([c0, c1, c2, c3], 1).astype(np.float32)


def _cubic_table(x: np.ndarray, in_len: int, outside: np.ndarray, a: float, exclude_outside: bool,
                 innermost: bool) -> AxisTable:
    base = np.floor(x)
    coefficients = _cubic_coefficients(x - base, np.float32(a))
    taps = base.astype(np.int64)[:, None] + np.arange(-1, 3)
    total = np.ones(len(x), np.float32)
    if exclude_outside:
        coefficients = np.where((taps >= 0) & (taps < in_len), coefficients, np.float32(0))
        total = np.zeros(len(x), np.float32)
        for t in range(4):
            total = total + coefficients[:, t]
    if innermost:  # ORT's first pass multiplies by c / sum
        coefficients = coefficients / total[:, None]
        total = np.ones(len(x), np.float32)
    return AxisTable(np.clip(taps, 0, in_len - 1), coefficients, total, outside, x)


def _ort_group(mode: str, rank: int, scale_of: dict[int, float]) -> tuple[int, ...]:
    """The axes ORT's kernel for this rank interpolates together (see above); () where it has none."""
    if mode == "linear":
        if rank == 4:
            return (2, 3) if scale_of[1] == 1 else (1, 2)
        return {2: (0, 1), 3: (0, 1, 2), 5: (2, 3, 4)}.get(rank, ())
    if rank == 2 or (rank == 4 and scale_of[0] == 1 and scale_of[1] == 1):
        return (rank - 2, rank - 1)
    return ()


def resize_plan(shape, scales, sizes, roi, *, mode: str, ctm: str, cubic_a: float = -0.75,
                exclude_outside: int = 0, axes=None, policy: str = "stretch") -> ResizePlan:
    """The plan of a linear or cubic Resize without antialias (the one source of its tables for every backend).
    An empty group means a copy. Raises ValueError for inconsistent scales/sizes/roi."""
    rank = len(shape)
    _, scale_of, out_of, roi_lo, roi_hi = resize_geometry(shape, scales, sizes, roi, axes, policy, single=True)
    crop = ctm == "tf_crop_and_resize"
    out_shape = tuple(out_of[a] for a in range(rank))
    resized = [a for a in range(rank)
               if out_of[a] != shape[a] or scale_of[a] != 1.0 or (crop and (roi_lo[a], roi_hi[a]) != (0.0, 1.0))]
    if not resized or 0 in out_shape or 0 in shape:
        return ResizePlan(out_shape, {}, "corners", crop)
    group = sorted(set(_ort_group(mode, rank, scale_of)) | set(resized))
    by_sizes = scales is None or np.asarray(scales).size == 0
    tables = {}
    for a in group:
        length = out_of[a] if by_sizes else scale_of[a] * shape[a]
        x = _coords_f32(ctm, out_of[a], shape[a], scale_of[a], roi_lo[a], roi_hi[a], length)
        outside = ((x < 0) | (x > np.float32(shape[a] - 1))) if crop else np.zeros(out_of[a], bool)
        if mode == "linear":
            tables[a] = _linear_table(x, shape[a], outside)
        else:
            tables[a] = _cubic_table(x, shape[a], outside, cubic_a, bool(exclude_outside), a == group[-1])
    return ResizePlan(out_shape, tables, "corners" if mode == "linear" else "passes", crop)


def _gather_corners(data: np.ndarray, tables: list[tuple[int, AxisTable]]):
    """Yield (tap index per axis, data at those taps) for every corner, the innermost axis fastest. The inner
    axes are gathered first, the innermost first (gathers along it are the slow ones, and an upsample has the
    fewest rows before its outer axes grow); each corner's array is its own, free to be overwritten."""
    inner = {(): data}
    for axis, table in reversed(tables[1:]):
        inner = {(t, *key): np.take(value, table.taps[:, t], axis=axis)
                 for key, value in inner.items() for t in range(table.taps.shape[1])}
    axis, table = tables[0]
    for t in range(table.taps.shape[1]):
        for key in sorted(inner):
            yield (t, *key), np.take(inner[key], table.taps[:, t], axis=axis)


def _along(values: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    """``values`` (one per index of ``axis``) shaped to broadcast along that axis of an ndim-D array."""
    shape = [1] * ndim
    shape[axis] = values.shape[0]
    return values.reshape(shape)


def _corners(work: np.ndarray, plan: ResizePlan) -> np.ndarray:
    """ORT's linear sum: (w_inner * ... * w_outer) * corner value, summed from the first corner."""
    tables = list(plan.tables.items())
    acc = None
    for key, value in _gather_corners(work, tables):
        weight = None
        for (axis, table), t in reversed(list(zip(tables, key, strict=True))):  # the innermost axis first
            w = _along(table.weights[:, t], axis, work.ndim)
            weight = w if weight is None else weight * w
        term = np.multiply(value, weight.astype(work.dtype), out=value)  # value is this corner's own gather
        acc = term if acc is None else np.add(acc, term, out=acc)
    return acc


def _fixed_point_corners(X: np.ndarray, plan: ResizePlan) -> np.ndarray:
    """ORT's int8/uint8 bilinear on an NHWC-like tensor: 10-bit weights from the clamped coordinates, their
    products summed with the corner values in integers, divided by 2^20 with truncation toward zero."""
    tables = list(plan.tables.items())
    fixed = []
    for axis, table in tables:
        scaled = (table.coords * np.float32(1 << 10)).astype(np.int64)
        to_first = np.abs(scaled - table.taps[:, 0] * (1 << 10))
        to_second = np.abs(scaled - table.taps[:, 1] * (1 << 10))
        same = table.taps[:, 0] == table.taps[:, 1]
        to_first[same] = 512
        to_second[same] = 512
        fixed.append((axis, np.stack([to_second, to_first], 1)))
    total = None
    for key, value in _gather_corners(X.astype(np.int64), tables):
        weight = None
        for (axis, w), t in reversed(list(zip(fixed, key, strict=True))):
            w = _along(w[:, t], axis, X.ndim)
            weight = w if weight is None else weight * w
        total = weight * value if total is None else total + weight * value
    quotient = np.abs(total) >> 20
    return np.where(total < 0, -quotient, quotient).astype(X.dtype)


def _passes(work: np.ndarray, plan: ResizePlan) -> np.ndarray:
    """ORT's separable cubic: the innermost axis first, each pass acc = 0; acc += value * w / divisor."""
    for axis, table in reversed(list(plan.tables.items())):
        divide = bool(np.any(table.divisors != 1))
        acc = None
        for t in range(table.taps.shape[1]):
            term = np.take(work, table.taps[:, t], axis=axis)
            term *= _along(table.weights[:, t], axis, work.ndim).astype(work.dtype)
            if divide:
                term /= _along(table.divisors, axis, work.ndim).astype(work.dtype)
            acc = term + work.dtype.type(0) if acc is None else np.add(acc, term, out=acc)  # from +0, as ORT
        work = acc
    return work


def _interpolate(X: np.ndarray, plan: ResizePlan, extrapolation_value: float) -> np.ndarray:
    """Run a linear/cubic plan on the host: the CPU kernel, and the reference the GPU programs match."""
    if not plan.tables:
        if 0 in plan.out_shape or 0 in X.shape:
            return np.zeros(plan.out_shape, X.dtype)
        return X.copy()
    integer = np.issubdtype(X.dtype, np.integer)
    if (integer and X.dtype.itemsize == 1 and plan.combine == "corners" and X.ndim == 4
            and list(plan.tables) == [1, 2]):
        result = _fixed_point_corners(X, plan)
    else:
        work = X if X.dtype == np.float64 or X.dtype == np.float32 else X.astype(np.float32)
        result = _corners(work, plan) if plan.combine == "corners" else _passes(work, plan)
        if integer:
            info = np.iinfo(X.dtype)
            result = np.clip(np.trunc(result), info.min, info.max).astype(X.dtype)
        else:
            result = result.astype(X.dtype, copy=False)
    if plan.crop:
        outside = np.zeros(plan.out_shape, bool)
        for axis, table in plan.tables.items():
            outside |= _along(table.outside, axis, X.ndim)
        result[outside] = np.asarray(extrapolation_value, np.float32).astype(X.dtype)
    return result


def resize_args(opset: int, attrs: dict[str, Any]) -> dict[str, Any]:
    """Resize's (and Upsample's) one opset adapter: its attributes as the canonical keywords every backend's
    resize takes (mode, ctm, nearest_mode, cubic_a, exclude_outside, extrapolation_value, antialias, axes, policy).
    Before opset 11 (Resize-10, Upsample) coordinates are asymmetric and nearest rounds down ("simple")."""
    if opset < 11:
        return {"mode": attrs.get("mode", "nearest"), "ctm": "asymmetric", "nearest_mode": "simple",
                "cubic_a": -0.75, "exclude_outside": 0, "extrapolation_value": 0.0, "antialias": 0, "axes": None,
                "policy": "stretch"}
    return {"mode": attrs.get("mode", "nearest"),
            "ctm": attrs.get("coordinate_transformation_mode", "half_pixel"),
            "nearest_mode": attrs.get("nearest_mode", "round_prefer_floor"),
            "cubic_a": attrs.get("cubic_coeff_a", -0.75), "exclude_outside": attrs.get("exclude_outside", 0),
            "extrapolation_value": attrs.get("extrapolation_value", 0.0), "antialias": attrs.get("antialias", 0),
            "axes": attrs.get("axes"), "policy": attrs.get("keep_aspect_ratio_policy", "stretch")}


def _resize(X: np.ndarray, scales, sizes, roi, *, mode: str, ctm: str, nearest_mode: str, cubic_a: float,
            exclude_outside: int, extrapolation_value: float, antialias: int, axes, policy: str) -> np.ndarray:
    """Resize in the canonical arguments (``resize_args``)."""
    if mode == "nearest" and antialias:
        raise ValueError("antialias is not supported for nearest mode")
    if mode in ("linear", "cubic") and not antialias:
        plan = resize_plan(X.shape, scales, sizes, roi, mode=mode, ctm=ctm,
                           cubic_a=cubic_a, exclude_outside=exclude_outside, axes=axes,
                           policy=policy)
        return _interpolate(X, plan, extrapolation_value)
    # Nearest, and antialias: per-axis passes with float64 taps (the spec's arithmetic).
    axes, scale_of, out_of, roi_lo, roi_hi = resize_geometry(X.shape, scales, sizes, roi, axes,
                                                             policy)

    integer = np.issubdtype(X.dtype, np.integer)
    if mode == "nearest":
        work = X
    elif X.dtype == np.float32 or X.dtype == np.float64:
        work = X
    else:
        work = X.astype(np.float32)
    crop = ctm == "tf_crop_and_resize"
    # The per-axis passes commute; shrinking axes go first, and among equal ratios the innermost
    # axis first, while the data is smallest (gathers along the innermost axis are the slow ones).
    for a in sorted(axes, key=lambda ax: (out_of[ax] / max(X.shape[ax], 1), -ax)):
        in_len, out_len, scale = X.shape[a], out_of[a], scale_of[a]
        identity = (out_len == in_len and scale == 1.0
                    and (not crop or (roi_lo[a] == 0.0 and roi_hi[a] == 1.0)))
        if identity:
            continue
        if out_len == 0:
            shape = list(work.shape)
            shape[a] = 0
            work = np.empty(shape, dtype=work.dtype)
            continue
        x = source_coords(ctm, out_len, in_len, scale, roi_lo[a], roi_hi[a])
        taps, weights = axis_taps(mode, x, in_len, scale, nearest_mode=nearest_mode, cubic_a=cubic_a,
                                   antialias=bool(antialias), exclude_outside=bool(exclude_outside))
        outside = ((x < 0) | (x > in_len - 1)) if crop else None
        work = _resize_axis(work, a, taps, weights, outside, extrapolation_value)
    if work.dtype == X.dtype:
        return work
    if integer:
        info = np.iinfo(X.dtype)
        return np.clip(np.round(work), info.min, info.max).astype(X.dtype)
    return work.astype(X.dtype)


@register("Resize", 10)
def resize_10(ctx, X, scales, *, mode="nearest"):
    """Opset-10 Resize: scales only, asymmetric coordinates (the Upsample semantics)."""
    return _resize(X, scales, None, None, **resize_args(10, {"mode": mode}))


@register("Resize", 11)
def resize(ctx, X, roi=None, scales=None, sizes=None, *, antialias=0, axes=None,
           coordinate_transformation_mode="half_pixel", cubic_coeff_a=-0.75, exclude_outside=0,
           extrapolation_value=0.0, keep_aspect_ratio_policy="stretch", mode="nearest",
           nearest_mode="round_prefer_floor"):
    """Resize by scales or sizes (optionally for ``axes`` only) with nearest/linear/cubic sampling.

    Separable: each resized axis is one gather (nearest) or a weighted sum of a few gathers, with
    tap indices and weights precomputed per output position, never a per-pixel loop.
    """
    return _resize(X, scales, sizes, roi, **resize_args(11, {
        "antialias": antialias, "axes": axes, "coordinate_transformation_mode": coordinate_transformation_mode,
        "cubic_coeff_a": cubic_coeff_a, "exclude_outside": exclude_outside, "extrapolation_value": extrapolation_value,
        "keep_aspect_ratio_policy": keep_aspect_ratio_policy, "mode": mode, "nearest_mode": nearest_mode}))


@register("Upsample", 7)
def upsample_7(ctx, X, *, mode="nearest", scales=None):
    if scales is None:
        raise ValueError("Upsample-7 needs the scales attribute")
    return resize_10(ctx, X, np.asarray(scales, dtype=np.float32), mode=mode)


@register("Upsample", 9)
def upsample_9(ctx, X, scales, *, mode="nearest"):
    return resize_10(ctx, X, scales, mode=mode)


@register_flops("Resize", "Upsample")
def _resize_flops(layer, in_shapes, out_shapes):
    """Per output element: 0 for nearest, 2 per tap and resized axis otherwise (multiply-add = 2)."""
    out = out_shapes[0] if out_shapes else None
    if out is None:
        return 0
    mode = layer.attrs.get("mode", "nearest")
    taps = {"nearest": 0, "linear": 2, "bilinear": 2, "cubic": 4}.get(mode, 2)
    return 2 * taps * int(np.prod(out)) * max(len(out) - 2, 1)
