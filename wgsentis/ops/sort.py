"""Sorting operators (numpy kernels): TopK, in numpy's order (NaN the largest; equal values keep the smaller index
first), which its GPU programs (ops/sort_gpu.py) reproduce bit for bit."""

from __future__ import annotations

import numpy as np

from wgsentis.ops.registry import register
from wgsentis.ops.tensor import normalized_axis, int_scalar


def _top_k(x: np.ndarray, k: int, axis: int, largest: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k along ``axis``, sorted; ties keep the smaller index first."""
    axis = normalized_axis(axis, x.ndim)
    n = x.shape[axis]
    if not 0 <= k <= n:
        raise ValueError(f"TopK: k={k} is out of range for axis size {n}")
    if largest:
        # Sort the reversed axis ascending (stable), then reverse: descending values with
        # equal values in increasing original index.
        rev = np.flip(x, axis)
        order = np.flip(np.argsort(rev, axis=axis, kind="stable"), axis)
        order = (n - 1) - order
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    order = np.take(order, np.arange(k), axis=axis).astype(np.int64)
    return np.take_along_axis(x, order, axis=axis), order


@register("TopK", 1)
def top_k_v1(ctx, x, *, axis=-1, k=None):
    if k is None:
        raise ValueError("TopK-1 needs 'k'")
    return _top_k(x, k, axis, 1)


@register("TopK", 10)
def top_k_v10(ctx, x, K, *, axis=-1):
    return _top_k(x, int_scalar(K), axis, 1)


@register("TopK", 11)
def top_k(ctx, x, K, *, axis=-1, largest=1, sorted=1):
    # Unsorted output may be in any order; sorted is as good as any.
    return _top_k(x, int_scalar(K), axis, largest)
