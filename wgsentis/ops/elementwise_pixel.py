"""gpu-pixel programs of the elementwise family: every activation with a WGSL form (the activation records'
expressions), the float unary functions, arithmetic, comparisons, logic, bitwise and variadic ops, Where, Mod,
BitShift, IsNaN/IsInf, with numpy broadcasting and the activation the passes fused into a layer.

Each is one draw of ``PixelRecorder.lanes``: texel by texel where every input is blocked on the output's blocked
axis (a residual Add, a per-channel bias, a squeeze-excite scale on channels-blocked tensors), element by element
through texture addressing otherwise. The output blocks the axis of its largest input, so a chain of elementwise
layers keeps its producer's layout; host constants are uploaded blocked on that axis. Integer tensors hold int32
values (int64 within that range), bools 0/1, as on gpu-compute, whose expressions these mirror."""

from __future__ import annotations

from typing import Any

import numpy as np

from wgsentis.backends.gpu import shader_gen
from wgsentis.backends.gpu.tensors import Declined, GTensor
from wgsentis.backends.pixel_layout import MAX_RANK, texel_kind
from wgsentis.ops.activations import ACTIVATIONS
from wgsentis.ops.elementwise_gpu import (
    ARITH,
    COMPARE,
    INT_MOD,
    INT_UNARY,
    FLOAT_UNARY,
    LEGACY_BROADCAST,
    activation,
    broadcast_shape,
    check_operand_types,
    refusing,
    register_activations,
)
from wgsentis.ops.matmul_gpu import fused
from wgsentis.ops.registry import GPU_PIXEL, register

_INTS = (np.dtype(np.int32), np.dtype(np.int64))
_I32_MIN, _I32_MAX = -(2**31), 2**31 - 1
# float32 arithmetic that keeps subnormals where fragment shaders flush them (wgsl/common/subnormal.wgsl): lane
# files of a and b setting r, as the cpu backend and the compute shaders compute them (numpy's maximum/minimum of
# a subnormal: the larger/smaller by value; NaN propagates).
_SUBNORMAL_SAFE = {op: f"pixel/body/sn_{op.lower()}.wgsl" for op in ("Add", "Sub", "Mul", "Div", "Max", "Min")}
_SUBNORMAL = "common/subnormal.wgsl"


def _lane(expr: str) -> str:
    """The lane setting r to ``expr`` (a WGSL expression of a, b, ... from the generator-owned tables)."""
    return shader_gen.snippet("pixel/body/lane_expr.wgsl", {"EXPR": expr})


def _divided(rec, expr: str) -> str:
    """``expr`` with its div_f32 calls bound to the device's division (math.wgsl), as on gpu-compute."""
    if "div_f32(" not in expr:
        return expr
    return expr.replace("div_f32(", f"{rec.ctx.division_function}(opaque_zero(), ")


def out_axis(tensors: list[Any], shape: tuple[int, ...]) -> int:
    """The axis (of ``shape``) an elementwise output blocks: that of its first device input of the output's rank
    and shape (so a chain keeps its layout), else of any device input, else the last."""
    rank = len(shape)
    device = [t for t in tensors if isinstance(t, GTensor) and t.layout is not None and t.shape]
    for t in sorted(device, key=lambda t: (tuple(t.shape) != shape, -t.size)):
        axis = rank - len(t.shape) + t.layout.axis
        if t.shape[t.layout.axis] == shape[axis] or t.size == 1:
            return axis
    return rank - 1 if rank else 0


def blocked_operands(rec, inputs: list[Any], shape: tuple[int, ...], axis: int, stem: str) -> list[Any] | None:
    """The device tensors of an elementwise draw's ``inputs`` for an output of ``shape`` blocked on ``axis``: a host
    constant blocks the output's axis where it has it, so the draw loads it texel by texel; None where one cannot
    be placed. ``stem`` + the input's position names the uploads."""
    tensors = []
    for k, x in enumerate(inputs):
        if isinstance(x, np.ndarray) and x.ndim and texel_kind(x.dtype) is not None:
            lead = len(shape) - x.ndim
            t = rec.tensor(x, f"{stem}{k}", axis - lead if axis >= lead else -1)
        else:
            t = rec.tensor(x, f"{stem}{k}")
        if t is None:
            return None
        tensors.append(t)
    return tensors


