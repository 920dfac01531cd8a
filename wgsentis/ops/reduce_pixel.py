"""gpu-pixel programs of the reduce family: ReduceSum ... ReduceLogSumExp, ArgMax/ArgMin and Softmax/LogSoftmax/
Hardmax, and the two programs the pool and norm families build on: ``reduce_keep`` (any reduction over any
axes, wgsl/pixel/reduce.wgsl) and ``apply`` (a texel-wise expression of a tensor and operands broadcast onto it,
wgsl/pixel/reduce_apply.wgsl).

A reduction draws its output with the reduced axes kept as size 1 (a free view drops them for keepdims=0).
Each fragment reduces one output texel with vec4 loads: where the input's blocked axis is kept, the output is
blocked on it too and the four lanes of every input texel read are four outputs' elements (the texel form);
where it is reduced, each of four output elements along another axis loads its own texels, masks the padding
lanes of the last block to the identity and adds its four lanes up at the end (the blocked form). The loop
nest runs over *groups*: runs of reduced dims merged where their texels are contiguous. lavapipe ends every
shader's loops after 65535 passes per invocation, so a region too long for one invocation (or long while the
outputs are too few to keep the cores busy) is split: its largest group is cut into chunks reduced by a first
draw into a partial tensor (that axis holding one element per chunk), and the partials are reduced again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from wgsentis.backends.gpu import shader_gen
from wgsentis.backends.gpu.tensors import GTensor, loop_passes
from wgsentis.backends.pixel_layout import MAX_RANK, TextureLayout, addressing_params
from wgsentis.ops.reduce_gpu import identity_reduction, norm_axis, reduction_axes
from wgsentis.ops.reduce_spec import softmax_axis
from wgsentis.ops.registry import GPU_PIXEL, register

OVERHEAD = 64  # loop passes of a reduce.wgsl invocation besides its loop nest (the addressing loops)
SPLIT_OUTPUTS = 16  # fewer output texels than this ...
SPLIT_REGION = 16384  # ... reducing at least this many texels each: split for parallelism
SPLIT_CHUNKS = 64  # chunks per output when split for parallelism
# A sum (or log-sum-exp) over at least this many texels a lane is split too, for accuracy: one running float32 sum
# loses precision with its length (a Softmax over 5000 rows: 1.7e-6 relative). Split into chunks of LONG_CHUNK
# texels, whose partial sums are summed the same way while they are as many, the sums form a LONG_CHUNK-ary tree
# whose error grows as LONG_CHUNK * log(n) / log(LONG_CHUNK) (3-4e-7 at 5000 rows). 1024 texels are
# numeric.LONG_SUM's 4096 elements in the blocked form, where each lane sums its four elements per texel at the end.
LONG_TEXELS = 1024
LONG_CHUNK = 64
CENTER, GROUP_WORDS = shader_gen.CENTER, shader_gen.GROUP_WORDS  # reduce.wgsl's center and group words


@dataclass(frozen=True)
class Reduction:
    """What reduce.wgsl computes: ``op`` (sum, prod, max, min, or lse: log-sum-exp in two sweeps, the max then
    the sum of exp(x - max)) over ``pre`` of each element (less the center tensor's value where one is given),
    then ``post`` of the result; ``scale`` (the mean's 1/R), ``p`` and ``eps`` are their parameters."""

    op: str
    pre: str = ""
    post: str = ""
    scale: float = 1.0
    p: float = 2.0
    eps: float = 0.0


# kind -> (op, pre, post) of the Reduce* ops; the mean and the Lp norm take their scale and p from the call.
KINDS: dict[str, tuple[str, str, str]] = {
    "sum": ("sum", "", ""), "mean": ("sum", "", "scale"), "prod": ("prod", "", ""), "max": ("max", "", ""),
    "min": ("min", "", ""), "l1": ("sum", "abs", ""), "l2": ("sum", "sq", "sqrt"), "sumsquare": ("sum", "sq", ""),
    "logsum": ("sum", "", "log"), "logsumexp": ("lse", "", ""), "lp": ("sum", "pow", "root"),
}
INT_KINDS = {np.dtype(np.int32): {"sum", "prod", "max", "min", "l1", "sumsquare"},  # exact (wrapping) in int32
             np.dtype(np.int64): {"max", "min"},  # results that cannot leave the int32 range
             np.dtype(np.bool_): {"max", "min"}}
_REDUCE_OPS = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min",
               "ReduceProd": "prod", "ReduceL1": "l1", "ReduceL2": "l2", "ReduceLogSum": "logsum",
               "ReduceLogSumExp": "logsumexp", "ReduceSumSquare": "sumsquare"}


def reduction(kind: str, length: int, p: float = 2.0) -> Reduction:
    """The Reduction of a Reduce* kind over rows of ``length`` elements."""
    op, pre, post = KINDS[kind]
    return Reduction(op, pre, post, scale=1.0 / length if length else float("nan"), p=p)


def texture(t: Any) -> GTensor | None:
    """``t`` if it is a texture tensor, else None."""
    return t if isinstance(t, GTensor) and t.layout is not None else None


def texel_strides(layout: TextureLayout) -> list[int]:
    """Texels between neighbours along each axis (the blocked axis counting blocks)."""
    blocked = layout.blocked_shape
    strides, step = [0] * len(blocked), 1
    for d in range(len(blocked) - 1, -1, -1):
        strides[d] = step
        step *= blocked[d]
    return strides


def _groups(layout: TextureLayout, axes: set[int]) -> list[list[int]]:
    """The reduced region as [size, texel stride, blocked, first axis] groups, outermost first: reduced dims
    whose texels are contiguous merged, dims of one texel dropped; the blocked axis, when reduced, is a group of
    its own (its last block is masked)."""
    blocked = layout.blocked_shape
    strides = texel_strides(layout)
    groups: list[list[int]] = []
    for d in sorted(axes):
        n = blocked[d]
        if d == layout.axis:
            groups.append([n, strides[d], 1, d])
        elif n != 1:
            if groups and not groups[-1][2] and groups[-1][1] == strides[d] * n:
                groups[-1][0] *= n
                groups[-1][1] = strides[d]
            else:
                groups.append([n, strides[d], 0, d])
    return groups


def _passes(red: Reduction, trips: list[int]) -> int:
    """Loop passes of one reduce.wgsl invocation over ``trips`` (its nest, once per sweep)."""
    return (2 if red.op == "lse" else 1) * loop_passes(*trips) + OVERHEAD


def reduce_keep(rec, x: GTensor, axes: set[int], red: Reduction, center: GTensor | None = None
                ) -> GTensor | Any:
    """Record ``red`` of texture tensor ``x`` over ``axes`` into a new tensor of x's shape with those axes set to 1;
    ``center`` (of that shape, float32) is subtracted from each element first. NotImplemented past what the
    device runs."""
    if x.ndim == 0:  # a scalar: a one-element vector
        out = reduce_keep(rec, rec.view(x, (1,)), set(), red, None if center is None else rec.view(center, (1,)))
        return out if out is NotImplemented else rec.view(out, ())
    if x.ndim > MAX_RANK:
        return NotImplemented
    rank, b = x.ndim, x.layout.axis
    keep = tuple(1 if d in axes else s for d, s in enumerate(x.shape))
    kept = [d for d in range(rank) if d not in axes and x.shape[d] > 1]
    texel_form = b not in axes
    groups = _groups(x.layout, axes)
    trips = [g[0] for g in groups]
    out_axis = b if texel_form else (kept[-1] if kept else rank - 1)
    few = -(-math.prod(keep) // 4) < SPLIT_OUTPUTS and math.prod(trips) >= SPLIT_REGION
    long = red.op in ("sum", "lse") and x.dtype == np.float32 and math.prod(trips) >= LONG_TEXELS
    if not groups or (rec.loops_fit(_passes(red, trips)) and not few and not long):
        return _draw(rec, x, axes, keep, out_axis, groups, red, center, None)
    # Split the largest group into chunks: it goes outermost and a first draw reduces each chunk.
    big = max(range(len(groups)), key=lambda i: groups[i][0])
    groups = [groups[big], *groups[:big], *groups[big + 1:]]
    size, rest = groups[0][0], trips[:big] + trips[big + 1:]
    if not rec.loops_fit(_passes(red, [1, *rest])):
        return NotImplemented
    lo, hi = 1, size
    while lo < hi:  # the longest chunk that fits
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if rec.loops_fit(_passes(red, [mid, *rest])) else (lo, mid - 1)
    chunk = min(lo, max(64, -(-size // SPLIT_CHUNKS))) if few else lo
    if long:
        chunk = min(chunk, LONG_CHUNK)
    chunks = -(-size // chunk)
    if chunks == 1:
        return _draw(rec, x, axes, keep, out_axis, groups, red, center, None)
    at = groups[0][3]  # the partials' axis: one element per chunk
    part_shape = list(keep)
    part_shape[at] = chunks
    if not texel_form and not kept:
        others = [d for d in range(rank) if d != at]
        if others:
            out_axis = others[-1]
        else:  # a vector: a trailing dim of one element to block
            part_shape.append(1)
            out_axis = rank
    part = _draw(rec, x, axes, tuple(part_shape), out_axis, groups, replace(red, post=""), center, (at, chunk))
    out = reduce_keep(rec, part, {at}, Reduction(red.op, "", red.post, red.scale, red.p, red.eps))
    if out is NotImplemented or out.shape == keep:
        return out
    return rec.view(out, keep)


def _draw(rec, x: GTensor, axes: set[int], out_shape: tuple[int, ...], out_axis: int, groups: list[list[int]],
          red: Reduction, center: GTensor | None, split: tuple[int, int] | None) -> GTensor:
    """One reduce.wgsl draw into a new tensor of ``out_shape`` blocked on ``out_axis``; ``split``: (the axis
    holding the chunk index, the chunk length) of the first stage of a split reduction, its group first."""
    kind = x.layout.kind
    out = rec.alloc(out_shape, x.dtype, out_axis)
    if out.size == 0:
        return out
    texel_form = x.layout.axis not in axes
    lead = MAX_RANK - len(out_shape)
    strides = texel_strides(x.layout)
    ostride = [0] * MAX_RANK
    for d in range(x.ndim):
        if d not in axes:
            ostride[lead + d] = strides[d]
    lanes = 1 if texel_form or out_shape[out_axis] == 1 else 4
    blocked = next((i for i, g in enumerate(groups) if g[2]), None)
    rem = x.shape[x.layout.axis] % 4 or 4
    params: list[int | float] = [*addressing_params(out.layout), *ostride,
                                 lead + split[0] if split else 0, split[1] if split else 0, x.layout.shift, rem,
                                 float(red.scale), float(red.p), 1.0 / float(red.p), float(red.eps)]
    for size, stride, _blocked, _axis in groups:
        params += [size, stride]
    inputs = [x]
    if center is not None:
        if texel_form and center.layout.axis != center.ndim - len(out_shape) + out_axis:
            center = rec.relayout(center, center.ndim - len(out_shape) + out_axis)
        inputs.append(center)
        params += [0] * (CENTER - len(params)) + addressing_params(center.layout)
    subs, constants = shader_gen.reduce_subs(red.op, red.pre, red.post, kind, lanes, texel_form, len(groups),
                                             blocked, split is not None, center is not None)
    rec.draw("pixel/reduce.wgsl", inputs, [out], params, subs=subs, constants=constants)
    return out


# -- apply: a texel-wise expression of x and operands broadcast onto it ---------------------------------------
def host_param(rec, value: np.ndarray, shape: tuple[int, ...], name: str) -> np.ndarray:
    """A constant reshaped (float32), kept once per program so that its upload is too."""
    return rec.program.constants.derived(("pixel-param", tuple(shape)), (value,),
                                         lambda: np.asarray(value, np.float32).reshape(shape))


def apply(rec, x: GTensor, operands: list[Any], expr: str, extra: list[int | float] | None = None,
          helpers: str = "", label: str = "") -> GTensor:
    """Record y = ``expr`` (a four-lane float32 WGSL expression of ``x``, the operands ``o0``, ``o1``... and the words
    ``extra`` as pe(i) / pef(i): an expression file, ``pixel/expr/*.wgsl``, or its text) into a new float32 tensor
    of x's shape and layout, with the functions ``helpers`` (text or a file). Operands (texture tensors or host
    arrays) broadcast onto x with numpy's rules and have at most x's rank."""
    fb = MAX_RANK - x.ndim + x.layout.axis  # x's blocked axis in the 6-dim frame
    params = [*addressing_params(x.layout)]
    tensors, blocked = [x], []
    for k, operand in enumerate(operands):
        d = fb - (MAX_RANK - operand.ndim)  # the operand's axis along x's blocked axis
        varies = 0 <= d < operand.ndim and operand.shape[d] > 1
        if isinstance(operand, np.ndarray):
            t = rec.upload(operand, f"operand {k}", d if varies else -1)
        else:
            t = rec.relayout(operand, d) if varies else operand
        blocked.append(varies)  # blocked on x's blocked axis: the texel of lane 0 holds the four lanes
        params += addressing_params(t.layout)
        tensors.append(t)
    extra_at = len(params)
    params += list(extra or [])
    y = rec.alloc(x.shape, np.float32, x.layout.axis)
    subs = shader_gen.apply_subs([t.layout.kind for t in tensors[1:]], blocked, shader_gen.snippet(expr), extra_at,
                                 shader_gen.snippet(helpers))
    rec.draw("pixel/reduce_apply.wgsl", tensors, [y], params, subs=subs, label=label)
    return y


def div4_helper(rec) -> str:
    """WGSL ``div4(a, b)``: vec4 division with the device's exact float division (math.wgsl)."""
    return shader_gen.div4(rec.ctx.division_function)


# -- Reduce* --------------------------------------------------------------------------------------------------
def _reduce(rec, kind: str, data: Any, axes: list[int] | None, keepdims: int, noop_with_empty_axes: int):
    x = texture(data)
    if x is None or x.ndim > MAX_RANK:
        return NotImplemented
    rank = x.ndim
    if identity_reduction(kind, axes, noop_with_empty_axes):
        return rec.view(x, x.shape)
    resolved = reduction_axes(axes, rank, noop_with_empty_axes)
    if resolved is None:
        return NotImplemented
    length = math.prod(x.shape[d] for d in resolved)
    if x.layout.kind == "i32":
        if kind not in INT_KINDS.get(x.dtype, ()):
            return NotImplemented
        if kind in ("max", "min") and length == 0 and x.dtype != np.int32:
            return NotImplemented  # the identity (an int64 or bool extreme) has no int32 stand-in
    elif x.dtype != np.float32:
        return NotImplemented
    out = reduce_keep(rec, x, resolved, reduction(kind, length))
    if out is NotImplemented or keepdims:
        return out
    shape = tuple(s for d, s in enumerate(x.shape) if d not in resolved)
    return rec.view(out, shape) or rec.reshape(out, shape)


def _register_reduce(op: str, kind: str, axes_input_since: int) -> None:
    @register(op, axes_input_since, backend=GPU_PIXEL, host_inputs=(1,))
    def build_input(rec, layer, data, axes=None, *, keepdims=1, noop_with_empty_axes=0, **attrs):
        listed = None if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]
        return _reduce(rec, kind, data, listed, keepdims, noop_with_empty_axes)


for _op, _kind in _REDUCE_OPS.items():
    _register_reduce(_op, _kind, 13 if _op == "ReduceSum" else 18)


# -- ArgMax / ArgMin ------------------------------------------------------------------------------------------
def arg_reduce(rec, x: GTensor, axis: int, select_last_index: int, op: str) -> GTensor | Any:
    """The index (int64) of the first (or last) max / min along ``axis`` of ``x``, that axis kept as 1; NaN wins
    as in numpy. One map.wgsl lane per output, stepping along the axis from its first texel."""
    r = x.shape[axis]
    if not rec.loops_fit(loop_passes(4, r) + OVERHEAD):
        return long_arg_reduce(rec, x, axis, select_last_index, op)
    along_block = axis == x.layout.axis
    keep = tuple(1 if d == axis else s for d, s in enumerate(x.shape))
    others = [d for d in range(x.ndim) if d != axis and x.shape[d] > 1]
    out_axis = x.layout.axis if not along_block else (others[-1] if others else axis)
    kind = x.layout.kind
    constants = {"ARG_MAX": op == "max", "ALONG_BLOCK": along_block, "FLOAT_KEYS": kind == "f32"}
    words = [r, int(bool(select_last_index)), MAX_RANK - x.ndim + axis]  # the axis in the 6-dim frame
    return rec.map([x], keep, np.int64, out_axis, "pixel/body/arg_reduce.wgsl", words,
                   helpers="pixel/body/arg_reduce_order.wgsl", subs={"T": kind}, constants=constants)


# Positions along the axis are float32 keys in long_arg_reduce: exact up to 2^24.
LONG_ARG_LIMIT = 1 << 24


def long_arg_reduce(rec, x: GTensor, axis: int, select_last_index: int, op: str) -> GTensor | Any:
    """arg_reduce along an axis too long for one lane's loop (a language model's vocabulary on lavapipe): the
    best value per row by the (split) Max / Min reduction, each position where the row has it as a float key, the
    smallest (first) or largest (last) of those keys by another reduction, cast to int64. float32 only."""
    r = x.shape[axis]
    if x.layout.kind != "f32" or r >= LONG_ARG_LIMIT:
        return NotImplemented
    best = reduce_keep(rec, x, {axis}, Reduction(op))
    if best is NotImplemented:
        return best
    last = bool(select_last_index)
    words = [MAX_RANK - x.ndim + axis, int(axis == x.layout.axis), -1.0 if last else float(LONG_ARG_LIMIT)]
    keys = apply(rec, x, [best], "pixel/expr/arg_match.wgsl", words, helpers="pixel/expr/arg_match_nan.wgsl")
    index = reduce_keep(rec, keys, {axis}, Reduction("max" if last else "min"))
    if index is NotImplemented:
        return index
    return rec.lanes([index], index.shape, np.int64, index.layout.axis, "pixel/body/cast_f32_to_int.wgsl")


def _arg(rec, data: Any, axis: int, keepdims: int, select_last_index: int, op: str):
    x = texture(data)
    if x is None or x.ndim == 0 or x.ndim > MAX_RANK or (x.layout.kind == "f32" and x.dtype != np.float32):
        return NotImplemented
    a = norm_axis(axis, x.ndim)
    if a is None or x.shape[a] == 0:
        return NotImplemented  # the CPU kernel reports the error
    out = arg_reduce(rec, x, a, select_last_index, op)
    if out is NotImplemented or keepdims:
        return out
    shape = x.shape[:a] + x.shape[a + 1:]
    return rec.view(out, shape) or rec.reshape(out, shape)


@register("ArgMax", 1, backend=GPU_PIXEL)
def arg_max(rec, layer, data, *, axis=0, keepdims=1, select_last_index=0, **attrs):
    return _arg(rec, data, axis, keepdims, select_last_index, "max")


@register("ArgMin", 1, backend=GPU_PIXEL)
def arg_min(rec, layer, data, *, axis=0, keepdims=1, select_last_index=0, **attrs):
    return _arg(rec, data, axis, keepdims, select_last_index, "min")


# -- Softmax / LogSoftmax / Hardmax ---------------------------------------------------------------------------
def softmax(rec, x: GTensor, axes: set[int], mode: str) -> GTensor | Any:
    """Softmax or LogSoftmax of ``x`` over ``axes`` (several for opset < 13's rows): the rows' max, the sums of
    exp(x - max) (a reduction centred on the max), then the normalization texel by texel."""
    if x.size == 0:
        return rec.alloc(x.shape, np.float32, x.layout.axis)
    peak = reduce_keep(rec, x, axes, Reduction("max"))
    if peak is NotImplemented:
        return peak
    total = reduce_keep(rec, x, axes, Reduction("sum", "exp"), center=peak)
    if total is NotImplemented:
        return total
    if mode == "softmax":
        return apply(rec, x, [peak, total], "pixel/expr/softmax.wgsl", helpers=div4_helper(rec))
    return apply(rec, x, [peak, total], "pixel/expr/log_softmax.wgsl")


def hardmax(rec, x: GTensor, axis: int) -> GTensor | Any:
    """1 at the first maximum along ``axis``, 0 elsewhere: ArgMax, then a comparison texel by texel."""
    if x.size == 0:
        return rec.alloc(x.shape, np.float32, x.layout.axis)
    idx = arg_reduce(rec, x, axis, 0, "max")
    if idx is NotImplemented:
        return idx
    words = [MAX_RANK - x.ndim + axis, int(axis == x.layout.axis)]  # the axis in the 6-dim frame, whether blocked
    return apply(rec, x, [idx], "pixel/expr/hardmax.wgsl", words)


def _softmax_v1(rec, x: GTensor, axis: int, mode: str):
    """Opset < 13: the input coerced to 2-D rows (prod(shape[:axis]), prod(shape[axis:])); ``axis`` normalized
    (reduce_spec.softmax_axis)."""
    rank = x.ndim
    if mode != "hardmax":
        if axis == rank:  # rows of one element each
            return softmax(rec, rec.view(x, (*x.shape, 1)), {rank}, mode) if rank < MAX_RANK else NotImplemented
        return softmax(rec, x, set(range(axis, rank)), mode)
    rows, cols = math.prod(x.shape[:axis]), math.prod(x.shape[axis:])
    flat = rec.reshape(x, (rows, cols), 1)
    y = hardmax(rec, flat, 1)
    return y if y is NotImplemented else rec.reshape(y, x.shape, x.layout.axis)


def _register_softmax(op: str, mode: str) -> None:
    @register(op, 1, backend=GPU_PIXEL)
    def build_v1(rec, layer, x, *, axis=1, **attrs):
        t = texture(x)
        if t is None or t.dtype != np.float32 or t.ndim > MAX_RANK:
            return NotImplemented
        found = softmax_axis(1, axis, t.ndim)
        out = NotImplemented if found is None else _softmax_v1(rec, t, found[0], mode)
        if out is NotImplemented or out.shape == t.shape:
            return out
        return rec.view(out, t.shape)

    @register(op, 13, backend=GPU_PIXEL)
    def build(rec, layer, x, *, axis=-1, **attrs):
        t = texture(x)
        if t is None or t.dtype != np.float32 or t.ndim == 0 or t.ndim > MAX_RANK:
            return NotImplemented
        found = softmax_axis(13, axis, t.ndim)
        if found is None:
            return NotImplemented
        a = found[0]
        return hardmax(rec, t, a) if mode == "hardmax" else softmax(rec, t, {a}, mode)


for _op, _mode in (("Softmax", "softmax"), ("LogSoftmax", "logsoftmax"), ("Hardmax", "hardmax")):
    _register_softmax(_op, _mode)


__all__ = ["KINDS", "Reduction", "apply", "arg_reduce", "div4_helper", "host_param", "norm_axis", "reduce_keep",
           "reduction", "softmax", "texel_strides", "texture"]
