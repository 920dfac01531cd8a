"""gpu-compute programs of the resize family: Resize and Upsample (nearest, linear and cubic, every
coordinate transformation, tf_crop_and_resize). The tap tables are the CPU kernel's own: linear and cubic
from resize.resize_plan (ONNX Runtime's float32 arithmetic, combined in its order by the shaders), nearest
from the same per-axis functions the CPU kernel runs. The usual case of at most two interpolated axes runs
resize2.wgsl, more axes resize.wgsl."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from wgsentis.backends.gpu.tensors import loop_passes
from wgsentis.ops import resize as resize_rules
from wgsentis.ops.elementwise_gpu import refusing
from wgsentis.ops.resize import resize_args
from wgsentis.ops.registry import GPU_COMPUTE, register
from wgsentis.ops.tensor_gpu import MAX_RANK, device_tensor, dispatch_copy, pad6, row_strides, storage_bits

KINDS = {"nearest": 0, "corners": 1, "passes": 2}  # the shaders' KIND override


def resize_tables(shape, scales, sizes, roi, *, mode, ctm, nearest_mode, cubic_a, exclude_outside, axes, policy):
    """Output shape, per-axis tables (taps, weights, outside, divisors) as the CPU kernel computes them (None for
    axes left out) and how they combine (a KINDS key); raises ValueError where the CPU kernel would."""
    rank = len(shape)
    if mode != "nearest":
        plan = resize_rules.resize_plan(shape, scales, sizes, roi, mode=mode, ctm=ctm, cubic_a=cubic_a,
                                        exclude_outside=exclude_outside, axes=axes, policy=policy)
        tables: list[Any] = [None] * rank
        for a, table in plan.tables.items():
            tables[a] = (table.taps.astype(np.int32), table.weights, table.outside, table.divisors)
        return list(plan.out_shape), tables, plan.crop, plan.combine
    axes, scale_of, out_of, roi_lo, roi_hi = resize_rules.resize_geometry(shape, scales, sizes, roi, axes, policy)
    crop = ctm == "tf_crop_and_resize"
    out_shape = [out_of[a] for a in range(rank)]
    tables = [None] * rank
    for a in axes:
        in_len, out_len, scale = shape[a], out_of[a], scale_of[a]
        if out_len == in_len and scale == 1.0 and (not crop or (roi_lo[a] == 0.0 and roi_hi[a] == 1.0)):
            continue
        if out_len == 0 or in_len == 0:
            continue
        x = resize_rules.source_coords(ctm, out_len, in_len, scale, roi_lo[a], roi_hi[a])
        taps, _ = resize_rules.axis_taps(mode, x, in_len, scale, nearest_mode=nearest_mode, cubic_a=cubic_a,
                                         antialias=False, exclude_outside=bool(exclude_outside))
        taps = np.clip(taps, 0, in_len - 1).astype(np.int32)
        outside = ((x < 0) | (x > in_len - 1)) if crop else np.zeros(out_len, bool)
        tables[a] = (taps, np.ones(taps.shape, np.float32), outside, np.ones(out_len, np.float32))
    return out_shape, tables, crop, "nearest"


def _resize(rec, layer, X, scales, sizes, roi, *, mode, ctm, nearest_mode, cubic_a=-0.75, exclude_outside=0,
            extrapolation_value=0.0, antialias=0, axes=None, policy="stretch"):
    x = device_tensor(rec, X)
    if x is None or antialias or mode not in ("nearest", "linear", "cubic") or not 0 < len(x.shape) <= MAX_RANK:
        return NotImplemented
    if mode != "nearest" and x.dtype != np.float32:
        return NotImplemented  # integer interpolation (ORT's fixed point, truncation) runs on the CPU
    try:
        out_shape, tables, crop, combine = resize_tables(
            tuple(x.shape), scales, sizes, roi, mode=mode, ctm=ctm, nearest_mode=nearest_mode, cubic_a=cubic_a,
            exclude_outside=exclude_outside, axes=axes, policy=policy)
        extrap = storage_bits(np.asarray(extrapolation_value).astype(x.dtype), x.dtype)
    except (ValueError, OverflowError):
        return NotImplemented  # the CPU kernel raises its own error
    y = rec.alloc(out_shape, x.dtype)
    if not y.size:
        return y
    resized = [a for a, t in enumerate(tables) if t is not None]
    if not resized:  # every axis keeps its size and coordinates
        dispatch_copy(rec, x, y, [(y.size, 1, 1, 0)])
        return y
    constants = {"KIND": KINDS[combine]}
    subs = {"T": x.gpu_type, "DIV": rec.ctx.division_function}
    if len(resized) <= 2:
        _resize2(rec, layer, x, y, tables, resized, extrap, crop, constants, subs)
        return y
    parts, offsets, ntaps, used = [], [], [], 0
    for table in tables:
        if table is None:
            offsets.append(0)
            ntaps.append(0)
            continue
        offsets.append(used)
        ntaps.append(table[0].shape[1])
        for part in _table_words(table):
            parts.append(part)
            used += part.size
    tb = rec.upload(np.concatenate(parts), f"{layer.name}:taps")
    rank = len(x.shape)
    params = [y.size, rank, extrap, int(crop), *pad6(out_shape), *pad6(row_strides(x.shape), 0),
              *pad6(offsets, 0), *pad6(ntaps, 0)]
    # per combination two rank loops one after the other: counted as one of 2 * rank + 1 trips (as many passes)
    loops = loop_passes(rank) + loop_passes(math.prod(n for n in ntaps if n), 2 * rank + 1)
    rec.dispatch("compute/resize.wgsl", [x, tb], [y], params, y.size, workgroup=256, constants=constants,
                 subs=subs, loops=loops)
    return y


def _table_words(table) -> list[np.ndarray]:
    """One axis' table as int32 words: taps, weight bits, outside flags, divisor bits."""
    taps, weights, outside, divisors = table
    return [taps.reshape(-1), weights.astype(np.float32).reshape(-1).view(np.int32), outside.astype(np.int32),
            divisors.astype(np.float32).view(np.int32)]