def elementwise(rec, inputs: list[Any], lane: str, out_dtype: Any, layer=None, act: bool = True,
                helpers: str = "") -> Any:
    """Draw ``r`` = ``lane`` (a lane file, or text from the generator, setting r from the lane's input scalars a, b,
    c, ...) with numpy broadcasting, then the layer's fused activation (float outputs, pixel/body/fused_act.wgsl);
    NotImplemented where the inputs cannot be drawn."""
    shapes = [tuple(getattr(x, "shape", ())) for x in inputs]
    try:
        shape = broadcast_shape(*shapes)
    except ValueError:
        return NotImplemented  # the CPU kernel names the shapes
    if len(shape) > MAX_RANK or any(len(s) > MAX_RANK for s in shapes):
        return NotImplemented
    axis = out_axis(inputs, shape)
    tensors = blocked_operands(rec, inputs, shape, axis, f"{getattr(layer, 'name', '')}:")
    if tensors is None:
        return NotImplemented
    extra: list[int | float] = []
    fused_act = getattr(layer, "fused_activation", None) if act else None
    if fused_act is not None:
        if np.dtype(out_dtype) != np.float32:
            return NotImplemented
        expr, params = fused(layer)
        extra = [float(p) for p in params] + [0.0] * (3 - len(params))
        lane = shader_gen.snippet("pixel/body/fused_act.wgsl",
                                  {"LANE": shader_gen.snippet(lane), "ACT": _divided(rec, expr)})
    return rec.lanes(tensors, shape, out_dtype, axis, _divided(rec, shader_gen.snippet(lane)), extra,
                     helpers=helpers)


def _kind(x: Any) -> str | None:
    dtype = getattr(x, "dtype", None)
    return None if dtype is None else texel_kind(dtype)


def _float_in(x: Any) -> bool:
    return getattr(x, "dtype", None) == np.float32


# -- unary --------------------------------------------------------------------------------------------------------
def unary(rec, x: Any, expr: str, params: list[float], out_dtype: Any = np.float32, layer=None) -> Any:
    """y = expr(v) lane by lane (the activation records' form: ``v`` and alpha, beta, gamma)."""
    words = [float(p) for p in params] + [0.0] * (3 - len(params))
    lane = shader_gen.snippet("pixel/body/unary.wgsl", {"EXPR": expr})
    return _unary_lane(rec, x, _divided(rec, lane), words, out_dtype)


def _unary_lane(rec, x: Any, lane: str, words: list[int | float], out_dtype: Any) -> Any:
    """y = ``lane`` (a lane file or text setting r from a) over ``x``, with the words ``words`` (pe)."""
    t = rec.tensor(x)
    if t is None:
        return NotImplemented
    return rec.lanes([t], t.shape, out_dtype, t.layout.axis if t.shape else 0, lane, words)


register_activations(GPU_PIXEL, unary)


@register("Clip", 11, backend=GPU_PIXEL, host_inputs=(1, 2))
@refusing
def clip(rec, layer, x, lo=None, hi=None, **attrs):
    """Clip with its bounds as inputs (host values): float32 through the activation record, integers max then
    min as the CPU kernel (lo > hi gives hi)."""
    if getattr(x, "dtype", None) not in _INTS:
        bounds = {key: value for key, value in (("min", lo), ("max", hi)) if value is not None}
        return activation(rec, ACTIVATIONS["Clip"], x, {**attrs, **bounds}, unary)

    def bound(value, default: int) -> int:
        if value is None or np.asarray(value).size == 0:
            return default
        return min(max(int(np.asarray(value).reshape(-1)[0]), _I32_MIN), _I32_MAX)

    return _unary_lane(rec, x, "pixel/body/clip_int.wgsl", [bound(lo, _I32_MIN), bound(hi, _I32_MAX)], x.dtype)


