"""Operator registry: each op registers its numpy kernel (and FLOPs rule) by decorator, per opset.

A kernel is ``fn(ctx, *inputs, **attrs)``. Inputs arrive positionally (``None`` for an omitted
optional input), attributes as keyword-only arguments whose Python defaults are the spec's
defaults. It returns a tuple with one entry per output when the op has several outputs, else
the single value: an array, a list (a sequence value) or None (an empty optional).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Kernel = Callable[..., Any]
FlopsRule = Callable[..., int]


@dataclass
class OpImpl:
    """One implementation of an op, valid from ``since`` up to the next registered version."""

    op_type: str
    domain: str
    since: int
    kernel: Kernel
    attr_names: frozenset[str] = frozenset()
    takes_any_attr: bool = False
    min_inputs: int = 0
    max_inputs: int | None = None  # None: variadic
    # False for random ops (never constant-folded, re-run on every GPU replay); or a predicate of the
    # inputs' host values (None where unknown) for ops random only sometimes, like training Dropout.
    deterministic: bool | Callable[[list[Any]], bool] = True
    host_only_inputs: tuple[int, ...] = ()  # inputs that must be read on the host (shapes, axes)
    meta: dict[str, Any] = field(default_factory=dict)


_REGISTRY: dict[tuple[str, str], dict[int, OpImpl]] = {}
_FLOPS: dict[str, FlopsRule] = {}


def is_deterministic(impl: OpImpl, host_args: list[Any]) -> bool:
    """Whether running ``impl`` on these inputs gives the same result every time."""
    if callable(impl.deterministic):
        return bool(impl.deterministic(host_args))
    return impl.deterministic


def register(op_type: str, since: int = 1, domain: str = "", *,
             deterministic: bool | Callable[[list[Any]], bool] = True,
             host_inputs: tuple[int, ...] = ()) -> Callable[[Kernel], Kernel]:
    """Register ``fn`` as the kernel of ``op_type`` from opset ``since`` on (for ``domain``)."""

    def wrap(fn: Kernel) -> Kernel:
        sig = inspect.signature(fn)
        params = list(sig.parameters.values())[1:]  # drop ctx
        attr_names = frozenset(p.name for p in params if p.kind is p.KEYWORD_ONLY)
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        variadic = any(p.kind is p.VAR_POSITIONAL for p in params)
        impl = OpImpl(
            op_type=op_type, domain=domain, since=since, kernel=fn, attr_names=attr_names,
            takes_any_attr=any(p.kind is p.VAR_KEYWORD for p in params),
            min_inputs=sum(1 for p in positional if p.default is p.empty),
            max_inputs=None if variadic else len(positional),
            deterministic=deterministic, host_only_inputs=host_inputs,
        )
        _REGISTRY.setdefault((domain, op_type), {})[since] = impl
        return fn

    return wrap


def register_flops(*op_types: str) -> Callable[[FlopsRule], FlopsRule]:
    """Register a FLOPs rule ``fn(layer, in_shapes, out_shapes) -> int`` for these ops."""

    def wrap(fn: FlopsRule) -> FlopsRule:
        for op_type in op_types:
            _FLOPS[op_type] = fn
        return fn

    return wrap


def _normalize_domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def lookup(op_type: str, domain: str, opset: int) -> OpImpl | None:
    """The implementation with the highest ``since`` not above ``opset``, or None."""
    versions = _REGISTRY.get((_normalize_domain(domain), op_type))
    if not versions:
        return None
    eligible = [v for v in versions if v <= opset]
    return versions[max(eligible)] if eligible else None


def supported_ops() -> dict[tuple[str, str], list[int]]:
    """Every registered (domain, op_type) with its registered ``since`` versions."""
    return {key: sorted(v) for key, v in _REGISTRY.items()}


def flops_of(layer: Any, in_shapes: list[tuple[int, ...] | None], out_shapes: list[tuple[int, ...] | None]) -> int:
    """FLOPs of one layer (a multiply-add counts 2); elementwise ops count one per output element."""
    rule = _FLOPS.get(layer.op_type)
    if rule is not None:
        return int(rule(layer, in_shapes, out_shapes))
    first = out_shapes[0] if out_shapes else None
    return int(np.prod(first)) if first is not None else 0


# -- GPU programs ---------------------------------------------------------------------------------
@dataclass
class GPUImpl:
    """A GPU program builder: ``fn(rec, layer, *inputs, **attrs)`` records dispatches and returns the
    outputs (GPU tensors, or host arrays for values it computes on the host). It returns
    ``NotImplemented`` when it cannot handle these inputs (dtype, rank...); the layer then falls back
    to the CPU kernel. ``host_inputs`` are inputs it needs as host arrays (shapes, axes)."""

    op_type: str
    domain: str
    since: int
    build: Callable[..., Any]
    host_inputs: tuple[int, ...] = ()


_GPU_REGISTRY: dict[tuple[str, str], dict[int, GPUImpl]] = {}


def register_gpu(op_type: str, since: int = 1, domain: str = "", *,
                 host_inputs: tuple[int, ...] = ()) -> Callable[[Kernel], Kernel]:
    """Register a gpu-compute program builder for ``op_type`` from opset ``since`` on."""

    def wrap(fn: Kernel) -> Kernel:
        _GPU_REGISTRY.setdefault((domain, op_type), {})[since] = GPUImpl(op_type, domain, since, fn, host_inputs)
        return fn

    return wrap


def lookup_gpu(op_type: str, domain: str, opset: int) -> GPUImpl | None:
    """The GPU builder with the highest ``since`` not above ``opset``, or None."""
    versions = _GPU_REGISTRY.get((_normalize_domain(domain), op_type))
    if not versions:
        return None
    eligible = [v for v in versions if v <= opset]
    return versions[max(eligible)] if eligible else None