def _resize2(rec, layer, x, y, tables, resized, extrap: int, crop: bool, constants: dict, subs: dict) -> None:
    """The usual case of at most two interpolated axes: input viewed as (outer, A, mid, B, inner)."""
    shape = x.shape
    rb = resized[-1]
    ra = resized[0] if len(resized) == 2 else None
    dummy = (np.zeros((1, 1), np.int32), np.ones((1, 1), np.float32), np.zeros(1, bool), np.ones(1, np.float32))
    table_a = tables[ra] if ra is not None else dummy
    table_b = tables[rb]
    words_a, words_b = _table_words(table_a), _table_words(table_b)
    size_a = sum(w.size for w in words_a)
    tb = rec.upload(np.concatenate([*words_a, *words_b]), f"{layer.name}:taps")
    inner = math.prod(shape[rb + 1:])
    if ra is not None:
        mid, a_in, a_out = math.prod(shape[ra + 1:rb]), shape[ra], y.shape[ra]
    else:
        mid, a_in, a_out = 1, 1, 1
    params = [y.size, inner, y.shape[rb], mid, a_out, shape[rb], a_in, 0, table_a[0].shape[1], size_a,
              table_b[0].shape[1], extrap, int(crop)]
    constants = {**constants, "HAS_A": int(a_out > 1), "HAS_MID": int(mid > 1), "HAS_INNER": int(inner > 1)}
    rec.dispatch("compute/resize2.wgsl", [x, tb], [y], params, y.size, workgroup=256, constants=constants,
                 subs=subs, loops=loop_passes(table_a[0].shape[1], table_b[0].shape[1]))


@register("Resize", 10, backend=GPU_COMPUTE, host_inputs=(1,))
@refusing
def resize_10(rec, layer, X, scales, *, mode="nearest", **attrs):
    return _resize(rec, layer, X, scales, None, None, **resize_args(10, {"mode": mode}))


@register("Resize", 11, backend=GPU_COMPUTE, host_inputs=(1, 2, 3))
@refusing
def resize(rec, layer, X, roi=None, scales=None, sizes=None, **attrs):
    return _resize(rec, layer, X, scales, sizes, roi, **resize_args(11, attrs))


@register("Upsample", 9, backend=GPU_COMPUTE, host_inputs=(1,))
@refusing
def upsample_9(rec, layer, X, scales, *, mode="nearest", **attrs):
    return resize_10(rec, layer, X, scales, mode=mode)