def _register_float_unary(op: str, expr: str) -> None:
    @register(op, backend=GPU_PIXEL)
    def build(rec, layer, x, **attrs):
        if not _float_in(x):
            if op in INT_UNARY and getattr(x, "dtype", None) in _INTS:
                return unary(rec, x, INT_UNARY[op], [], x.dtype)
            return NotImplemented
        return unary(rec, x, expr, [])


for _op, _expr in FLOAT_UNARY.items():
    _register_float_unary(_op, _expr)


@register("Not", backend=GPU_PIXEL)
def not_(rec, layer, x):
    if getattr(x, "dtype", None) != np.bool_:
        return NotImplemented
    return _unary_lane(rec, x, "pixel/body/not_bool.wgsl", [], np.bool_)


@register("IsNaN", backend=GPU_PIXEL)
def isnan(rec, layer, x):
    if not _float_in(x):
        return NotImplemented
    return _unary_lane(rec, x, "pixel/body/is_nan.wgsl", [], np.bool_)


@register("IsInf", backend=GPU_PIXEL)
def isinf(rec, layer, x, *, detect_negative=1, detect_positive=1):
    if not _float_in(x):
        return NotImplemented
    # (any non-zero attribute detects, as on the cpu: words pe(0), pe(1) are 0 or 1)
    words = [int(bool(detect_positive)), int(bool(detect_negative))]
    return _unary_lane(rec, x, "pixel/body/is_inf.wgsl", words, np.bool_)


@register("BitwiseNot", 18, backend=GPU_PIXEL)
@refusing
def bitwise_not(rec, layer, x, **attrs):
    if getattr(x, "dtype", None) not in _INTS:
        return NotImplemented
    return _unary_lane(rec, x, "pixel/body/bitwise_not.wgsl", [], x.dtype)


# -- binary -------------------------------------------------------------------------------------------------------
def _register_arith(op: str, exprs: dict[str, str]) -> None:
    @register(op, backend=GPU_PIXEL)
    def build(rec, layer, a, b, **attrs):
        if attrs.get("broadcast") or attrs.get("axis") is not None:
            raise Declined(LEGACY_BROADCAST)
        check_operand_types(layer, [a] if op == "Pow" else [a, b], (np.float32, *_INTS))
        da, db = a.dtype, b.dtype
        kind = "f32" if da == np.float32 else "i32"
        if kind not in exprs:
            raise Declined(f"{op} of {da.name} has no program here (float32 only)")
        if op == "Pow" and db != np.float32:
            raise Declined(f"Pow's exponent '{layer.inputs[1]}' is {db.name}; this program takes float32")
        if kind == "f32" and op in _SUBNORMAL_SAFE:
            return elementwise(rec, [a, b], _SUBNORMAL_SAFE[op], da, layer, helpers=_SUBNORMAL)
        return elementwise(rec, [a, b], _lane(exprs[kind]), da, layer)


for _op, _exprs in ARITH.items():
    if _op not in ("Max", "Min"):  # variadic below
        _register_arith(_op, _exprs)


def _register_compare(op: str, expr: str) -> None:
    @register(op, backend=GPU_PIXEL)
    def build(rec, layer, a, b):
        check_operand_types(layer, [a, b], (np.float32, *_INTS, np.bool_))
        if a.dtype == np.bool_ and op != "Equal":
            raise Declined(f"{op} of bool tensors has no program here (Equal only)")
        return elementwise(rec, [a, b], shader_gen.snippet("pixel/body/lane_bool.wgsl", {"EXPR": expr}), np.bool_,
                           layer)


for _op, _expr in COMPARE.items():
    _register_compare(_op, _expr)


