"""gpu-compute programs of the reduce family: ReduceSum ... ReduceLogSumExp, ArgMax/ArgMin,
Softmax/LogSoftmax/Hardmax.

A reduction is described by *groups*: the input's dims with size-1 dims dropped and adjacent dims of
the same kind (kept / reduced) merged, so any axis set of a rank-6 tensor fits in 3 kept and 3
reduced groups. One invocation computes one output element, looping over its row. When there are
few outputs and long rows, rows are split into chunks reduced by a first dispatch and the partial
results combined by a second (recursively), which keeps every core busy and sums in a tree.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from wgsentis.backends.gpu.shader_gen import snippet
from wgsentis.backends.gpu.tensors import loop_passes
from wgsentis.ops.numeric import LONG_SUM
from wgsentis.ops.reduce_spec import softmax_axis
from wgsentis.ops.registry import GPU_COMPUTE, register

MAX_GROUPS = 3
CHUNK = 256  # elements per chunk when a reduction is split into stages
SPLIT_ROWS = 256  # split rows only when there are fewer outputs than this
SPLIT_LENGTH = 1024  # ... and rows at least this long
# Elements per partial sum in softmax.wgsl, reduce.wgsl and the norm shaders' sums (their BLOCK): each block's sum
# is added to the total, so a row's rounding error grows as BLOCK + R / BLOCK rather than as R.
REDUCE_BLOCK = 64
SOFTMAX_BLOCK = 64

# kind -> (first-stage OP, PRE, final POST, combining OP); OP: 0 sum, 1 prod, 2 max, 3 min, 4 lse;
# PRE: 0 x, 1 |x|, 2 x*x; POST: 0 none, 1 * (1/R), 2 sqrt, 3 log.
KINDS: dict[str, tuple[int, int, int, int]] = {
    "sum": (0, 0, 0, 0), "mean": (0, 0, 1, 0), "prod": (1, 0, 0, 1), "max": (2, 0, 0, 2), "min": (3, 0, 0, 3),
    "l1": (0, 1, 0, 0), "l2": (0, 2, 2, 0), "sumsquare": (0, 2, 0, 0), "logsum": (0, 0, 3, 0),
    "logsumexp": (4, 0, 0, 4),
}
INT_KINDS = {"sum", "prod", "max", "min", "l1", "sumsquare"}  # exact (wrapping) in int32
INT64_KINDS = {"max", "min"}  # int64 results that cannot leave the int32 range
_REDUCE_OPS = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min",
               "ReduceProd": "prod", "ReduceL1": "l1", "ReduceL2": "l2", "ReduceLogSum": "logsum",
               "ReduceLogSumExp": "logsumexp", "ReduceSumSquare": "sumsquare"}


def _is_gpu(t: Any) -> bool:
    return hasattr(t, "alloc") and hasattr(t, "gpu_type")


def _as_gpu(rec, t: Any, name: str = ""):
    return t if _is_gpu(t) else rec.upload(np.asarray(t), name)


def norm_axis(axis: int, rank: int) -> int | None:
    """``axis`` in [0, rank), or None when out of range (the CPU kernel then reports it)."""
    axis = int(axis)
    if not -rank <= axis < max(rank, 1):
        return None
    return axis + rank if axis < 0 else axis


def groups(shape: tuple[int, ...], axes: set[int]) -> tuple[list[tuple[int, int]], list[tuple[int, int]]] | None:
    """(kept groups, reduced groups) as (size, element stride) lists, outermost first, or None past
    MAX_GROUPS. Size-1 dims are dropped; adjacent dims of the same kind are merged."""
    strides, acc = [0] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        strides[d] = acc
        acc *= shape[d]
    kept: list[list[int]] = []
    red: list[list[int]] = []
    last = None
    for d, size in enumerate(shape):
        if size == 1:
            continue
        kind = d in axes
        target = red if kind else kept
        if last == kind:
            target[-1][0] *= size
            target[-1][1] = strides[d]
        else:
            target.append([size, strides[d]])
        last = kind
    if len(kept) > MAX_GROUPS or len(red) > MAX_GROUPS:
        return None
    return [tuple(g) for g in kept], [tuple(g) for g in red]


def _layout_params(kept, red) -> list[int]:
    """Words 8..21 of reduce.wgsl / norm programs: the row layout."""
    ks = [g[0] for g in kept] + [1] * (MAX_GROUPS - len(kept))
    kst = [g[1] for g in kept] + [0] * (MAX_GROUPS - len(kept))
    rs = [g[0] for g in red] + [1] * (MAX_GROUPS - len(red))
    rst = [g[1] for g in red] + [0] * (MAX_GROUPS - len(red))
    return [len(kept), max(1, len(red)), *ks, *kst, *rs, *rst]


def row_params(shape: tuple[int, ...], axes: set[int]) -> tuple[list[int], int, int] | None:
    """(the 14 layout words, rows, row length) of reducing ``axes`` of ``shape``, or None."""
    g = groups(shape, axes)
    if g is None:
        return None
    kept, red = g
    rows = math.prod(k[0] for k in kept)
    length = math.prod(r[0] for r in red)
    if not red:
        red = [(1, 0)]
    return _layout_params(kept, red), rows, length


def row_passes(length: int, reduced_groups: int, sweeps: int = 1) -> int:
    """Loop passes of an invocation that sweeps ``sweeps`` times over ``length`` elements of a row whose reduced
    dims form ``reduced_groups`` groups: reduce_rows.wgsl's row_offset loops over them for each element (with one
    group it returns first, and its loop still makes one masked pass)."""
    return sweeps * loop_passes(length, reduced_groups if reduced_groups > 1 else 0)


def sum_passes(length: int, reduced_groups: int | None = None) -> int:
    """Loop passes of a sum over ``length`` elements run in blocks of REDUCE_BLOCK, as reduce.wgsl's and the norm
    shaders' sums are: an outer loop over the blocks, an inner one over a block's elements, and (where the row is
    addressed through reduce_rows.wgsl's row_offset, ``reduced_groups`` not None) its loop over the reduced
    groups for each element, as ``row_passes`` counts it."""
    blocks = math.ceil(length / REDUCE_BLOCK)
    if reduced_groups is None:
        return loop_passes(blocks, REDUCE_BLOCK)
    return loop_passes(blocks, REDUCE_BLOCK, reduced_groups if reduced_groups > 1 else 0)


def _reduce_passes(length: int, reduced_groups: int, op: int) -> int:
    """Loop passes of a reduce.wgsl invocation over ``length`` elements with operation ``op``: sums (0) run in
    blocks of REDUCE_BLOCK, log-sum-exp (4) sweeps for its peak and then sums in blocks, the rest sweep once."""
    if op not in (0, 4):
        return row_passes(length, reduced_groups)
    return sum_passes(length, reduced_groups) + (row_passes(length, reduced_groups) if op == 4 else 0)


def reduce_to(rec, x, axes: set[int], kind: str, out_shape: tuple[int, ...]):
    """Record the reduction ``kind`` of ``x`` over ``axes`` into a new tensor of ``out_shape`` (its
    size must be the product of the kept dims); returns it, or NotImplemented."""
    layout = row_params(x.shape, axes)
    if layout is None:
        return NotImplemented
    words, rows, length = layout
    is_int = x.gpu_type in ("i32", "u32")  # bool is stored as u32 0/1: max/min of it are integer ones
    allowed = {np.dtype(np.int32): INT_KINDS, np.dtype(np.int64): INT64_KINDS, np.dtype(np.bool_): {"max", "min"}}
    if is_int and kind not in allowed.get(x.dtype, ()):
        return NotImplemented
    if is_int and kind in ("max", "min") and length == 0 and x.dtype != np.int32:
        return NotImplemented  # the identity (int64 or bool extreme) has no int32 stand-in
    op, pre, post, combine = KINDS[kind]
    shader = "compute/reduce_int.wgsl" if is_int else "compute/reduce.wgsl"
    out = rec.alloc(out_shape, x.dtype)
    scale = 1.0 / length if length else float("nan")
    src, stage = x, 0
    while True:
        chunks = 1
        stage_op = op if stage == 0 else combine
        # words[1]: the reduced groups. Rows longer than one invocation's loops may run on this device are split
        # too (chunks of CHUNK always fit).
        whole = _reduce_passes(length, words[1], stage_op)
        if (rows < SPLIT_ROWS and length >= SPLIT_LENGTH) or not rec.loops_fit(whole):
            chunks = math.ceil(length / CHUNK)
        chunk = math.ceil(length / chunks) if chunks > 1 else max(length, 1)
        final = chunks == 1
        dst = out if final else rec.alloc((rows, chunks), x.dtype)
        consts = {"OP": stage_op, "PRE": pre if stage == 0 else 0}
        if not is_int:
            consts["POST"] = post if final else 0
            if final and stage == 0 and ort_order(kind, pre, words, length):
                # A sum or mean along a contiguous last axis (RMS and layer norms' means): ONNX Runtime's order.
                consts.update(ORDER=1, POST=4 if kind == "mean" else 0)
        params = [rows * chunks, length, chunk, chunks, scale, 0, 0, 0, *words]
        rec.dispatch(shader, [src], [dst], params, rows * chunks, workgroup=64, constants=consts)
        if final:
            return out
        # The partials (rows, chunks) are reduced along their last dim by the combining op.
        src, stage = dst, stage + 1
        words = _layout_params([(rows, chunks)], [(chunks, 1)]) if rows > 1 else _layout_params([], [(chunks, 1)])
        length = chunks


def ort_order(kind: str, pre: int, words: list[int], length: int) -> bool:
    """Whether reduce.wgsl sums this reduction's rows in ONNX Runtime's order (its ORDER 1), as the cpu kernel
    does (ops/numeric.py ort_row_sums): a plain sum or mean over one reduced group of stride 1 (the last axis,
    rows contiguous and one after another) shorter than numeric.LONG_SUM, past which both sum in long-sum form."""
    return kind in ("sum", "mean") and pre == 0 and words[1] == 1 and words[11] == 1 and 0 < length < LONG_SUM


def identity_reduction(kind: str, axes, noop_with_empty_axes: int) -> bool:
    """Whether a Reduce* is its input unchanged: no axes with noop_with_empty_axes, for the reductions that
    leave one element as it is."""
    return (axes is None or len(axes) == 0) and bool(noop_with_empty_axes) and kind in (
        "sum", "mean", "max", "min", "prod")


def reduction_axes(axes, rank: int, noop_with_empty_axes: int) -> set[int] | None:
    """The axes a Reduce* reduces: every axis when none are given (none with noop_with_empty_axes), else the
    given ones normalized; None where the CPU kernel raises (an axis out of range or repeated)."""
    if axes is None or len(axes) == 0:
        return set() if noop_with_empty_axes else set(range(rank))
    resolved: set[int] = set()
    for a in axes:
        n = norm_axis(a, rank)
        if n is None or n in resolved:
            return None
        resolved.add(n)
    return resolved


def _reduce(rec, layer, kind: str, data, axes, keepdims: int, noop_with_empty_axes: int):
    if not _is_gpu(data) or data.dtype not in (np.float32, np.int32, np.int64, np.bool_):
        return NotImplemented
    if identity_reduction(kind, axes, noop_with_empty_axes):
        return rec.view(data, data.shape)
    resolved = reduction_axes(axes, data.ndim, noop_with_empty_axes)
    if resolved is None:
        return NotImplemented
    if keepdims:
        out_shape = tuple(1 if d in resolved else s for d, s in enumerate(data.shape))
    else:
        out_shape = tuple(s for d, s in enumerate(data.shape) if d not in resolved)
    return reduce_to(rec, data, resolved, kind, out_shape)


def _register_reduce(op: str, kind: str, axes_input_since: int) -> None:
    @register(op, axes_input_since, backend=GPU_COMPUTE, host_inputs=(1,))
    def build_input(rec, layer, data, axes=None, *, keepdims=1, noop_with_empty_axes=0, **attrs):
        listed = None if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]
        return _reduce(rec, layer, kind, data, listed, keepdims, noop_with_empty_axes)


for _op, _kind in _REDUCE_OPS.items():
    _register_reduce(_op, _kind, 13 if _op == "ReduceSum" else 18)


# -- ArgMax / ArgMin ------------------------------------------------------------------------------
def _arg_reduce(rec, data, axis: int, keepdims: int, select_last_index: int, op: int):
    if not _is_gpu(data) or data.gpu_type not in ("f32", "i32"):
        return NotImplemented
    axis = norm_axis(axis, data.ndim)
    if axis is None or data.shape[axis] == 0:
        return NotImplemented  # the CPU kernel reports the error
    shape = data.shape
    outer, r, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
    out_shape = shape[:axis] + ((1,) if keepdims else ()) + shape[axis + 1:]
    out = rec.alloc(out_shape, np.int64)
    rec.dispatch("compute/argreduce.wgsl", [data], [out], [outer * inner, r, inner, int(bool(select_last_index))],
                 outer * inner, workgroup=64, constants={"OP": op},
                 subs={"T": data.gpu_type, "IS_NAN": snippet(f"compute/kind/is_nan_{data.gpu_type}.wgsl")},
                 loops=loop_passes(r - 1))
    return out


@register("ArgMax", 1, backend=GPU_COMPUTE)
def arg_max(rec, layer, data, *, axis=0, keepdims=1, select_last_index=0, **attrs):
    return _arg_reduce(rec, data, axis, keepdims, select_last_index, 0)


@register("ArgMin", 1, backend=GPU_COMPUTE)
def arg_min(rec, layer, data, *, axis=0, keepdims=1, select_last_index=0, **attrs):
    return _arg_reduce(rec, data, axis, keepdims, select_last_index, 1)


# -- softmax family -------------------------------------------------------------------------------
def _softmax(rec, x, outer: int, r: int, inner: int, mode: int):
    """Record the softmax family over the middle dim of ``x`` viewed as (outer, r, inner)."""
    if not _is_gpu(x) or x.dtype != np.float32:
        return NotImplemented
    y = rec.alloc(x.shape, x.dtype)
    rows = outer * inner
    # Passes over the row: max, then the write (hardmax), or max, sum of exp and the write.
    # Passes over the row: max, the write, and (but for hardmax) the sum of exp in blocks of SOFTMAX_BLOCK.
    sums = 0 if mode == 2 else loop_passes(math.ceil(r / SOFTMAX_BLOCK), SOFTMAX_BLOCK)
    rec.dispatch("compute/softmax.wgsl", [x], [y], [rows, r, inner], rows, workgroup=64,
                 constants={"MODE": mode}, loops=2 * loop_passes(r) + sums)
    return y


def _register_softmax(op: str, mode: int) -> None:
    def build(rec, layer, x, opset: int, axis: Any) -> Any:
        found = softmax_axis(opset, axis, x.ndim) if _is_gpu(x) else None
        if found is None:
            return NotImplemented
        a, flattened = found
        if flattened:  # (outer, rows of everything from the axis on, 1)
            return _softmax(rec, x, math.prod(x.shape[:a]), math.prod(x.shape[a:]), 1, mode)
        return _softmax(rec, x, math.prod(x.shape[:a]), x.shape[a], math.prod(x.shape[a + 1:]), mode)

    @register(op, 1, backend=GPU_COMPUTE)
    def build_v1(rec, layer, x, *, axis=1, **attrs):
        return build(rec, layer, x, 1, axis)

    @register(op, 13, backend=GPU_COMPUTE)
    def build_v13(rec, layer, x, *, axis=-1, **attrs):
        return build(rec, layer, x, 13, axis)


for _op, _mode in (("Softmax", 0), ("LogSoftmax", 1), ("Hardmax", 2)):
    _register_softmax(_op, _mode)


__all__ = ["groups", "norm_axis", "reduce_to", "row_params", "row_passes", "sum_passes"]
