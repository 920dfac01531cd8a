"""gpu-compute programs of the elementwise family: unary functions, activations (also fused into
Conv/Gemm/MatMul), broadcasting binary ops, comparisons, logic, variadic Sum/Max/Min/Mean, Where."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from wgsentis.ops.registry import register_gpu

MAX_RANK = 6

# op -> (WGSL expression of `v`, parameter names (alpha, beta, gamma), spec defaults). A NaN stays NaN
# (is_nan_f32, math.wgsl): WGSL's max, min, clamp and sign of a NaN give a number on some drivers.
ACTIVATIONS: dict[str, tuple[str, tuple[str, ...], tuple[float, ...]]] = {
    "Relu": ("select(max(v, 0.0), v, is_nan_f32(v))", (), ()),
    "LeakyRelu": ("select(alpha * v, v, v >= 0.0)", ("alpha",), (0.01,)),
    "Sigmoid": ("1.0 / (1.0 + exp_accurate(-v))", (), ()),
    "Tanh": ("tanh_safe(v)", (), ()),
    "HardSigmoid": ("select(clamp(alpha * v + beta, 0.0, 1.0), v, is_nan_f32(v))", ("alpha", "beta"), (0.2, 0.5)),
    "HardSwish": ("v * clamp(v / 6.0 + 0.5, 0.0, 1.0)", (), ()),
    "Elu": ("select(alpha * expm1_accurate(v), v, v >= 0.0)", ("alpha",), (1.0,)),
    "Selu": ("gamma * select(alpha * expm1_accurate(v), v, v > 0.0)", ("alpha", "_", "gamma"),
             (1.67326319217681884765625, 0.0, 1.05070102214813232421875)),
    "Celu": ("select(max(0.0, v) + min(0.0, alpha * expm1_accurate(v / alpha)), v, is_nan_f32(v))", ("alpha",),
             (1.0,)),
    "Softplus": ("softplus(v)", (), ()),
    "Softsign": ("v / (1.0 + abs(v))", (), ()),
    "Mish": ("v * tanh_safe(softplus(v))", (), ()),
    "ThresholdedRelu": ("select(0.0, v, v > alpha)", ("alpha",), (1.0,)),
    "Swish": ("v / (1.0 + exp_accurate(-alpha * v))", ("alpha",), (1.0,)),
    "Clip": ("select(clamp(v, alpha, beta), v, is_nan_f32(v))", ("min", "max"), (-math.inf, math.inf)),
}
GELU = {"none": "0.5 * v * (1.0 + erf_approx(v * 0.7071067811865476))",
        "tanh": "0.5 * v * (1.0 + tanh_safe(0.7978845608028654 * (v + 0.044715 * v * v * v)))"}

FLOAT_UNARY: dict[str, str] = {
    "Abs": "abs(v)", "Neg": "-v", "Exp": "exp_accurate(v)", "Log": "log(v)", "Sqrt": "sqrt(v)",
    "Reciprocal": "div_f32(1.0, v)",
    "Floor": "floor(v)", "Ceil": "ceil(v)", "Round": "round(v)", "Sign": "select(sign(v), v, is_nan_f32(v))",
    "Sin": "sin(v)",
    "Cos": "cos(v)", "Tan": "tan(v)", "Asin": "asin(v)", "Acos": "acos(v)", "Atan": "atan(v)",
    "Sinh": "sinh(v)", "Cosh": "cosh(v)", "Asinh": "asinh(v)", "Acosh": "acosh(v)", "Atanh": "atanh(v)",
    "Erf": "erf_approx(v)", "Identity": "v",
}


def activation_expr(op: str, attrs: dict[str, Any]) -> tuple[str, list[float]]:
    """WGSL expression of `v` and its (alpha, beta, gamma) values for an activation op."""
    if op == "Gelu":
        return GELU[attrs.get("approximate", "none")], [0.0, 0.0, 0.0]
    expr, names, defaults = ACTIVATIONS[op]
    values = []
    for name, default in zip(names, defaults, strict=True):
        value = attrs.get(name, default)
        values.append(float(np.asarray(value).reshape(-1)[0]) if value is not None else default)
    values += [0.0] * (3 - len(values))
    return expr, values[:3]


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


def _bind_division(rec, expr: str) -> str:
    """``expr`` with its div_f32 calls bound to the device's division (math.wgsl). Only an expression that
    divides asks for it, so models that never divide never run the device's division probe."""
    if "div_f32(" not in expr:
        return expr
    return expr.replace("div_f32(", f"{rec.ctx.division_function}(opaque_zero(), ")


