"""gpu-compute backend: tensors in storage buffers, layers as WGSL compute dispatches.

What is compute-specific lives here: the ``Recorder`` that the ops' gpu-compute builders (``ops/*_gpu.py``)
record their dispatches and copies with, and ``ComputeProgram``, the shared GPU program
(``backends/gpu/program.py``) with that recorder and a compute command stream.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from wgsentis.backends.gpu.device import wgsl_source
from wgsentis.backends.gpu.dtypes import GPU_TYPES, TooLargeForDevice, gpu_type_of, narrowing_expr
from wgsentis.backends.gpu.faults import IndexCheck, reserve_checks
from wgsentis.backends.gpu.memory import UniformArena
from wgsentis.backends.gpu.program import GPUProgram
from wgsentis.backends.gpu.steps import Copy, Dispatch, TextureCopy
from wgsentis.backends.gpu.streams import ComputeStream
from wgsentis.backends.gpu.tensors import (
    LINEAR_TEXELS,
    LOOP_ALLOWANCE,
    Allocation,
    GTensor,
    GTexture,
    binding_size,
    fold_groups,
    pack_params,
    pipeline_key,
)
from wgsentis.errors import DeviceError
from wgsentis.model import Layer

BACKEND = "gpu-compute"


class Recorder:
    """What a gpu-compute program builder uses: allocate outputs, make views, upload constants, dispatch."""

    def __init__(self, program: ComputeProgram) -> None:
        self.program = program
        self.ctx = program.ctx
        self.layer: Layer | None = None
        self.layer_index = -1
        self._scratch_layer = -2  # the layer _scratch_held belongs to
        self._scratch_held: list[GTexture] = []
        self.steps: list[Dispatch | Copy] = []
        self.layer_allocs: list[Allocation] = []  # made by the current layer's builder
        self.scope: Any = None  # a control-flow builder's outer scope (GPUProgram.record_subgraph sets it)
        self.index_checks: list[IndexCheck] = []  # the recording's fault slots (the plan's)

    # tensors
    def alloc(self, shape: tuple[int, ...] | list[int], dtype: Any = np.float32) -> GTensor:
        """A new device tensor for an output (or a temporary) of the current layer."""
        dtype = np.dtype(dtype)
        if dtype not in GPU_TYPES:
            raise DeviceError(f"dtype {dtype.name} cannot live on the GPU")
        t = GTensor(None, tuple(shape), dtype)
        if t.nbytes > self.ctx.max_binding:
            raise TooLargeForDevice(f"tensor of shape {list(t.shape)} ({t.nbytes} bytes) exceeds the device's "
                                    f"binding limit of {self.ctx.max_binding} bytes")
        layer = self.layer
        t.alloc = self.program.new_allocation(
            t.nbytes, f"an output {list(t.shape)} of layer '{layer.name}' ({layer.op_type})" if layer else "", layer)
        self.layer_allocs.append(t.alloc)
        return t

    def view(self, t: GTensor, shape: tuple[int, ...] | list[int], dtype: Any = None) -> GTensor:
        """The same data under another shape (Reshape, Flatten, Squeeze, Unsqueeze): no copy."""
        new = GTensor(t.alloc, tuple(shape), t.dtype if dtype is None else dtype, host=None, chunks=t.chunks)
        if new.size != t.size:
            raise ValueError(f"view of {list(t.shape)} as {list(shape)} changes the element count")
        if gpu_type_of(new.dtype) != t.gpu_type:
            raise ValueError(f"view of {t.dtype.name} as {new.dtype.name} changes the storage type")
        if t.host is not None:
            new.host = t.host.reshape(new.shape).astype(new.dtype, copy=False)
        return new

    def retype(self, t: GTensor, dtype: Any) -> GTensor:
        """The same words under another logical dtype of the same storage (a narrow type and its wide one)."""
        return self.view(t, t.shape, dtype)

    def narrowed(self, t: GTensor, dtype: Any) -> GTensor:
        """``t`` (a wide float32/int32 result) brought into narrow ``dtype``'s values: float16 rounding or
        integer wrap-around, as a numpy conversion does."""
        dtype = np.dtype(dtype)
        y = self.alloc(t.shape, dtype)
        self.dispatch("compute/unary.wgsl", [t], [y], [t.size, 0.0, 0.0, 0.0], t.size,
                      subs={"EXPR": narrowing_expr(dtype), "TX": t.gpu_type, "TY": y.gpu_type}, workgroup=256)
        return y

    def copy(self, src: GTensor, src_offset: int, dst: GTensor, dst_offset: int, count: int) -> None:
        """Record a copy of ``count`` elements from ``src`` (element offset ``src_offset``) into ``dst``."""
        if count <= 0:
            return
        if src.alloc is None or dst.alloc is None:
            raise DeviceError("copy: a split tensor cannot be copied as one slab")
        if (src_offset + count) * 4 > src.alloc.reserved or (dst_offset + count) * 4 > dst.alloc.reserved:
            raise DeviceError(f"copy of {count} elements runs past a buffer (offsets {src_offset}, {dst_offset})")
        self.steps.append(Copy(src.alloc, 4 * src_offset, dst.alloc, 4 * dst_offset, 4 * count, self.layer_index))

    def copy_to_texture(self, src: GTensor, tex: GTexture) -> None:
        """Record a transfer copy of all of ``src`` (float32, a multiple of 4 elements) into the linear
        texture ``tex`` (``scratch_texture``)."""
        if src.alloc is None or src.nbytes % 16 or tex.shape[1] != 4 * LINEAR_TEXELS or \
                src.nbytes > self.program.scratch.rows(tex) * LINEAR_TEXELS * 16:
            raise DeviceError(f"copy of {src.nbytes} bytes into texture '{tex.name}' {list(tex.shape)}: "
                              "not a linear texture that holds it")
        if src.nbytes:
            self.steps.append(TextureCopy(src.alloc, 0, tex, 0, src.nbytes, self.layer_index))

    def upload(self, value: np.ndarray, name: str = "") -> GTensor:
        """A host array as a device tensor (constants are uploaded once per program and kept)."""
        return self.program.constants.tensor(value, name)

    def derived(self, key: tuple, sources: tuple[np.ndarray, ...], make: Any) -> np.ndarray:
        """A host array computed from constants (a repacked or transposed weight), once per program: see
        ``ConstantStore.derived``. Freed with the program."""
        return self.program.constants.derived(key, sources, make)

    def scratch_texture(self, rows: int, cols: int, name: str = "") -> GTexture | None:
        """A linear rgba32float texture holding at least ``rows * cols`` floats in buffer order (LINEAR_TEXELS
        texels per texture row; ``copy_to_texture`` fills one from a buffer, programs store with
        wgsl/common/linear_texture.wgsl), for an operand computed on the GPU and consumed by this layer. Each
        call of a layer gets its own texture (the program's scratch slots, shared with every other layer);
        None when it exceeds the device limits."""
        if self._scratch_layer != self.layer_index:
            self._scratch_layer, self._scratch_held = self.layer_index, []
        texels = -(-rows * cols // 4)
        tex = self.program.scratch.get(len(self._scratch_held), texels, name)
        if tex is not None and not self.program.tracing:
            self.program.scratch.realize()  # a recorded run writes it now
        if tex is not None:
            self._scratch_held.append(tex)
            self.program.note_scratch(-(-texels // LINEAR_TEXELS) * LINEAR_TEXELS * 16)
        return tex

    @property
    def half_weights(self) -> bool:
        """Whether constant matmul operands are held in half precision (Worker precision="float16")."""
        return self.program.precision == "float16"

    def upload_half(self, value: np.ndarray, name: str = "") -> GTensor:
        """A constant float32 matrix rounded to float16 (see ``ConstantStore.half``)."""
        return self.program.constants.half(value, name)

    def texture(self, value: np.ndarray, name: str = "", *, half: bool = False) -> GTexture | None:
        """A constant (rows, cols) float32 matrix as an rgba32float texture (rgba16float when ``half``),
        uploaded once per program and kept; None when it exceeds the device's texture size limit."""
        return self.program.constants.texture(value, name, half=half)

    def check_indices(self, bounds: list[int], what: str = "indices", value_error: str = "") -> int:
        """A fault slot per bound for this layer's data-driven indices (``faults.reserve_checks``); the checking
        dispatch binds the fault buffer (``dispatch(..., faults=True)``). ``value_error``: one slot
        for values the program must refuse instead (``value_fault``), raising that CPU kernel error text."""
        return reserve_checks(self, bounds, what, value_error)

    def loops_fit(self, passes: int) -> bool:
        """Whether a kernel whose invocations each make at most ``passes`` loop passes (``loop_passes``; the
        uncounted rank-bounded loops are LOOP_ALLOWANCE) runs them all on this device: False past the driver's
        per-invocation limit (``GPUContext.max_loop_iterations``), where its loops would end early, silently."""
        limit = self.ctx.max_loop_iterations
        return limit is None or passes + LOOP_ALLOWANCE <= limit

    # dispatch
    def dispatch(self, shader: str, inputs: list[GTensor], outputs: list[GTensor], params: list[int | float],
                 invocations: int | tuple[int, int, int], *, workgroup: int = 64,
                 constants: dict[str, int | float] | None = None, subs: dict[str, str] | None = None,
                 label: str = "", textures: list[GTexture] | None = None, faults: bool = False,
                 loops: int = 0) -> None:
        """Record one dispatch of ``wgsl/<shader>``.

        Bindings follow one order: inputs (read-only storage), outputs (read-write storage), the
        uniform parameter block, then any constant textures, then (``faults``: a program that checks
        indices, see ``check_indices``) the program's fault buffer. ``invocations`` is a total count
        (folded into a 2-D grid above the per-dimension limit) or an explicit workgroup grid.
        ``loops``: the most loop passes one invocation makes (``loop_passes``); past what the device runs
        (``loops_fit``) the layer falls back to its CPU kernel.
        """
        if loops and not self.loops_fit(loops):
            raise TooLargeForDevice(f"'{shader}': {loops} loop passes per invocation exceed the device's limit of "
                                    f"{self.ctx.max_loop_iterations}")
        if isinstance(invocations, tuple):
            groups = invocations
            if 0 in groups:
                return
        else:
            if invocations <= 0:
                return
            groups = fold_groups(math.ceil(invocations / workgroup), self.ctx.max_workgroups)
        if any(g > self.ctx.max_workgroups for g in groups):
            raise DeviceError(f"dispatch grid {groups} exceeds {self.ctx.max_workgroups} per dimension")
        # A tensor this dispatch cannot bind (split in row blocks, or over the binding limit) makes the layer
        # run on the host: placement turns TooLargeForDevice into a fallback, never a rejected bind group.
        sizes = [binding_size(t, self.ctx.max_binding) for t in [*inputs, *outputs]]
        consts = {"WG": workgroup, **(constants or {})}
        key = pipeline_key(shader, subs or {}, consts, [(t.gpu_type, t.ndim) for t in inputs]
                           + [("texture", 2) for _ in textures or []], faults=faults)
        source = wgsl_source(shader, subs)
        layer = self.layer
        label = label or (f"{layer.name} ({layer.op_type})" if layer is not None else shader)
        pipeline, bgl = self.ctx.pipeline(key, source, consts, label)
        ubuf, uoffset = self.program.uniforms().allocate(pack_params(params, shader))
        extra: list[Any] = [{"buffer": ubuf, "offset": uoffset, "size": UniformArena.SLOT}]
        extra.extend(textures or [])  # bound by their current view: a scratch slot may grow after this
        if faults:
            buf = self.program.faults.buffer
            extra.append({"buffer": buf, "offset": 0, "size": buf.size})
        step = Dispatch(pipeline, None, groups, self.layer_index, bgl,
                        [(t.alloc, size) for t, size in zip([*inputs, *outputs], sizes, strict=True)], extra, label,
                        len(inputs))
        if not self.program.tracing:  # a traced plan's steps are bound once the planner has laid it out
            try:
                step.bind(self.ctx.device)
            except Exception as exc:
                raise DeviceError(f"{label}: bind group for '{shader}' rejected: {exc}") from None
        self.steps.append(step)


class ComputeProgram(GPUProgram):
    """A graph compiled for the gpu-compute backend."""

    backend = BACKEND

    def make_recorder(self) -> Recorder:
        return Recorder(self)

    def make_stream(self, checked: bool) -> ComputeStream:
        return ComputeStream(self.ctx.device, self.debug_groups, checked=checked, native=self.native_calls)


__all__ = ["BACKEND", "ComputeProgram", "Recorder"]
