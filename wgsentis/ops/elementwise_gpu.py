"""gpu-compute programs of the elementwise family: unary functions, activations (their WGSL expressions
are the records' in activations.py; the same expressions are fused into Conv/Gemm/MatMul), broadcasting
binary ops, comparisons, logic, variadic Sum/Max/Min/Mean, Where, and the integer ops (Mod, BitShift,
Bitwise*, integer Abs/Neg/Sign/Clip). Unary and binary ops whose tensors pass the binding limit run in blocks
of elements, each binding its windows of them (``Recorder.element_blocks``)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from wgsentis.backends.gpu.shader_gen import (ARITH, BITWISE, COMPARE, EXPRESSIONS, FLOAT_UNARY, INT_MOD, INT_UNARY,
                                              LOGIC, as_bool, binary4_subs, is_inf, with_division)
from wgsentis.backends.gpu.tensors import Declined
from wgsentis.backends.gpu.tensors import UDIV_MAX_DIVISOR, udiv_words
from wgsentis.ops.activations import ACTIVATIONS, Activation, activation_expr
from wgsentis.ops.registry import GPU_COMPUTE, register

MAX_RANK = 6
_I32_MIN, _I32_MAX = -(2**31), 2**31 - 1
_INTS = (np.dtype(np.int32), np.dtype(np.int64))  # stored on the device as int32 values

def broadcast_strides(shape: tuple[int, ...], out_shape: tuple[int, ...]) -> list[int]:
    """Element strides of a row-major ``shape`` broadcast to ``out_shape`` (0 on broadcast axes)."""
    rank = len(out_shape)
    padded = (1,) * (rank - len(shape)) + tuple(shape)
    strides, acc = [0] * rank, 1
    for axis in range(rank - 1, -1, -1):
        strides[axis] = 0 if padded[axis] == 1 and out_shape[axis] != 1 else acc
        acc *= padded[axis]
    return strides


def _pad6(values: list[int]) -> list[int]:
    return list(values) + [1] * (MAX_RANK - len(values))


def _is_gpu(t: Any) -> bool:
    return hasattr(t, "alloc") and hasattr(t, "gpu_type")


def _as_gpu(rec, t: Any, name: str = ""):
    """A device tensor for ``t`` (host arrays are uploaded once as constants)."""
    return t if _is_gpu(t) else rec.upload(np.asarray(t), name)


def bind_division(rec, expr: str) -> str:
    """``expr`` with its div_f32 calls bound to the device's division (math.wgsl). Only an expression that
    divides asks for it, so models that never divide never run the device's division probe."""
    if "div_f32(" not in expr:
        return expr
    return with_division(expr, rec.ctx.division_function)


def _part(rec, t, first: int, count: int):
    """Elements ``first`` .. ``first + count`` of ``t``: ``t`` itself when that is all of it, else a window."""
    return t if count == t.size else rec.window(t, first, (count,))


