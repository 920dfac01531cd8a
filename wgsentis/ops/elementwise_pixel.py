"""gpu-pixel programs of the elementwise family (issue 20, in progress): every activation with a WGSL form
(the activation records' expressions, lane by lane) and Add/Sub/Mul/Div of two float32 tensors: texel by texel
where their layouts agree, else with numpy broadcasting through element addressing (wgsl/pixel/addressing.wgsl),
whatever axis each input has blocked. Integer types and the rest of the family fall back for now."""

from __future__ import annotations

from typing import Any

import numpy as np

from wgsentis.backends.gpu.tensors import GTensor
from wgsentis.backends.pixel_layout import MAX_RANK, addressing_params
from wgsentis.ops.activations import ACTIVATIONS, Activation
from wgsentis.ops.registry import GPU_PIXEL, register

_BINARY = {"Add": "a + b", "Sub": "a - b", "Mul": "a * b", "Div": "div_f32(a, b)"}


def _float_tensor(rec, x: Any) -> GTensor | None:
    """``x`` as a float32 texture tensor (a host array is uploaded), or None."""
    if isinstance(x, np.ndarray) and x.dtype == np.float32:
        return rec.upload(x, "constant")
    if isinstance(x, GTensor) and x.dtype == np.float32 and x.layout is not None:
        return x
    return None


def _divided(rec, expr: str) -> str:
    """``expr`` with its div_f32 calls bound to the device's division (math.wgsl), as on gpu-compute."""
    if "div_f32(" not in expr:
        return expr
    return expr.replace("div_f32(", f"{rec.ctx.division_function}(opaque_zero(), ")


def unary(rec, x: GTensor, expr: str, params: list[float]) -> GTensor:
    """Record y = expr(x) lane by lane into a tensor of x's layout."""
    layout = x.layout
    y = rec.alloc(x.shape, np.float32, layout.axis)
    words = [layout.texels, layout.shift, *params, *[0.0] * (3 - len(params)), *layout.lane_params()]
    rec.draw("pixel/unary.wgsl", [x], [y], words, subs={"EXPR": _divided(rec, expr)})
    return y


def _register_activation(act: Activation) -> None:
    @register(act.name, act.versions[0], backend=GPU_PIXEL)
    def build(rec, layer, x, **attrs):
        t = _float_tensor(rec, x)
        if t is None:
            return NotImplemented
        try:
            expr, params = act.expression(attrs)
        except ValueError:
            return NotImplemented  # the CPU kernel reports its own error
        return unary(rec, t, expr, params)


for _act in ACTIVATIONS.values():
    if _act.versions and _act.wgsl is not None and not _act.inputs_from:
        _register_activation(_act)


def _register_binary(op: str, expr: str) -> None:
    @register(op, 7, backend=GPU_PIXEL)
    def build(rec, layer, a, b):
        x, y = _float_tensor(rec, a), _float_tensor(rec, b)
        if x is None or y is None:
            return NotImplemented
        if x.shape == y.shape and x.layout == y.layout:  # texel by texel
            layout = x.layout
            out = rec.alloc(x.shape, np.float32, layout.axis)
            rec.draw("pixel/binary.wgsl", [x, y], [out], [layout.texels, layout.shift, *layout.lane_params()],
                     subs={"EXPR": _divided(rec, expr)})
            return out
        try:
            shape = np.broadcast_shapes(x.shape, y.shape)
        except ValueError:
            return NotImplemented  # the CPU kernel names the shapes
        if len(shape) > MAX_RANK:
            return NotImplemented
        out = rec.alloc(shape, np.float32, -1)
        params = [*addressing_params(out.layout), *addressing_params(x.layout),
                  *addressing_params(y.layout), out.layout.texels]
        rec.draw("pixel/binary_broadcast.wgsl", [x, y], [out], params, subs={"EXPR": _divided(rec, expr)})
        return out


for _op, _expr in _BINARY.items():
    _register_binary(_op, _expr)