def _register_logic(op: str, expr: str) -> None:
    @register(op, backend=GPU_PIXEL)
    def build(rec, layer, a, b):
        check_operand_types(layer, [a, b], (np.bool_,))
        return elementwise(rec, [a, b], _lane(expr), np.bool_, layer)


for _op, _expr in shader_gen.LOGIC.items():
    _register_logic(_op, _expr)


def _register_variadic(op: str) -> None:
    @register(op, backend=GPU_PIXEL)
    def build(rec, layer, *inputs, **attrs):
        if not inputs or any(x is None for x in inputs) or len({getattr(x, "dtype", None) for x in inputs}) != 1:
            return NotImplemented
        dtype = inputs[0].dtype
        if dtype not in (np.float32, *_INTS) or (op == "Mean" and dtype != np.float32) or len(inputs) > 6:
            return NotImplemented
        kind = "f32" if dtype == np.float32 else "i32"
        count = len(inputs)
        if op == "Mean" or (op == "Sum" and kind == "i32"):
            lane = shader_gen.sum_lane(count, op == "Mean")
        elif kind == "f32":  # (a sum of subnormals kept too: wgsl/common/subnormal.wgsl)
            lane = shader_gen.folded_lane(count, shader_gen.snippet(_SUBNORMAL_SAFE["Add" if op == "Sum" else op]))
        else:
            lane = shader_gen.folded_lane(count, _lane(ARITH[op][kind]))
        return elementwise(rec, list(inputs), lane, dtype, layer, helpers=_SUBNORMAL if kind == "f32" else "")


for _op in ("Sum", "Mean", "Max", "Min"):
    _register_variadic(_op)


@register("Where", 9, backend=GPU_PIXEL)
def where(rec, layer, cond, x, y):
    check_operand_types(layer, [cond], (np.bool_,))
    check_operand_types(layer, [x, y], (np.float32, *_INTS), start=1)
    dx = x.dtype
    return elementwise(rec, [cond, x, y], "pixel/body/where.wgsl", dx, layer)


@register("Mod", 10, backend=GPU_PIXEL)
@refusing
def mod(rec, layer, a, b, *, fmod=0, **attrs):
    """Mod: the divisor's sign (fmod=0, numpy's mod) or the dividend's (fmod=1); x % 0 is 0 for integers."""
    da = getattr(a, "dtype", None)
    if da != getattr(b, "dtype", None) or da not in (np.float32, *_INTS):
        return NotImplemented
    if da == np.float32:
        # Exact long division (wgsl/common/fmod.wgsl); numpy's mod gives a remainder the divisor's sign.
        lane = "pixel/body/mod_fmod.wgsl" if fmod else "pixel/body/mod_float.wgsl"
        return elementwise(rec, [a, b], lane, da, layer, helpers="common/fmod.wgsl")
    return elementwise(rec, [a, b], _lane(INT_MOD[int(bool(fmod))]), da, layer)


@register("BitShift", 11, backend=GPU_PIXEL)
@refusing
def bit_shift(rec, layer, x, y, *, direction="", **attrs):
    if getattr(x, "dtype", None) not in _INTS or getattr(y, "dtype", None) not in _INTS:
        return NotImplemented
    if direction == "RIGHT":
        expr = shader_gen.EXPRESSIONS["shift_right"]
    elif direction == "LEFT" and x.dtype == np.int32:
        expr = shader_gen.EXPRESSIONS["shift_left_i32"]
    else:
        return NotImplemented
    return elementwise(rec, [x, y], _lane(expr), x.dtype, layer)


def _register_bitwise(op: str, expr: str) -> None:
    @register(op, 18, backend=GPU_PIXEL)
    @refusing
    def build(rec, layer, a, b, **attrs):
        if getattr(a, "dtype", None) not in _INTS or getattr(a, "dtype", None) != getattr(b, "dtype", None):
            return NotImplemented
        return elementwise(rec, [a, b], _lane(expr), a.dtype, layer)


for _op, _expr in shader_gen.BITWISE.items():
    _register_bitwise(_op, _expr)


__all__ = ["elementwise", "unary"]