def unary(rec, x, expr: str, params: list[float], out_dtype=None, in_type: str | None = None):
    """Record y = expr(x) elementwise; returns y."""
    if not _is_gpu(x) and not isinstance(x, np.ndarray):
        return NotImplemented
    x = _as_gpu(rec, x)
    y = rec.alloc(x.shape, out_dtype or x.dtype)
    expr = _bind_division(rec, expr)
    if _vec4_ok(x, y) and in_type is None:
        # Four elements per invocation: lavapipe loads a vec4 at once where it scalarises f32 loads
        # (10 Relus over 800k floats: 24 -> 13 ms).
        rec.dispatch("compute/unary4.wgsl", [x], [y], [x.size // 4, *params], x.size // 4,
                     subs={"EXPR": expr}, workgroup=256)
        return y
    rec.dispatch("compute/unary.wgsl", [x], [y], [x.size, *params], x.size,
                 subs={"EXPR": expr, "TX": in_type or x.gpu_type, "TY": y.gpu_type}, workgroup=256)
    return y


def _vec4_ok(*tensors: Any) -> bool:
    """Whether float32 tensors of one size can be processed four elements at a time."""
    first = tensors[0]
    return (first.size > 0 and first.size % 4 == 0
            and all(t.dtype == np.float32 and t.size == first.size for t in tensors))


def _float_in(x: Any) -> bool:
    return getattr(x, "dtype", None) == np.float32


def _register_activation(op: str) -> None:
    @register_gpu(op)
    def build(rec, layer, x, *rest, **attrs):
        if not _float_in(x):
            return NotImplemented
        if op == "Clip" and rest:  # opset 11+: min/max are inputs (host values)
            attrs = dict(attrs)
            for key, value in zip(("min", "max"), rest, strict=False):
                if value is not None:
                    attrs[key] = value
        expr, params = activation_expr(op, attrs)
        return unary(rec, x, expr, params)

    if op == "Clip":
        register_gpu(op, 11, host_inputs=(1, 2))(build)


for _op in (*ACTIVATIONS, "Gelu"):
    _register_activation(_op)


def _register_float_unary(op: str, expr: str) -> None:
    @register_gpu(op)
    def build(rec, layer, x, **attrs):
        if op == "Identity":
            return rec.view(x, x.shape) if _is_gpu(x) else NotImplemented
        if not _float_in(x):
            if op in ("Abs", "Neg") and getattr(x, "dtype", None) in (np.int32, np.int64):
                return unary(rec, x, expr.replace("v", "v"), [0.0] * 3)
            return NotImplemented
        return unary(rec, x, expr, [0.0] * 3)


for _op, _expr in FLOAT_UNARY.items():
    _register_float_unary(_op, _expr)


@register_gpu("Not")
def not_(rec, layer, x):
    if getattr(x, "dtype", None) != np.bool_:
        return NotImplemented
    return unary(rec, x, "1u - v", [0.0] * 3)


@register_gpu("IsNaN")
def isnan(rec, layer, x):
    if not _float_in(x):
        return NotImplemented
    # NaN is the only value not equal to itself (bit test: exponent all ones, mantissa non-zero).
    return unary(rec, x, "select(0u, 1u, (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u)", [0.0] * 3,
                 out_dtype=np.bool_)


@register_gpu("IsInf")
def isinf(rec, layer, x, *, detect_negative=1, detect_positive=1):
    if not _float_in(x):
        return NotImplemented
    expr = (f"select(0u, 1u, (bitcast<u32>(v) == 0x7f800000u && {int(detect_positive)}u == 1u) || "
            f"(bitcast<u32>(v) == 0xff800000u && {int(detect_negative)}u == 1u))")
    return unary(rec, x, expr, [0.0] * 3, out_dtype=np.bool_)


# -- binary -------------------------------------------------------------------------------------
# op -> {storage type: expression}, and whether the result is bool
_ARITH = {
    "Add": {"f32": "a + b", "i32": "a + b"},
    "Sub": {"f32": "a - b", "i32": "a - b"},
    "Mul": {"f32": "a * b", "i32": "a * b"},
    # Integer division truncates toward zero in WGSL as in C, which is what ONNX asks.
    "Div": {"f32": "div_f32(a, b)", "i32": "select(a / b, 0, b == 0)"},
    "Pow": {"f32": "pow_signed(a, b)"},
    "Max": {"f32": "select(max(a, b), a + b, is_nan_f32(a) || is_nan_f32(b))", "i32": "max(a, b)"},
    "Min": {"f32": "select(min(a, b), a + b, is_nan_f32(a) || is_nan_f32(b))", "i32": "min(a, b)"},
    "PRelu": {"f32": "select(a * b, a, a >= 0.0)"},
}
_COMPARE = {
    "Equal": "a == b", "Greater": "a > b", "Less": "a < b", "GreaterOrEqual": "a >= b", "LessOrEqual": "a <= b",
}
_LOGIC = {"And": "a & b", "Or": "a | b", "Xor": "a ^ b"}


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


def _vec4_operand(t: Any, out_shape: tuple[int, ...], var: str) -> tuple[str, str, tuple[int, int]] | None:
    """How binary4.wgsl reads float32 operand ``t`` (bound as ``var``) of an op with output ``out_shape``:
    (storage type, loader body, (inner, dim) of an axis operand, else (1, 1)), or None where a group of
    four output elements does not map to one vec4 or one element of it."""
    if t.dtype != np.float32:
        return None
    if tuple(t.shape) == out_shape:
        return "vec4<f32>", f"return {var}[i];", (1, 1)
    if t.size == 1:
        return "f32", f"return vec4<f32>({var}[0]);", (1, 1)
    shape = (1,) * (len(out_shape) - len(t.shape)) + tuple(t.shape)
    axes = [d for d, extent in enumerate(shape) if extent != 1]
    if len(axes) != 1 or shape[axes[0]] != out_shape[axes[0]]:
        return None
    inner = math.prod(out_shape[axes[0] + 1:])
    if inner % 4:
        return None
    return "f32", f"return vec4<f32>({var}[(i * 4u / {var}_INNER) % {var}_DIM]);", (inner, shape[axes[0]])


def binary(rec, a, b, expr: str, out_dtype, name: str = "", act: tuple[str, list[float]] | None = None):
    """Record Y = act(expr(a, b)) with broadcasting; returns Y (or NotImplemented past MAX_RANK)."""
    a = _as_gpu(rec, a, f"{name}:a")
    b = _as_gpu(rec, b, f"{name}:b")
    out_shape = tuple(np.broadcast_shapes(a.shape, b.shape))
    if len(out_shape) > MAX_RANK:
        return NotImplemented
    y = rec.alloc(out_shape, out_dtype)
    expr = _bind_division(rec, expr)
    act_expr, act_params = act if act is not None else ("v", [0.0, 0.0, 0.0])
    modes = [_vec4_operand(t, out_shape, name) for t, name in ((a, "A"), (b, "B"))]
    if y.dtype == np.float32 and y.size % 4 == 0 and y.size and all(m is not None for m in modes):
        # Four elements per invocation (see unary), broadcasting a scalar or one axis per group of four.
        (ta, load_a, a_geom), (tb, load_b, b_geom) = modes
        geometry = {"A_INNER": a_geom[0], "A_DIM": a_geom[1], "B_INNER": b_geom[0], "B_DIM": b_geom[1]}
        rec.dispatch("compute/binary4.wgsl", [a, b], [y], [y.size // 4, *act_params], y.size // 4, workgroup=256,
                     subs={"EXPR": expr, "ACT": act_expr, "TA": ta, "TB": tb, "LOAD_A": load_a, "LOAD_B": load_b},
                     constants=geometry)
        return y
    params = [*broadcast_params(a, b, out_shape), *act_params]
    rec.dispatch("compute/binary.wgsl", [a, b], [y], params, y.size, workgroup=256,
                 subs={"EXPR": expr, "ACT": act_expr, "TA": a.gpu_type, "TB": b.gpu_type, "TY": y.gpu_type})
    return y


def _dtype(t: Any) -> np.dtype | None:
    return getattr(t, "dtype", None)


def _register_arith(op: str, exprs: dict[str, str]) -> None:
    @register_gpu(op)
    def build(rec, layer, a, b, **attrs):
        if attrs.get("broadcast") or attrs.get("axis") is not None:
            return NotImplemented  # opset < 7 broadcasting rules: leave to the CPU kernel
        da, db = _dtype(a), _dtype(b)
        if da is None or db is None or (da != db and op != "Pow") or da not in (np.float32, np.int32, np.int64):
            return NotImplemented
        gpu = "f32" if da == np.float32 else "i32"
        if gpu not in exprs or (op == "Pow" and db != np.float32):
            return NotImplemented
        try:
            act = fused_activation(layer, da)
        except _NoFusion:
            return NotImplemented
        return binary(rec, a, b, exprs[gpu], da, layer.name, act)


for _op, _exprs in _ARITH.items():
    _register_arith(_op, _exprs)


def _register_compare(op: str, expr: str) -> None:
    @register_gpu(op)
    def build(rec, layer, a, b):
        da, db = _dtype(a), _dtype(b)
        if da is None or da != db or da not in (np.float32, np.int32, np.int64, np.bool_):
            return NotImplemented
        if da == np.bool_ and op != "Equal":
            return NotImplemented
        return binary(rec, a, b, f"select(0u, 1u, {expr})", np.bool_, layer.name)


for _op, _expr in _COMPARE.items():
    _register_compare(_op, _expr)


def _register_logic(op: str, expr: str) -> None:
    @register_gpu(op)
    def build(rec, layer, a, b):
        if _dtype(a) != np.bool_ or _dtype(b) != np.bool_:
            return NotImplemented
        return binary(rec, a, b, expr, np.bool_, layer.name)


for _op, _expr in _LOGIC.items():
    _register_logic(_op, _expr)


def _register_variadic(op: str) -> None:
    @register_gpu(op)
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
        expr = {"Sum": "a + b", "Mean": "a + b", "Max": _ARITH["Max"][gpu], "Min": _ARITH["Min"][gpu]}[op]
        # (operand, expression) steps folding the inputs left to right; the fused activation rides on
        # the last one.
        steps = [(_as_gpu(rec, x, f"{layer.name}:{k}"), expr) for k, x in enumerate(inputs[1:], 1)]
        if len(inputs) == 1:
            steps = [(np.zeros((), dtype), "a + b")]
        if op == "Mean":
            steps.append((np.asarray(1.0 / len(inputs), np.float32), "a * b"))
        acc = _as_gpu(rec, inputs[0], f"{layer.name}:0")
        for k, (operand, step_expr) in enumerate(steps):
            acc = binary(rec, acc, operand, step_expr, dtype, layer.name, act if k == len(steps) - 1 else None)
            if acc is NotImplemented:
                return NotImplemented
        return acc


for _op in ("Sum", "Mean", "Max", "Min"):
    _register_variadic(_op)


@register_gpu("Where", 9)
def where(rec, layer, cond, x, y):
    if _dtype(cond) != np.bool_ or _dtype(x) != _dtype(y) or _dtype(x) not in (np.float32, np.int32, np.int64):
        return NotImplemented
    c, a, b = (_as_gpu(rec, t, f"{layer.name}:{k}") for k, t in enumerate((cond, x, y)))
    out_shape = tuple(np.broadcast_shapes(c.shape, a.shape, b.shape))
    if len(out_shape) > MAX_RANK:
        return NotImplemented
    out = rec.alloc(out_shape, a.dtype)
    shape = list(out_shape) or [1]
    params = [out.size, max(1, len(out_shape)), *_pad6(shape)]
    for t in (c, a, b):
        params += _pad6(broadcast_strides(t.shape, out_shape) or [0])
    rec.dispatch("compute/where.wgsl", [c, a, b], [out], params, out.size, workgroup=256, subs={"T": a.gpu_type})
    return out


__all__ = ["ACTIVATIONS", "activation_expr", "binary", "broadcast_strides", "unary"]
