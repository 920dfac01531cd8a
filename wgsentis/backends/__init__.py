"""Backends and the program protocol ``Worker`` talks to.

A backend compiles a graph into a *program*: ``output_names``, ``execute(feeds, control)`` returning a
readback (``done()``, ``wait()`` -> outputs by name), ``stats()`` and ``close()``, and ``runs_on_any_thread``: whether
``execute`` may be called from any thread, one run at a time (the cpu backend's; a GPU program's runs stay on its
worker's runner thread). Backends are found in one factory table by name; a backend that is not built yet is absent
from it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from wgsentis.errors import BackendNotAvailableError, InputError
from wgsentis.ops.kernel_options import DEFAULT_KERNEL_OPTIONS, KernelOptions


class Readback(Protocol):
    """A run's outputs on their way to the host."""

    def done(self) -> bool: ...

    def wait(self) -> dict[str, Any]: ...


class Program(Protocol):
    """A graph compiled for one backend."""

    output_names: list[str]
    runs_on_any_thread: bool

    def execute(self, feeds: dict[str, Any], control: Any = None, on_device: bool = False) -> Readback: ...

    def stats(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class ProgramOptions:
    """What a Worker asks of a backend: ``threads`` for host kernels, ``spin_wait`` (cpu), ``debug_groups``
    (a debug group per layer, for captures), ``precision`` of constant matmul operands, ``max_plans`` (GPU:
    recorded plans kept, one per input signature), ``fast_winograd`` (GPU: 3x3 convolutions may take
    Winograd F(4x4, 3x3)), ``kernels`` (the kernel forms the program may take, ``KernelOptions``), ``adapter``
    (GPU: the index in ``wgsentis.adapters()`` of the device to run on; None: the process-wide default),
    ``prepare_ahead`` (GPU: trace the next size of steadily growing inputs while the device runs the current one,
    backends/gpu/lookahead.py)."""

    threads: int = 1
    spin_wait: bool = True
    debug_groups: bool = False
    precision: str = "float32"
    max_plans: int = 16
    fast_winograd: bool = False
    kernels: KernelOptions = DEFAULT_KERNEL_OPTIONS
    adapter: int | None = None
    prepare_ahead: bool = True


@dataclass(frozen=True)
class BackendSpec:
    """A backend in the factory table: its name, what makes its programs, the precisions it offers."""

    name: str
    factory: Callable[[Any, ProgramOptions], Program]
    precisions: tuple[str, ...] = ("float32",)


_BACKENDS: dict[str, BackendSpec] = {}


def register_backend(spec: BackendSpec) -> None:
    """Add (or replace) a backend in the factory table."""
    _BACKENDS[spec.name] = spec


def available_backends() -> list[str]:
    return list(_BACKENDS)


def create_program(backend: str, graph: Any, options: ProgramOptions) -> Program:
    """``graph`` compiled for ``backend``; InputError for options the backend does not take,
    BackendNotAvailableError for a backend not in this build."""
    spec = _BACKENDS.get(backend)
    if spec is None:
        raise BackendNotAvailableError(f"backend '{backend}' is not available yet in this build; use one of "
                                       f"{', '.join(repr(b) for b in _BACKENDS)}")
    if options.precision not in spec.precisions:
        raise InputError(f"Worker(precision={options.precision!r}) applies to {_offering(options.precision)}, "
                         f"not '{backend}'")
    return spec.factory(graph, options)


def _offering(precision: str) -> str:
    names = [f"'{s.name}'" for s in _BACKENDS.values() if precision in s.precisions]
    return "the " + " and ".join(names) + " backend" + ("s" if len(names) > 1 else "") if names else "no backend"


def _cpu(graph: Any, options: ProgramOptions) -> Program:
    from wgsentis.backends.cpu import GraphProgram

    if options.adapter is not None:
        raise InputError(f"Worker(adapter={options.adapter}): adapter picks a GPU; the cpu backend runs on the host")
    return GraphProgram(graph, options.threads, spin_wait=options.spin_wait, kernels=options.kernels)


def _gpu_compute(graph: Any, options: ProgramOptions) -> Program:
    from wgsentis.backends.gpu.device import context_for
    from wgsentis.backends.gpu_compute import ComputeProgram

    return ComputeProgram(graph, options.threads, debug_groups=options.debug_groups, precision=options.precision,
                          ctx=context_for(options.adapter), max_plans=options.max_plans,
                          fast_winograd=options.fast_winograd, kernels=options.kernels,
                          prepare_ahead=options.prepare_ahead)


def _gpu_pixel(graph: Any, options: ProgramOptions) -> Program:
    from wgsentis.backends.gpu.device import context_for
    from wgsentis.backends.gpu_pixel import PixelProgram

    return PixelProgram(graph, options.threads, debug_groups=options.debug_groups, ctx=context_for(options.adapter),
                        max_plans=options.max_plans, fast_winograd=options.fast_winograd, kernels=options.kernels,
                        prepare_ahead=options.prepare_ahead)


register_backend(BackendSpec("cpu", _cpu))
register_backend(BackendSpec("gpu-compute", _gpu_compute, ("float32", "float16")))
register_backend(BackendSpec("gpu-pixel", _gpu_pixel))
