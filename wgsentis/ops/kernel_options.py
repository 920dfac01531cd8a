"""Kernel choices a program is compiled with: which of the faster forms its kernels may take.

Every choice is on by default (each was measured to win where it applies); turning one off keeps the
result within the same tolerance of the oracle but takes the plainer form: to compare forms, to test
the paths a device without the faster one would run, or to work around a driver that runs it badly.
A Worker takes them as ``Worker(..., kernels=KernelOptions(...))``; programs read them from their own
``kernels`` (the GPU builders as ``rec.program.kernels``, the CPU kernels through ``kernel_options``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wgsentis.errors import InputError


@dataclass(frozen=True)
class KernelOptions:
    """Which kernel forms a program may take (all on by default).

    ``texture_operands`` (gpu-compute): constant matmul and convolution operands are read through
    rgba32float textures where they fit. Lavapipe vectorises texture fetches while storage-buffer loads
    become per-lane scalar loops with bounds checks (1024^3 MatMul with a constant B: 19 -> 31 GFLOP/s;
    ResNet's 3x3 conv 64->64 at 56x56: 14.8 -> 9.8 ms). Off: every operand in storage buffers (the paths
    tests compare, and what a device whose texture fetches are slow would want); the three choices below
    that read textures then do not apply either.

    ``linear_operands`` (gpu-compute, with ``texture_operands``): device operands (activations) whose rows
    are whole texels reach a linear texture by a transfer copy (a memcpy) and are read as one (1024^3 MatMul
    19.7 -> 23 GFLOP/s on lavapipe). Off: they are read from their buffers.

    ``vec4_stores`` (gpu-compute): matmul epilogues store a vec4 per group of four output columns where every
    stored group is 16-byte aligned and contiguous. Off: one store per element.

    ``texture_inputs`` (gpu-compute, with ``texture_operands``): convolutions copy their input planes (1x1)
    or im2col columns into a texture first; the matmul then runs ~25% faster on lavapipe, far more than the
    copy costs (ResNet-50: 569 -> 517 ms for the 1x1 layers alone). Off: they read the input's buffer.

    ``linear_inputs`` (gpu-compute, with ``texture_inputs``): 1x1 stride-1 inputs reach their texture by a
    transfer copy into a linear texture rather than a copy shader (a memcpy on lavapipe, ~10x cheaper).
    Off: the copy shader.

    ``cpu_winograd`` (cpu, and the GPU backends' host layers): 3x3 stride-1 float32 convolutions may run
    as Winograd F(4x4, 3x3) where it was measured to win (up to 2.3x over im2col). Its transforms round
    differently from a direct sum (within the float32 tolerance of every test, but larger). Off: im2col
    and kn2row only, the forms whose rounding is a direct sum's.
    """

    texture_operands: bool = True
    linear_operands: bool = True
    vec4_stores: bool = True
    texture_inputs: bool = True
    linear_inputs: bool = True
    cpu_winograd: bool = True

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not isinstance(value, bool):
                raise InputError(f"KernelOptions({name}={value!r}): {name} must be True or False")


DEFAULT_KERNEL_OPTIONS = KernelOptions()


def kernel_options(ctx: Any) -> KernelOptions:
    """The kernel choices of the program a CPU kernel runs in (its context's ``kernels``), the defaults
    outside one."""
    options = getattr(ctx, "kernels", None)
    return options if isinstance(options, KernelOptions) else DEFAULT_KERNEL_OPTIONS
