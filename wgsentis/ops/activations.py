"""Activations: one record per activation, holding everything every backend and pass needs of it.

An ``Activation`` carries the numpy kernel, the in-place form the CPU kernels apply part by part,
the file of the WGSL expression (``wgsl/common/act/``) the GPU unary kernels and the fused epilogues (Conv,
MatMul, Gemm, Add, BatchNormalization) substitute, the name the ONNX RNN/GRU/LSTM ``activations`` attribute uses, and
whether FuseActivation may fold it into the layer before it. ``ACTIVATIONS`` is the one table; the
elementwise family registers the CPU kernels (elementwise.py) and the gpu-compute builders
(elementwise_gpu.py) from it, the recurrent ops (rnn.py, rnn_gpu.py) and the passes (passes/fuse.py)
read it.

WGSL expressions are of a scalar ``v: f32`` with the parameters ``alpha``, ``beta``, ``gamma``
(f32); the vec4 kernels (unary4.wgsl, binary4.wgsl, channel_affine4.wgsl) apply them to each
component, as every epilogue does. WGSL has no overloading of user functions, and the math.wgsl
helpers the expressions call (exp_accurate, tanh_safe, ...) are f32 functions.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from wgsentis.backends.gpu import shader_gen
from wgsentis.ops.numeric import erf, float_kernel, is_narrow

InPlace = Callable[[np.ndarray], Any]


@dataclass(frozen=True, eq=False)
class Activation:
    """One activation and every form of it.

    ``kernel(x, **attrs)`` returns a new array of x's dtype (every attribute passed by keyword);
    ``inplace(**attrs)`` returns a function that overwrites a float32/float64 array with the result in
    one pass, or None where these attributes have no such form; ``attrs`` are the attributes with the
    spec's defaults (newest opset). ``versions`` are the opsets the ONNX op is registered at (none for
    Affine and ScaledTanh, which only the recurrent ops name)."""

    name: str  # the ONNX op type
    kernel: Callable[..., np.ndarray]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    versions: tuple[int, ...] = ()
    inplace: Callable[..., InPlace | None] | None = None
    # The .wgsl file (under wgsl/) of its WGSL expression of `v`, alpha, beta, gamma; or such files keyed by the
    # value of the attribute `wgsl_variant` (Gelu's approximate).
    wgsl: str | Mapping[str, str] | None = None
    wgsl_variant: str | None = None
    # (attribute, value when absent or None) bound to alpha, beta, gamma in order ("" for an unused slot);
    # None: alpha, beta and gamma take the attributes of those names.
    wgsl_params: tuple[tuple[str, float], ...] | None = None
    rnn_name: str | None = None  # the spelling in the RNN/GRU/LSTM `activations` attribute
    fusable: bool = False  # FuseActivation may fold it into a preceding Conv/MatMul/Gemm/Add/BatchNormalization
    legacy: bool = False  # the first version takes opset 1's `consumed_inputs` attribute
    since_attrs: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)  # other defaults at a version
    inputs_from: int | None = None  # from this opset on the attributes are optional inputs (Clip 11)

    def expression(self, attrs: Mapping[str, Any]) -> tuple[str, list[float]]:
        """The WGSL expression of ``v`` and its [alpha, beta, gamma] values for these attributes; raises
        ValueError where there is none (no WGSL form, or an attribute value without an expression)."""
        if self.wgsl is None:
            raise ValueError(f"{self.name} has no WGSL expression")
        expr = self.wgsl
        if not isinstance(expr, str):
            key = attrs.get(self.wgsl_variant or "", self.attrs.get(self.wgsl_variant or ""))
            if key not in expr:
                raise ValueError(f"{self.name}: no WGSL expression for {self.wgsl_variant}={key!r}")
            expr = expr[key]
        expr = shader_gen.expression(expr)
        slots = self.wgsl_params
        if slots is None:
            slots = tuple((n, float(self.attrs[n])) if n in self.attrs else ("", 0.0)
                          for n in ("alpha", "beta", "gamma"))
        values = []
        for name, absent in slots:
            value = attrs.get(name) if name else None
            values.append(float(np.asarray(value).reshape(-1)[0]) if value is not None else absent)
        values += [0.0] * (3 - len(values))
        return expr, values[:3]

    def onnx_kernel(self, since: int) -> Callable[..., Any]:
        """The registry kernel of the ONNX op at version ``since``: ``fn(ctx, X, ...)`` with the version's
        signature (attributes keyword-only with their defaults, or optional inputs from
        ``inputs_from``), narrow floats computed in float32."""
        defaults = {**self.attrs, **self.since_attrs.get(since, {})}
        as_inputs = self.inputs_from is not None and since >= self.inputs_from
        input_names = tuple(self.attrs) if as_inputs else ()
        kernel_fn = self.kernel

        def kernel(ctx, x, *inputs, **attrs):
            attrs.pop("consumed_inputs", None)
            values = {**defaults, **attrs}
            values.update(zip(input_names, inputs, strict=False))
            return kernel_fn(x, **values)

        wrapped = float_kernel(kernel)
        par = inspect.Parameter
        params = [par("ctx", par.POSITIONAL_OR_KEYWORD), par("X", par.POSITIONAL_OR_KEYWORD)]
        if as_inputs:
            params += [par(n, par.POSITIONAL_OR_KEYWORD, default=None) for n in input_names]
        else:
            params += [par(n, par.KEYWORD_ONLY, default=v) for n, v in defaults.items()]
        if self.legacy and since == self.versions[0]:
            params.append(par("consumed_inputs", par.KEYWORD_ONLY, default=None))
        wrapped.__signature__ = inspect.Signature(params)  # what the registry reads the attributes from
        wrapped.__name__ = wrapped.__qualname__ = f"{self.name.lower()}_{since}"
        wrapped.__doc__ = f"{self.name} (opset {since}): elementwise activation, same dtype as the input."
        return wrapped


# -- numpy kernels ----------------------------------------------------------------------------------
# np.maximum/np.minimum against a scalar run a slow loop (numpy 2.4 here: 84 us for 200k float32, where
# np.clip with two finite-typed bounds takes 37 and an array-array maximum 19), so Relu and scalar Clip
# go through np.clip with an infinite bound. Both propagate NaN.
def _clip_in_place(v: np.ndarray, lo: Any, hi: Any) -> np.ndarray:
    """``v`` clipped to [lo, hi] in place (None: unbounded on that side); float arrays only, lo <= hi."""
    kind = v.dtype.type
    np.clip(v, kind(-np.inf if lo is None else lo), kind(np.inf if hi is None else hi), out=v)
    return v


def _relu(x: np.ndarray) -> np.ndarray:
    if x.dtype.kind == "f" and x.dtype.itemsize >= 4:
        return _clip_in_place(x.copy(), 0, None)
    return np.maximum(x, 0) if x.dtype.kind != "u" else x.copy()


def _relu_inplace() -> InPlace:
    return lambda v: _clip_in_place(v, 0, None)


def _leaky_relu(x: np.ndarray, alpha: float) -> np.ndarray:
    y = x * alpha
    if 0.0 <= alpha <= 1.0:
        return np.maximum(x, y, out=y)  # max(x, alpha*x) equals the where form for alpha in [0, 1]
    return np.where(x >= 0, x, y)


def _leaky_relu_inplace(alpha: float) -> InPlace | None:
    if not 0.0 <= float(alpha) <= 1.0:
        return None
    alpha = float(alpha)
    return lambda v: np.maximum(v, v * v.dtype.type(alpha), out=v)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # 1 / (1 + exp(-x)) in one buffer; exp overflow gives inf -> 0, the correct limit.
    y = np.negative(x)
    np.exp(y, out=y)
    y += 1
    np.reciprocal(y, out=y)
    return y


def _hard_sigmoid(x: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    y = x * alpha
    y += beta
    return np.clip(y, 0, 1, out=y)


def _hard_swish(x: np.ndarray) -> np.ndarray:
    y = x * (1 / 6)
    y += 0.5
    np.clip(y, 0, 1, out=y)
    y *= x
    return y


def _elu(x: np.ndarray, alpha: float) -> np.ndarray:
    # alpha * (exp(min(x, 0)) - 1) + max(x, 0): one formula for both sides.
    y = np.minimum(x, 0)
    np.expm1(y, out=y)
    y *= alpha
    y += np.maximum(x, 0)
    return y


def _selu(x: np.ndarray, alpha: float, gamma: float) -> np.ndarray:
    y = _elu(x, alpha)
    y *= gamma
    return y


def _celu(x: np.ndarray, alpha: float) -> np.ndarray:
    y = np.minimum(x, 0)
    y /= alpha
    np.expm1(y, out=y)
    y *= alpha
    y += np.maximum(x, 0)
    return y


def _softplus(x: np.ndarray) -> np.ndarray:
    # log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)): no overflow, and faster than np.logaddexp.
    y = np.abs(x)
    np.negative(y, out=y)
    np.exp(y, out=y)
    np.log1p(y, out=y)
    y += np.maximum(x, 0)
    return y


def _softsign(x: np.ndarray) -> np.ndarray:
    d = np.abs(x)
    d += 1
    return np.divide(x, d, out=d)


def _thresholded_relu(x: np.ndarray, alpha: float) -> np.ndarray:
    return np.where(x > alpha, x, 0).astype(x.dtype, copy=False)


def _gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        inner = x * x
        inner *= 0.044715
        inner += 1
        inner *= x
        inner *= math.sqrt(2 / math.pi)
        np.tanh(inner, out=inner)
    elif approximate == "none":
        inner = erf(x * (1 / math.sqrt(2)))
    else:
        raise ValueError(f"Gelu: unknown approximate='{approximate}' (expected 'none' or 'tanh')")
    inner += 1
    inner *= x
    inner *= 0.5
    return inner


def _mish(x: np.ndarray) -> np.ndarray:
    y = _softplus(x)
    np.tanh(y, out=y)
    y *= x
    return y


def _swish(x: np.ndarray, alpha: float) -> np.ndarray:
    y = _sigmoid(x * alpha if alpha != 1.0 else x)
    y *= x
    return y


def _affine(x: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    return x * x.dtype.type(alpha) + x.dtype.type(beta)


def _scaled_tanh(x: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    return np.tanh(x * x.dtype.type(beta)) * x.dtype.type(alpha)


def _bound(value: Any) -> Any:
    """A Clip bound: None when absent or empty, else a scalar/array usable by numpy."""
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        if value.size == 0:
            return None
        return value.reshape(()) if value.size == 1 else value
    return value


def _clip(x: np.ndarray, lo: Any, hi: Any) -> np.ndarray:
    lo, hi = _bound(lo), _bound(hi)
    narrow = is_narrow(x.dtype)
    if isinstance(lo, np.ndarray) and not narrow:
        lo = lo.astype(x.dtype, copy=False)
    if isinstance(hi, np.ndarray) and not narrow:
        hi = hi.astype(x.dtype, copy=False)
    scalar = all(b is None or np.ndim(b) == 0 for b in (lo, hi))
    if scalar and x.dtype.kind == "f" and x.dtype.itemsize >= 4 and (lo is None or hi is None or lo <= hi):
        return _clip_in_place(x.copy(), lo, hi)  # one fast pass (see _clip_in_place)
    # max then min (not np.clip): lo > hi gives hi, as the spec's min(max(x, lo), hi).
    y = np.maximum(x, lo) if lo is not None else x.copy()
    if hi is not None:
        if np.broadcast_shapes(y.shape, np.shape(hi)) == y.shape:
            np.minimum(y, hi, out=y)
        else:
            y = np.minimum(y, hi)
    return y.astype(x.dtype, copy=False)


def _clip_inplace(min: Any = None, max: Any = None) -> InPlace | None:
    lo, hi = _bound(min), _bound(max)
    if (lo is not None and np.size(lo) != 1) or (hi is not None and np.size(hi) != 1):
        return None
    lo = None if lo is None else float(np.asarray(lo).reshape(()))
    hi = None if hi is None else float(np.asarray(hi).reshape(()))
    if lo is not None and hi is not None and lo > hi:  # the spec's min(max(x, lo), hi): hi (NaN stays NaN)
        def inverted(v: np.ndarray) -> None:
            np.maximum(v, v.dtype.type(lo), out=v)
            np.minimum(v, v.dtype.type(hi), out=v)

        return inverted
    return lambda v: _clip_in_place(v, lo, hi)


# -- the table --------------------------------------------------------------------------------------
_SELU_ALPHA, _SELU_GAMMA = 1.67326319217681884765625, 1.05070102214813232421875
_FLT_MAX = 3.4028234663852886e38

# A NaN stays NaN in the WGSL expressions (is_nan_f32, math.wgsl): WGSL's max, min, clamp and sign of a
# NaN give a number on some drivers.
_TABLE = (
    Activation("Relu", lambda x: _relu(x), versions=(1, 6, 13, 14), legacy=True, inplace=_relu_inplace,
               # By the bits: a subnormal v is kept where fragment shaders flush them (max(v, 0.0) gave 0).
               wgsl="common/act/relu.wgsl",
               rnn_name="Relu", fusable=True),
    Activation("LeakyRelu", _leaky_relu, {"alpha": 0.01}, (1, 6, 16), legacy=True, inplace=_leaky_relu_inplace,
               wgsl="common/act/leaky_relu.wgsl", rnn_name="LeakyRelu", fusable=True),
    Activation("Sigmoid", lambda x: _sigmoid(x), versions=(1, 6, 13), legacy=True,
               wgsl="common/act/sigmoid.wgsl", rnn_name="Sigmoid", fusable=True),
    Activation("Tanh", lambda x: np.tanh(x), versions=(1, 6, 13), legacy=True, wgsl="common/act/tanh.wgsl",
               rnn_name="Tanh", fusable=True),
    Activation("HardSigmoid", _hard_sigmoid, {"alpha": 0.2, "beta": 0.5}, (1, 6, 22), legacy=True,
               # The product rounded on its own (opaque: never an FMA with the add), as numpy computes it.
               wgsl="common/act/hard_sigmoid.wgsl",
               rnn_name="HardSigmoid",
               fusable=True),
    Activation("HardSwish", lambda x: _hard_swish(x), versions=(14, 22),
               # x * float32(1/6), rounded on its own, + 0.5: the CPU kernel's (and ONNX Runtime's) steps.
               wgsl="common/act/hard_swish.wgsl", fusable=True),
    Activation("Elu", _elu, {"alpha": 1.0}, (1, 6, 22), legacy=True,
               wgsl="common/act/elu.wgsl", rnn_name="Elu", fusable=True),
    Activation("Selu", _selu, {"alpha": _SELU_ALPHA, "gamma": _SELU_GAMMA}, (1, 6, 22), legacy=True,
               since_attrs={1: {"alpha": 1.6732, "gamma": 1.0507}},
               wgsl="common/act/selu.wgsl", fusable=True),
    Activation("Celu", _celu, {"alpha": 1.0}, (12, 28),
               wgsl="common/act/celu.wgsl"),
    Activation("Softplus", lambda x: _softplus(x), versions=(1, 22), wgsl="common/act/softplus.wgsl",
               rnn_name="Softplus", fusable=True),
    Activation("Softsign", lambda x: _softsign(x), versions=(1, 22), wgsl="common/act/softsign.wgsl",
               rnn_name="Softsign"),
    Activation("ThresholdedRelu", _thresholded_relu, {"alpha": 1.0}, (10, 22),
               wgsl="common/act/thresholded_relu.wgsl",
               rnn_name="ThresholdedRelu"),
    Activation("Gelu", _gelu, {"approximate": "none"}, (20,), wgsl_variant="approximate", fusable=True,
               wgsl={"none": "common/act/gelu_none.wgsl", "tanh": "common/act/gelu_tanh.wgsl"}),
    Activation("Mish", lambda x: _mish(x), versions=(18, 22), wgsl="common/act/mish.wgsl", fusable=True),
    Activation("Swish", _swish, {"alpha": 1.0}, (24,), wgsl="common/act/swish.wgsl"),
    Activation("Clip", lambda x, min, max: _clip(x, min, max), {"min": None, "max": None}, (1, 6, 11, 12, 13),
               legacy=True, since_attrs={6: {"min": -_FLT_MAX, "max": _FLT_MAX}}, inputs_from=11,
               inplace=_clip_inplace, wgsl="common/act/clip.wgsl",
               wgsl_params=(("min", -math.inf), ("max", math.inf)), fusable=True),
    # Named only by the recurrent ops' `activations` attribute (experimental ONNX ops once).
    Activation("Affine", _affine, {"alpha": 1.0, "beta": 0.0}, wgsl="common/act/affine.wgsl", rnn_name="Affine"),
    Activation("ScaledTanh", _scaled_tanh, {"alpha": 1.0, "beta": 1.0}, wgsl="common/act/scaled_tanh.wgsl",
               rnn_name="ScaledTanh"),
)
ACTIVATIONS: dict[str, Activation] = {a.name: a for a in _TABLE}
_BY_RNN_NAME = {a.rnn_name.lower(): a for a in _TABLE if a.rnn_name}

# The activations FuseActivation folds into the layer before them (its kernels apply them, CPU and GPU).
FUSABLE: frozenset[str] = frozenset(a.name for a in _TABLE if a.fusable)
# The ONNX ops among them (every one elementwise: the output has the input's shape).
ELEMENTWISE_OPS: frozenset[str] = frozenset(a.name for a in _TABLE if a.versions)


# -- lookups ----------------------------------------------------------------------------------------
def activation_expr(op_type: str, attrs: Mapping[str, Any]) -> tuple[str, list[float]]:
    """The WGSL expression of ``v`` and its [alpha, beta, gamma] for activation ``op_type`` with ``attrs``
    (what the GPU unary kernel and the fused epilogues substitute); raises KeyError for an op that is no
    activation, ValueError for one without a WGSL form for these attributes."""
    return ACTIVATIONS[op_type].expression(attrs)


def inplace_activation(op_type: str, attrs: Mapping[str, Any]) -> InPlace | None:
    """A fused activation as a function that overwrites a float32/float64 array with its result in one
    in-place pass (Relu, Clip, LeakyRelu); None for the others, which the engine applies to the whole
    output: their several passes per part cost more in calls than the cache saves (PP-LCNet with
    HardSwish part by part: 4-10% slower, alternating runs). Attributes the record does not know
    (opset 1's consumed_inputs) are ignored."""
    act = ACTIVATIONS.get(op_type)
    if act is None or act.inplace is None:
        return None
    return act.inplace(**{**act.attrs, **{k: v for k, v in attrs.items() if k in act.attrs}})


def rnn_activation(name: str | bytes) -> Activation | None:
    """The activation an RNN/GRU/LSTM ``activations`` entry names (any case), or None."""
    if isinstance(name, bytes):
        name = name.decode()
    return _BY_RNN_NAME.get(str(name).lower())


def rnn_activations(names: Any, alphas: Any, betas: Any, defaults: list[str],
                    num_directions: int) -> list[list[tuple[Activation, dict[str, float]]]]:
    """Per direction, (activation, its attributes) for each function of a recurrent op: ``names`` (the
    op's defaults when empty; one direction's list serves both), with the ``activation_alpha`` and
    ``activation_beta`` values consumed in order by the functions that take an alpha or a beta. Raises
    ValueError for a wrong count or an unknown name."""
    per_dir = len(defaults)
    names = list(names) if names else defaults * num_directions
    if len(names) == per_dir and num_directions == 2:
        names = names * 2
    if len(names) != per_dir * num_directions:
        raise ValueError(f"expected {per_dir * num_directions} activations, got {names}")
    alphas, betas = list(alphas or []), list(betas or [])
    funcs = []
    for name in names:
        act = rnn_activation(name)
        if act is None:
            raise ValueError(f"unsupported RNN activation {name!r}")
        attrs = {k: float(v) for k, v in act.attrs.items()}
        if "alpha" in attrs and alphas:
            attrs["alpha"] = float(alphas.pop(0))
        if "beta" in attrs and betas:
            attrs["beta"] = float(betas.pop(0))
        funcs.append((act, attrs))
    return [funcs[d * per_dir:(d + 1) * per_dir] for d in range(num_directions)]


__all__ = ["ACTIVATIONS", "ELEMENTWISE_OPS", "FUSABLE", "Activation", "activation_expr", "inplace_activation",
           "rnn_activation", "rnn_activations"]
