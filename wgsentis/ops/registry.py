"""Operator registry, keyed by backend: each op family registers, by decorator and per opset, its numpy
kernel (backend "cpu") and the program builders of the GPU backends ("gpu-compute" now, "gpu-pixel"
next) in its own modules; ``lookup`` picks the highest version not above the model's opset.

A kernel is ``fn(ctx, *inputs, **attrs)``. Inputs arrive positionally (``None`` for an omitted
optional input), attributes as keyword-only arguments whose Python defaults are the spec's
defaults. It returns a tuple with one entry per output when the op has several outputs, else
the single value: an array, a list (a sequence value) or None (an empty optional).

A GPU program builder is ``fn(rec, layer, *inputs, **attrs)`` (see ``GPUImpl``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from wgsentis.ops.spec import OpsetAdapter, adapter_for, describe, spec_of

Kernel = Callable[..., Any]
FlopsRule = Callable[..., int]

CPU = "cpu"
GPU_COMPUTE = "gpu-compute"
GPU_PIXEL = "gpu-pixel"
BACKENDS = (CPU, GPU_COMPUTE, GPU_PIXEL)


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
    # True: the builder takes narrow-typed tensors (float16, int8...) as they are; else it sees them widened
    # (float32, int32) and the program narrows its results (backends/gpu/dtypes.py).
    narrow_types: bool = False
    # True: a control-flow builder whose subgraphs read outer-scope tensors through ``rec.scope``.
    reads_scope: bool = False


# backend -> (domain, op_type) -> since -> implementation (OpImpl for "cpu", GPUImpl for the others)
_REGISTRY: dict[str, dict[tuple[str, str], dict[int, Any]]] = {backend: {} for backend in BACKENDS}


def is_deterministic(impl: OpImpl, host_args: list[Any]) -> bool:
    """Whether running ``impl`` on these inputs gives the same result every time."""
    if callable(impl.deterministic):
        return bool(impl.deterministic(host_args))
    return impl.deterministic


def _check_backend(backend: str) -> None:
    if backend not in _REGISTRY:
        raise ValueError(f"unknown backend {backend!r} (expected one of {', '.join(BACKENDS)})")


def register(op_type: str, since: int = 1, domain: str = "", *, backend: str = CPU,
             deterministic: bool | Callable[[list[Any]], bool] = True,
             host_inputs: tuple[int, ...] = (), narrow_types: bool = False,
             reads_scope: bool = False) -> Callable[[Kernel], Kernel]:
    """Register ``fn`` for ``op_type`` from opset ``since`` on (for ``domain``) on ``backend``: the numpy
    kernel for "cpu" (``deterministic``: False or a predicate for random ops), else that backend's
    program builder (``host_inputs``: the inputs it needs as host arrays; ``narrow_types``: it takes float16 and
    8/16-bit integer tensors as they are, not widened; ``reads_scope``: a control-flow builder reading outer-scope
    tensors through ``rec.scope``). Returns ``fn`` unchanged."""
    _check_backend(backend)
    domain = _normalize_domain(domain)
    if backend == CPU and host_inputs:
        raise ValueError(f"{op_type}: host_inputs applies to GPU program builders, not to CPU kernels")
    if backend != CPU and deterministic is not True:
        raise ValueError(f"{op_type}: whether an op is deterministic is told by its CPU kernel's registration")

    def wrap(fn: Kernel) -> Kernel:
        impl: OpImpl | GPUImpl
        if backend == CPU:
            impl = _cpu_impl(op_type, since, domain, fn, deterministic)
        else:
            impl = GPUImpl(op_type, domain, since, fn, tuple(host_inputs), narrow_types, reads_scope)
        _REGISTRY[backend].setdefault((domain, op_type), {})[since] = impl
        return fn

    return wrap


def _cpu_impl(op_type: str, since: int, domain: str, fn: Kernel,
              deterministic: bool | Callable[[list[Any]], bool]) -> OpImpl:
    """The OpImpl of numpy kernel ``fn``: attribute names and input counts read from its signature."""
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())[1:]  # drop ctx
    attr_names = frozenset(p.name for p in params if p.kind is p.KEYWORD_ONLY)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    variadic = any(p.kind is p.VAR_POSITIONAL for p in params)
    return OpImpl(
        op_type=op_type, domain=domain, since=since, kernel=fn, attr_names=attr_names,
        takes_any_attr=any(p.kind is p.VAR_KEYWORD for p in params),
        min_inputs=sum(1 for p in positional if p.default is p.empty),
        max_inputs=None if variadic else len(positional),
        deterministic=deterministic,
    )


def register_flops(*op_types: str) -> Callable[[FlopsRule], FlopsRule]:
    """Register a FLOPs rule ``fn(layer, in_shapes, out_shapes) -> int`` for these ops."""

    def wrap(fn: FlopsRule) -> FlopsRule:
        describe(*op_types, flops=fn)
        return fn

    return wrap


def _normalize_domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def lookup(op_type: str, domain: str, opset: int, backend: str = CPU) -> Any:
    """The implementation of ``op_type`` on ``backend`` with the highest ``since`` not above ``opset``
    (an OpImpl for "cpu", a GPUImpl for a GPU backend), or None. A GPU backend reaches a layer of an older opset
    through the op's adapter to its canonical form (``spec.OpsetAdapter``) where it registers no builder of that
    form itself."""
    _check_backend(backend)
    domain = _normalize_domain(domain)
    versions = _REGISTRY[backend].get((domain, op_type))
    if not versions:
        return None
    eligible = [v for v in versions if v <= opset]
    found = versions[max(eligible)] if eligible else None
    if backend != CPU:
        adapter = adapter_for(op_type, domain, opset)
        if adapter is not None and (found is None or found.since < adapter.since):
            return _adapted(backend, domain, op_type, adapter)
    return found


# (backend, domain, op_type, adapter's since) -> the GPUImpl that adapts a layer and calls the canonical builder
_ADAPTED: dict[tuple[str, str, str, int], GPUImpl] = {}


def _adapted(backend: str, domain: str, op_type: str, adapter: OpsetAdapter) -> GPUImpl | None:
    key = (backend, domain, op_type, adapter.since)
    impl = _ADAPTED.get(key)
    if impl is None:
        canonical = _REGISTRY[backend][(domain, op_type)].get(adapter.canonical)
        if canonical is None:
            return None

        def build(rec: Any, layer: Any, *args: Any, **attrs: Any) -> Any:
            form = adapter.apply(layer, attrs, list(args))
            if form is None:
                return NotImplemented
            canonical_layer, canonical_args = form
            return canonical.build(rec, canonical_layer, *canonical_args, **canonical_layer.attrs)

        impl = _ADAPTED[key] = GPUImpl(op_type, domain, adapter.since, build, adapter.host_inputs,
                                       canonical.narrow_types, canonical.reads_scope)
    return impl


def supported_ops(backend: str = CPU) -> dict[tuple[str, str], list[int]]:
    """Every (domain, op_type) registered on ``backend`` with its registered ``since`` versions."""
    _check_backend(backend)
    return {key: sorted(v) for key, v in _REGISTRY[backend].items()}


def flops_of(layer: Any, in_shapes: list[tuple[int, ...] | None], out_shapes: list[tuple[int, ...] | None]) -> int:
    """FLOPs of one layer (a multiply-add counts 2); elementwise ops count one per output element."""
    rule = spec_of(layer.op_type).flops  # (by op type, as FLOPs rules have always been kept)
    if rule is not None:
        return int(rule(layer, in_shapes, out_shapes))
    first = out_shapes[0] if out_shapes else None
    return int(np.prod(first)) if first is not None else 0
