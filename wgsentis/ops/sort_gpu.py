"""TopK on both GPU backends, by rank: each element counts the elements of its row ahead of it in the CPU
kernel's order (``sort._top_k``: larger first, or smaller first for ``largest=0``; NaN ahead of every number
for the largest and behind for the smallest, as numpy's sort puts it; equal values by index), so the output is
bit-identical to the CPU's, values and indices. gpu-compute writes each element whose rank is below k to that
position of its row (ranks in a row are a permutation: no two write one place); gpu-pixel draws the ranks,
then each output element scans its row for the rank it holds. Both cost a row's length per element (a detector's
TopK over a few thousand candidates, not a sort of millions); a row longer than a shader's loops can run
declines to the CPU kernel.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from wgsentis.backends.gpu.tensors import loop_passes
from wgsentis.backends.pixel_layout import MAX_RANK
from wgsentis.ops.registry import GPU_COMPUTE, GPU_PIXEL, register

PIXEL_OVERHEAD = 64  # loop passes of a map.wgsl lane besides the scan (its addressing loops)


def _order(kind: str, largest: bool) -> tuple[dict[str, str], dict[str, int | float]]:
    """The substitutions and override constants of common/topk_order.wgsl (the CPU kernel's order) for keys of
    texel or storage type ``kind``."""
    return {"T": kind}, {"LARGEST": bool(largest), "FLOAT_KEYS": kind == "f32"}


def _plan(x: Any, k: Any, axis: Any) -> tuple[int, int] | None:
    """(axis, k) of a TopK the GPU programs run; None where the CPU kernel raises (axis or k out of range)."""
    shape = getattr(x, "shape", None)
    if shape is None or not shape or getattr(x, "dtype", None) not in (np.dtype(np.float32), np.dtype(np.int32),
                                                                       np.dtype(np.int64)):
        return None
    rank = len(shape)
    if isinstance(axis, bool) or not isinstance(axis, int | np.integer) or not -rank <= axis < rank:
        return None
    k_value = np.asarray(k).reshape(-1)
    if k_value.size != 1 or k_value.dtype.kind not in "iu":
        return None
    axis, k = int(axis) % rank, int(k_value[0])
    return (axis, k) if 0 <= k <= shape[axis] else None


def _top_k_compute(rec, x, k, axis, largest) -> Any:
    plan = _plan(x, k, axis)
    if plan is None or not hasattr(x, "gpu_type") or x.alloc is None:
        return NotImplemented
    axis, k = plan
    shape = tuple(x.shape)
    length, inner = shape[axis], math.prod(shape[axis + 1:])
    out_shape = (*shape[:axis], k, *shape[axis + 1:])
    values, indices = rec.alloc(out_shape, x.dtype), rec.alloc(out_shape, np.int64)
    order_subs, order_constants = _order(x.gpu_type, bool(largest))
    if values.size:
        rec.dispatch("compute/topk.wgsl", [x], [values, indices], [x.size, inner, length, k], x.size,
                     workgroup=64,
                     subs=order_subs, constants=order_constants, loops=loop_passes(length))
    return values, indices


def _top_k_pixel(rec, x, k, axis, largest) -> Any:
    plan = _plan(x, k, axis)
    t = None if plan is None else rec.tensor(x)
    if t is None or len(t.shape) > MAX_RANK:
        return NotImplemented
    axis, k = plan
    length = t.shape[axis]
    if not rec.loops_fit(loop_passes(4, length) + PIXEL_OVERHEAD):
        return NotImplemented
    out_shape = (*t.shape[:axis], k, *t.shape[axis + 1:])
    if not math.prod(out_shape):
        return rec.alloc(out_shape, t.dtype), rec.alloc(out_shape, np.int64)
    order_subs, order_constants = _order(t.layout.kind, bool(largest))
    row = [length, MAX_RANK - len(t.shape) + axis]  # the row's length and its axis in the 6-dim frame
    ranks = rec.map([t], t.shape, np.int32, t.layout.axis, "pixel/body/topk_rank.wgsl", row,
                    helpers="common/topk_order.wgsl", subs=order_subs, constants=order_constants)
    out_axis = t.layout.axis
    values = rec.map([t, ranks], out_shape, t.dtype, out_axis, "pixel/body/topk_values.wgsl", row)
    indices = rec.map([ranks], out_shape, np.int64, out_axis, "pixel/body/topk_indices.wgsl", row)
    return values, indices


for _backend, _build in ((GPU_COMPUTE, _top_k_compute), (GPU_PIXEL, _top_k_pixel)):
    def _register(build=_build, backend=_backend) -> None:
        @register("TopK", 11, backend=backend, host_inputs=(1,))
        def top_k(rec, layer, x, K, *, axis=-1, largest=1, sorted=1, **attrs):
            return build(rec, x, K, axis, largest)

    _register()