def unary(rec, x, expr: str, params: list[float], out_dtype=None, in_type: str | None = None):
    """Record y = expr(x) elementwise; returns y. Past the binding limit, one dispatch per block of elements
    (``Recorder.element_blocks``), each binding its windows of x and y."""
    if not _is_gpu(x) and not isinstance(x, np.ndarray):
        return NotImplemented
    x = _as_gpu(rec, x)
    y = rec.alloc(x.shape, out_dtype or x.dtype)
    expr = bind_division(rec, expr)
    for first, count in rec.element_blocks(x.size, [x, y]):
        part_x, part_y = _part(rec, x, first, count), _part(rec, y, first, count)
        if _vec4_ok(x, y) and in_type is None:
            # Four elements per invocation: lavapipe loads a vec4 at once where it scalarises f32 loads
            # (10 Relus over 800k floats: 24 -> 13 ms).
            rec.dispatch("compute/unary4.wgsl", [part_x], [part_y], [count // 4, *params], count // 4,
                         subs={"EXPR": expr}, workgroup=256)
        else:
            rec.dispatch("compute/unary.wgsl", [part_x], [part_y], [count, *params], count,
                         subs={"EXPR": expr, "TX": in_type or x.gpu_type, "TY": y.gpu_type}, workgroup=256)
    return y


def _vec4_ok(*tensors: Any) -> bool:
    """Whether float32 tensors of one size can be processed four elements at a time."""
    first = tensors[0]
    return (first.size > 0 and first.size % 4 == 0
            and all(t.dtype == np.float32 and t.size == first.size for t in tensors))


def _float_in(x: Any) -> bool:
    return getattr(x, "dtype", None) == np.float32


def refusing(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Builder ``fn`` answering NotImplemented where it raises what the CPU kernel would (ValueError,
    IndexError, OverflowError: bad axes, shapes, sizes): the layer falls back and the CPU kernel reports
    its own error. Returns the wrapped builder."""

    @functools.wraps(fn)
    def build(rec, layer, *inputs, **attrs):
        try:
            return fn(rec, layer, *inputs, **attrs)
        except (ValueError, IndexError, OverflowError):
            return NotImplemented

    return build


def activation(rec, act: Activation, x, attrs: dict[str, Any], unary_program: Callable[..., Any] | None = None):
    """Record y = act(x) for a float32 x with ``unary_program(rec, x, expr, params)`` (the backend's unary
    program; gpu-compute's ``unary`` by default); NotImplemented where the record has no WGSL for these
    attributes."""
    if not _float_in(x):
        return NotImplemented
    try:
        expr, params = act.expression(attrs)
    except ValueError:
        return NotImplemented  # the CPU kernel reports its own error
    return (unary_program or unary)(rec, x, expr, params)


def register_activations(backend: str, unary_program: Callable[..., Any]) -> None:
    """Register every activation record that has a WGSL form on ``backend``, drawn by its unary program."""

    def register_one(act: Activation) -> None:
        @register(act.name, act.versions[0], backend=backend)
        def build(rec, layer, x, **attrs):
            return activation(rec, act, x, attrs, unary_program)

    for act in ACTIVATIONS.values():
        if act.versions and act.wgsl is not None:
            register_one(act)


register_activations(GPU_COMPUTE, unary)


@register("Clip", 11, backend=GPU_COMPUTE, host_inputs=(1, 2))
@refusing
def clip(rec, layer, x, lo=None, hi=None, **attrs):
    """Clip with its bounds as inputs (host values): float32 through the activation record; int32/int64
    max then min, as the CPU kernel (lo > hi gives hi)."""
    if getattr(x, "dtype", None) not in _INTS:
        bounds = {key: value for key, value in (("min", lo), ("max", hi)) if value is not None}
        return activation(rec, ACTIVATIONS["Clip"], x, {**attrs, **bounds})

    def bound(value, default: int) -> int:
        if value is None or np.asarray(value).size == 0:
            return default
        # x holds int32-range values, so a bound beyond that range acts like the range's end.
        return min(max(int(np.asarray(value).reshape(-1)[0]), _I32_MIN), _I32_MAX)

    return unary(rec, x, EXPRESSIONS["clip_int"], [bound(lo, _I32_MIN), bound(hi, _I32_MAX), 0])


def _register_float_unary(op: str, expr: str) -> None:
    @register(op, backend=GPU_COMPUTE)
    def build(rec, layer, x, **attrs):
        if not _float_in(x):
            if op in INT_UNARY and getattr(x, "dtype", None) in _INTS:
                return unary(rec, x, INT_UNARY[op], [0.0] * 3)
            return NotImplemented
        return unary(rec, x, expr, [0.0] * 3)


for _op, _expr in FLOAT_UNARY.items():
    _register_float_unary(_op, _expr)


@register("Not", backend=GPU_COMPUTE)
def not_(rec, layer, x):
    if getattr(x, "dtype", None) != np.bool_:
        return NotImplemented
    return unary(rec, x, EXPRESSIONS["not"], [0.0] * 3)


@register("IsNaN", backend=GPU_COMPUTE)
def isnan(rec, layer, x):
    if not _float_in(x):
        return NotImplemented
    return unary(rec, x, EXPRESSIONS["is_nan"], [0.0] * 3, out_dtype=np.bool_)


@register("IsInf", backend=GPU_COMPUTE)
def isinf(rec, layer, x, *, detect_negative=1, detect_positive=1):
    if not _float_in(x):
        return NotImplemented
    # (any non-zero attribute detects, as on the cpu)
    return unary(rec, x, is_inf(int(bool(detect_positive)), int(bool(detect_negative))), [0.0] * 3,
                 out_dtype=np.bool_)


# -- binary -------------------------------------------------------------------------------------
# The expression tables (FLOAT_UNARY, INT_UNARY, ARITH, COMPARE, LOGIC, BITWISE, INT_MOD) are shader_gen's.
def broadcast_params(a, b, out_shape: tuple[int, ...]) -> list[int]:
    """Parameters 0..20 of a two-operand broadcasting program (the layout wgsl/common/broadcast.wgsl
    reads): element count, rank, output shape, A and B strides, and whether no broadcasting happens."""
    same = a.shape == out_shape and b.shape == out_shape
    return [math.prod(out_shape), max(1, len(out_shape)), *_pad6(list(out_shape) or [1]),
            *_pad6(broadcast_strides(a.shape, out_shape) or [0]),
            *_pad6(broadcast_strides(b.shape, out_shape) or [0]), int(same)]


def fused_activation(layer, dtype) -> tuple[str, list[float]] | None:
    """The WGSL expression and parameters of the activation the passes folded into ``layer``, or None.
    Raises _NoFusion for a non-float output (activation expressions are float)."""
    if getattr(layer, "fused_activation", None) is None:
        return None
    if dtype != np.float32:
        raise _NoFusion
    return activation_expr(*layer.fused_activation)


class _NoFusion(Exception):  # noqa: N818 - internal: the layer falls back, the CPU applies the activation
    pass


def _vec4_operand(t: Any, out_shape: tuple[int, ...]) -> tuple[str, tuple[int, int]] | None:
    """How binary4.wgsl reads float32 operand ``t`` of an op with output ``out_shape``: (its form,
    shader_gen.BINARY4_FORMS, and the (inner, dim) of an axis operand, else (1, 1)), or None where a group of
    four output elements does not map to one vec4 or one element of it."""
    if t.dtype != np.float32:
        return None
    if tuple(t.shape) == out_shape:
        return "full", (1, 1)
    if t.size == 1:
        return "scalar", (1, 1)
    shape = (1,) * (len(out_shape) - len(t.shape)) + tuple(t.shape)
    axes = [d for d, extent in enumerate(shape) if extent != 1]
    if len(axes) != 1 or shape[axes[0]] != out_shape[axes[0]]:
        return None
    inner = math.prod(out_shape[axes[0] + 1:])
    if inner % 4:
        return None
    # Group i of a dispatch is group i + params[4] of the output (a block of it, see binary).
    return "axis", (inner, shape[axes[0]])


# Groups of four one binary4.wgsl invocation computes where an operand is an axis: they share its two udivs (8 and
# 4 measured alike on lavapipe, 0.91-0.97x and 0.93-0.96x the constants' GPU time; 2 ran 1.1x, 1 1.2-1.5x).
AXIS_GROUPS = 8


def _udiv_fits(size: int, geometries: list[tuple[int, int]]) -> bool:
    """Whether binary4.wgsl's axis loaders divide within udiv's exact range (common/udiv.wgsl): output groups
    of four (the numerators) below 2^31 and each operand's inner / 4 and dim at most UDIV_MAX_DIVISOR. Binding
    limits keep tensors far below both; a (2, 1) operand of a (2, 2^26 or more) output would pass the divisor's."""
    return size // 4 < 2**31 and all(inner // 4 <= UDIV_MAX_DIVISOR and dim <= UDIV_MAX_DIVISOR
                                     for inner, dim in geometries)


def _axis_words(inner: int, dim: int, step: int) -> list[int | float]:
    """binary4_axis.wgsl's six words of an operand with (inner, dim) (``_vec4_operand``; (1, 1): no axis, which
    no loader reads) whose invocations step by ``step`` groups: inner / 4 and dim as udiv's divisor words, and
    the step's place in a run of inner / 4 groups and whole runs modulo dim."""
    runs = max(1, inner // 4)
    return [*udiv_words(runs), *udiv_words(dim), step % runs, step // runs % dim]


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """The numpy broadcast of ``shapes`` at any rank (np.broadcast_shapes stops at 32 dims, where the CPU
    kernels run to numpy's 64, so a builder past it must decline with its rank rule, not fail); ValueError
    naming the shapes where they do not broadcast."""
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for shape in shapes:
        for axis, d in enumerate(shape, rank - len(shape)):
            if d != 1 and out[axis] not in (1, d):
                raise ValueError(f"shapes {[list(s) for s in shapes]} do not broadcast (axis {axis})")
            out[axis] = d if d != 1 else out[axis]
    return tuple(int(d) for d in out)


def binary(rec, a, b, expr: str, out_dtype, name: str = "", act: tuple[str, list[float]] | None = None):
    """Record Y = act(expr(a, b)) with broadcasting; returns Y (or NotImplemented past MAX_RANK). Past the
    binding limit, one dispatch per block of output elements (``Recorder.element_blocks``): Y and an operand
    of Y's size bind their windows of the block, a broadcast operand is bound whole (its part of a block is
    not contiguous) and must fit a binding."""
    a = _as_gpu(rec, a, f"{name}:a")
    b = _as_gpu(rec, b, f"{name}:b")
    out_shape = broadcast_shape(a.shape, b.shape)
    if len(out_shape) > MAX_RANK:
        raise Declined(f"rank {len(out_shape)} output {list(out_shape)} is past the {MAX_RANK} dims binary.wgsl "
                       "indexes")
    y = rec.alloc(out_shape, out_dtype)
    expr = bind_division(rec, expr)
    act_expr, act_params = act if act is not None else ("v", [0.0, 0.0, 0.0])
    modes = [_vec4_operand(t, out_shape) for t in (a, b)]
    blocks = rec.element_blocks(y.size, [t for t in (a, b, y) if t.size == y.size])

    def operand(t, first: int, count: int):
        return _part(rec, t, first, count) if t.size == y.size else t

    if y.dtype == np.float32 and y.size % 4 == 0 and y.size and all(m is not None for m in modes) and \
            _udiv_fits(y.size, [m[1] for m in modes]):
        # Four elements per invocation (see unary), broadcasting a scalar or one axis per group of four.
        (a_form, a_geom), (b_form, b_geom) = modes
        # An axis operand's inner extent / 4 and dim are uniform words (udiv's divisor words), not override
        # constants, so a new size compiles no pipeline. Two udivs for every group of four ran 1.2-1.5x the
        # constants' GPU time on lavapipe (the Add of a (64, 1, 1) bias to (1, 64, 112, 112), and of (32, 1, 1) to
        # (2, 32, 56, 56)), so an invocation with an axis operand computes AXIS_GROUPS groups, s apart, sharing
        # them: 0.91-0.97x the constants' (median paired ratios, alternating in one process, 12-20 rounds); the
        # other forms keep one group an invocation, 0.95-1.00x.
        groups = AXIS_GROUPS if "axis" in (a_form, b_form) else 1
        subs = {"EXPR": expr, "ACT": act_expr, **binary4_subs(a_form, b_form)}
        for first, count in blocks:
            invocations = -(-(count // 4) // groups)
            words = [word for inner, dim in (a_geom, b_geom) for word in _axis_words(inner, dim, invocations)]
            rec.dispatch("compute/binary4.wgsl", [operand(a, first, count), operand(b, first, count)],
                         [_part(rec, y, first, count)], [count // 4, *act_params, first // 4, invocations, *words],
                         invocations, workgroup=256, subs=subs, constants={"GROUPS": groups})
        return y
    params = [*broadcast_params(a, b, out_shape), *act_params]
    for first, count in blocks:
        # The block's first output element, and where the bound part of each operand starts (binary.wgsl).
        bases = [first, first if a.size == y.size else 0, first if b.size == y.size else 0]
        rec.dispatch("compute/binary.wgsl", [operand(a, first, count), operand(b, first, count)],
                     [_part(rec, y, first, count)], [count, *params[1:], *bases], count, workgroup=256,
                     subs={"EXPR": expr, "ACT": act_expr, "TA": a.gpu_type, "TB": b.gpu_type, "TY": y.gpu_type})
    return y


def _dtype(t: Any) -> np.dtype | None:
    return getattr(t, "dtype", None)


def check_operand_types(layer, args: list[Any], allowed: tuple[Any, ...], same: bool = True, start: int = 0) -> None:
    """Raise Declined naming the input whose dtype this backend's program for ``layer`` cannot take (not one of
    ``allowed``, or, with ``same``, not the first one's), or a missing input; ``args`` are the layer's inputs
    from position ``start`` on."""
    names = [np.dtype(t).name for t in allowed]
    inputs = getattr(layer, "inputs", ())  # (a composite's stand-in layer has none)
    first = None
    for position, value in enumerate(args, start):
        dtype = _dtype(value)
        name = inputs[position] if position < len(inputs) else ""
        if dtype is None:
            raise Declined(f"input {position} '{name}' is {type(value).__name__}, not a tensor")
        if np.dtype(dtype) not in [np.dtype(t) for t in allowed]:
            raise Declined(f"input {position} '{name}' is {np.dtype(dtype).name}; this program takes "
                           f"{', '.join(names)}")
        if same and first is not None and dtype != first:
            raise Declined(f"input {position} '{name}' is {np.dtype(dtype).name} where input {start} is "
                           f"{np.dtype(first).name} (the CPU kernel reports the mismatch)")
        first = dtype if first is None else first


def check_rank(layer, shape: tuple[int, ...], limit: int) -> None:
    """Raise Declined when an output or operand of rank past ``limit`` (the program's index arithmetic) occurs."""
    if len(shape) > limit:
        raise Declined(f"rank {len(shape)} (shape {list(shape)}) is past the {limit} dims this program indexes")


LEGACY_BROADCAST = "opset < 7 broadcasting (the broadcast/axis attributes): the CPU kernel applies it"


def _register_arith(op: str, exprs: dict[str, str]) -> None:
    @register(op, backend=GPU_COMPUTE)
    def build(rec, layer, a, b, **attrs):
        if attrs.get("broadcast") or attrs.get("axis") is not None:
            raise Declined(LEGACY_BROADCAST)
        check_operand_types(layer, [a] if op == "Pow" else [a, b], (np.float32, np.int32, np.int64))
        da, db = _dtype(a), _dtype(b)
        gpu = "f32" if da == np.float32 else "i32"
        if gpu not in exprs:
            raise Declined(f"{op} of {da.name} has no program here (float32 only)")
        if op == "Pow" and db != np.float32:
            raise Declined(f"Pow's exponent '{layer.inputs[1]}' is {db.name}; this program takes float32")
        try:
            act = fused_activation(layer, da)
        except _NoFusion:
            raise Declined(f"a fused activation on a {da.name} output (activations are float32)") from None
        return binary(rec, a, b, exprs[gpu], da, layer.name, act)


for _op, _exprs in ARITH.items():
    _register_arith(_op, _exprs)


def _register_compare(op: str, expr: str) -> None:
    @register(op, backend=GPU_COMPUTE)
    def build(rec, layer, a, b):
        check_operand_types(layer, [a, b], (np.float32, np.int32, np.int64, np.bool_))
        if _dtype(a) == np.bool_ and op != "Equal":
            raise Declined(f"{op} of bool tensors has no program here (Equal only)")
        return binary(rec, a, b, as_bool(expr), np.bool_, layer.name)


for _op, _expr in COMPARE.items():
    _register_compare(_op, _expr)


def _register_logic(op: str, expr: str) -> None:
    @register(op, backend=GPU_COMPUTE)
    def build(rec, layer, a, b):
        check_operand_types(layer, [a, b], (np.bool_,))
        return binary(rec, a, b, expr, np.bool_, layer.name)


for _op, _expr in LOGIC.items():
    _register_logic(_op, _expr)


def _register_variadic(op: str) -> None:
    @register(op, backend=GPU_COMPUTE)
    def build(rec, layer, *inputs, **attrs):
        if any(x is None for x in inputs) or len({_dtype(x) for x in inputs}) != 1:
            return NotImplemented
        dtype = _dtype(inputs[0])
        if dtype not in (np.float32, np.int32, np.int64) or (op == "Mean" and dtype != np.float32):
            return NotImplemented
        gpu = "f32" if dtype == np.float32 else "i32"
        try:
            act = fused_activation(layer, dtype)
        except _NoFusion:
            return NotImplemented
        add, scale = EXPRESSIONS["sum"], EXPRESSIONS["product"]
        expr = {"Sum": add, "Mean": add, "Max": ARITH["Max"][gpu], "Min": ARITH["Min"][gpu]}[op]
        # (operand, expression) steps folding the inputs left to right; the fused activation rides on
        # the last one.
        steps = [(_as_gpu(rec, x, f"{layer.name}:{k}"), expr) for k, x in enumerate(inputs[1:], 1)]
        if len(inputs) == 1:
            steps = [(np.zeros((), dtype), add)]
        if op == "Mean":
            steps.append((np.asarray(1.0 / len(inputs), np.float32), scale))
        acc = _as_gpu(rec, inputs[0], f"{layer.name}:0")
        for k, (operand, step_expr) in enumerate(steps):
            acc = binary(rec, acc, operand, step_expr, dtype, layer.name, act if k == len(steps) - 1 else None)
            if acc is NotImplemented:
                return NotImplemented
        return acc


for _op in ("Sum", "Mean", "Max", "Min"):
    _register_variadic(_op)


@register("Where", 9, backend=GPU_COMPUTE)
def where(rec, layer, cond, x, y):
    check_operand_types(layer, [cond], (np.bool_,))
    check_operand_types(layer, [x, y], (np.float32, np.int32, np.int64), start=1)
    c, a, b = (_as_gpu(rec, t, f"{layer.name}:{k}") for k, t in enumerate((cond, x, y)))
    return ternary(rec, [c, a, b], EXPRESSIONS["where"], a.dtype)


def ternary(rec, inputs: list[Any], expr: str, out_dtype) -> Any:
    """Y = ``expr`` of ``a``, ``b``, ``c`` (three device tensors) broadcast together (compute/map3.wgsl): Where,
    and the quantization family's (x, scale, zero point) maps; NotImplemented past MAX_RANK. Past the binding
    limit, blocks of output elements as ``binary`` runs them."""
    out_shape = broadcast_shape(*(t.shape for t in inputs))
    if len(out_shape) > MAX_RANK:
        return NotImplemented
    y = rec.alloc(out_shape, out_dtype)
    params = [y.size, max(1, len(out_shape)), *_pad6(list(out_shape) or [1])]
    for t in inputs:
        params += _pad6(broadcast_strides(t.shape, out_shape) or [0])
    subs = {"EXPR": bind_division(rec, expr), "TA": inputs[0].gpu_type, "TB": inputs[1].gpu_type,
            "TC": inputs[2].gpu_type, "TY": y.gpu_type}
    for first, count in rec.element_blocks(y.size, [t for t in (*inputs, y) if t.size == y.size]):
        whole = [t.size == y.size for t in inputs]
        parts = [_part(rec, t, first, count) if w else t for t, w in zip(inputs, whole, strict=True)]
        params[0] = count
        rec.dispatch("compute/map3.wgsl", parts, [_part(rec, y, first, count)],
                     [*params, first, *(first if w else 0 for w in whole)], count, workgroup=256, subs=subs)
    return y


# -- integer ops ----------------------------------------------------------------------------------
def _int_pair(a, b) -> bool:
    da, db = getattr(a, "dtype", None), getattr(b, "dtype", None)
    return da in _INTS and db in _INTS


@register("Mod", 10, backend=GPU_COMPUTE)
@refusing
def mod(rec, layer, a, b, *, fmod=0, **attrs):
    """Mod: the divisor's sign (fmod=0, numpy's mod) or the dividend's (fmod=1, C fmod); x % 0 is 0
    for integers and NaN for floats, as numpy gives."""
    da, db = getattr(a, "dtype", None), getattr(b, "dtype", None)
    if da != db or da not in (np.float32, np.int32, np.int64):
        return NotImplemented
    if da != np.float32:
        return binary(rec, a, b, INT_MOD[int(bool(fmod))], da, layer.name)
    a, b = _as_gpu(rec, a, f"{layer.name}:a"), _as_gpu(rec, b, f"{layer.name}:b")
    if a.alloc is None or b.alloc is None:
        return NotImplemented  # split over several bindings
    out_shape = broadcast_shape(a.shape, b.shape)
    if len(out_shape) > MAX_RANK:
        return NotImplemented
    y = rec.alloc(out_shape, np.float32)
    params = broadcast_params(a, b, out_shape)
    rec.dispatch("compute/mod_float.wgsl", [a, b], [y], params, y.size, workgroup=256,
                 constants={"FMOD": int(bool(fmod))})
    return y


@register("BitShift", 11, backend=GPU_COMPUTE)
@refusing
def bit_shift(rec, layer, x, y, *, direction="", **attrs):
    """BitShift of signed integers (unsigned types cannot live on the GPU). A right shift by 31 or
    more leaves the sign fill, which is also what the CPU kernel gives out-of-range shifts of
    int32-range values; a left shift of int64 could leave the int32 range: CPU."""
    if not _int_pair(x, y) or direction not in ("LEFT", "RIGHT"):
        return NotImplemented
    if direction == "RIGHT":
        expr = EXPRESSIONS["shift_right"]
    elif x.dtype == np.int32:
        expr = EXPRESSIONS["shift_left_i32"]
    else:
        return NotImplemented
    return binary(rec, x, y, expr, x.dtype, layer.name)


def _register_bitwise(op: str, expr: str) -> None:
    @register(op, 18, backend=GPU_COMPUTE)
    @refusing
    def build(rec, layer, a, b, **attrs):
        # Sign-extended int64 values in the int32 range give the same bits as their int32 storage.
        if not _int_pair(a, b) or a.dtype != b.dtype:
            return NotImplemented
        return binary(rec, a, b, expr, a.dtype, layer.name)


for _op, _expr in BITWISE.items():
    _register_bitwise(_op, _expr)


@register("BitwiseNot", 18, backend=GPU_COMPUTE)
@refusing
def bitwise_not(rec, layer, x, **attrs):
    if getattr(x, "dtype", None) not in _INTS:
        return NotImplemented
    return unary(rec, x, EXPRESSIONS["bitwise_not"], [0.0] * 3)


__all__ = ["binary", "broadcast_params", "broadcast_strides", "fused_activation", "refusing", "unary"]
