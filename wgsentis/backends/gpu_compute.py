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
    fits_binding,
    fold_groups,
    pack_params,
    pipeline_key,
    window_grain,
)
from wgsentis.errors import DeviceError
from wgsentis.ir import Layer

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
        self.made_and_kept: list[Allocation] = []  # the last builder's own outputs (GPUProgram._place)
        # The scratch textures the current layer's builder asked for: (slot, texels, name, texture) (layer_reuse).
        self.scratch_calls: list[tuple[int, int, str, GTexture]] = []
        self.index_checks: list[IndexCheck] = []  # the recording's fault slots (the plan's)
        self._tile_allocs: list[Allocation] | None = None  # temporaries of the tiles so far (begin_tile)
        self._tile_cursor = 0
        self._tile_layer = -2  # the layer _tile_allocs belongs to

    # tensors
    def alloc(self, shape: tuple[int, ...] | list[int], dtype: Any = np.float32) -> GTensor:
        """A new device tensor for an output (or a temporary) of the current layer. It may be as large as the
        device's largest buffer: past the binding limit, a program binds windows of it (``window``), and one
        that binds it whole makes the layer fall back (``dispatch``)."""
        dtype = np.dtype(dtype)
        if dtype not in GPU_TYPES:
            raise DeviceError(f"dtype {dtype.name} cannot live on the GPU")
        t = GTensor(None, tuple(shape), dtype)
        if self._tile_allocs is not None and self._tile_layer != self.layer_index:
            self.end_tiles()  # left open by a layer that gave up: never another layer's temporaries
        if self._tile_allocs is not None:  # a tile after the first: the earlier tiles' temporaries, in order
            reused = self._tile_allocs[self._tile_cursor] if self._tile_cursor < len(self._tile_allocs) else None
            if reused is not None and reused.nbytes >= t.nbytes:
                self._tile_cursor += 1
                t.alloc = reused
                return t
        # Past both limits the layer falls back; a device whose buffers are smaller than its bindings reports
        # a tensor it cannot make as out of memory (``new_allocation``), naming it.
        if t.nbytes > max(self.ctx.max_binding, self.ctx.max_buffer):
            raise TooLargeForDevice(f"tensor of shape {list(t.shape)} ({t.nbytes} bytes) exceeds the device's "
                                    f"buffer size limit of {self.ctx.max_buffer} bytes")
        layer = self.layer
        t.alloc = self.program.new_allocation(
            t.nbytes, f"an output {list(t.shape)} of layer '{layer.name}' ({layer.op_type})" if layer else "", layer)
        self.layer_allocs.append(t.alloc)
        if self._tile_allocs is not None:
            self._tile_allocs[self._tile_cursor:self._tile_cursor + 1] = [t.alloc]
            self._tile_cursor += 1
        return t

    def begin_tile(self) -> None:
        """The current layer starts another tile of its work (a program whose operands pass the binding limit
        runs tile after tile): the temporaries (``alloc``) and scratch textures (``scratch_texture``) the tile
        asks for are those the tiles before it had, in the order asked for, where large enough. A tile's work is
        ordered after theirs, so what they held is free by then. ``end_tiles`` closes the layer's tiles."""
        if self._tile_allocs is None or self._tile_layer != self.layer_index:
            self._tile_allocs, self._tile_layer = [], self.layer_index
        self._tile_cursor = 0
        self._scratch_layer, self._scratch_held = self.layer_index, []

    def end_tiles(self) -> None:
        """The current layer's tiles are recorded (see ``begin_tile``): temporaries are its own again."""
        self._tile_allocs = None
        self._tile_cursor = 0

    def view(self, t: GTensor, shape: tuple[int, ...] | list[int], dtype: Any = None) -> GTensor:
        """The same data under another shape (Reshape, Flatten, Squeeze, Unsqueeze): no copy."""
        new = GTensor(t.alloc, tuple(shape), t.dtype if dtype is None else dtype, host=None, chunks=t.chunks,
                      first=t.first)
        if new.size != t.size:
            raise ValueError(f"view of {list(t.shape)} as {list(shape)} changes the element count")
        if gpu_type_of(new.dtype) != t.gpu_type:
            raise ValueError(f"view of {t.dtype.name} as {new.dtype.name} changes the storage type")
        if t.host is not None:
            new.host = t.host.reshape(new.shape).astype(new.dtype, copy=False)
        return new

    @property
    def window_align(self) -> int:
        """Bytes a window's offset is a multiple of: the device's storage-offset alignment, and at least 16 (a
        window may reach a linear texture by a transfer copy, whose offsets are whole texels)."""
        return max(self.ctx.storage_align, 16)

    def window(self, t: GTensor, first: int, shape: tuple[int, ...] | list[int]) -> GTensor:
        """Elements ``first`` .. ``first + prod(shape)`` of ``t`` as a tensor of ``shape`` that a dispatch binds
        from there on (no copy): how a program whose operands pass the binding limit binds each tile's part of
        them. ``4 * first`` must be a multiple of ``window_align`` (``window_grain`` gives tile steps that keep
        it one); the window is bound up to the binding limit, so a part past it is refused when dispatched."""
        if t.alloc is None:
            raise TooLargeForDevice(f"tensor '{t.name}' {list(t.shape)} is split in row blocks: no window of it")
        new = GTensor(t.alloc, tuple(shape), t.dtype, t.name, first=t.first + int(first))
        if first < 0 or first + new.size > t.size:
            raise ValueError(f"window [{first}, {first + new.size}) of {list(t.shape)} runs past the tensor")
        if (4 * new.first) % self.window_align:
            raise ValueError(f"window at element {new.first}: its byte offset is not a multiple of "
                             f"{self.window_align}")
        return new

    def element_blocks(self, count: int, tensors: list[GTensor]) -> list[tuple[int, int]]:
        """(first, count) ranges covering ``count`` elements: all of them where every one of ``tensors`` fits a
        binding whole, else blocks whose windows (``window``) of each fit one: the most elements the binding
        limit holds, a multiple of four (vec4 kernels) and of the window alignment."""
        if all(fits_binding(t, self.ctx.max_binding) for t in tensors) or count <= 0:
            return [(0, count)]
        grain = math.lcm(4, window_grain(self.window_align, 1))
        per = self.ctx.max_binding // 16 * 16 // 4 // grain * grain
        return [(first, min(per, count - first)) for first in range(0, count, per)]

    def retype(self, t: GTensor, dtype: Any) -> GTensor:
        """The same words under another logical dtype of the same storage (a narrow type and its wide one)."""
        return self.view(t, t.shape, dtype)

    def narrowed(self, t: GTensor, dtype: Any) -> GTensor:
        """``t`` (a wide float32/int32 result) brought into narrow ``dtype``'s values: float16 rounding or
        integer wrap-around, as a numpy conversion does."""
        dtype = np.dtype(dtype)
        y = self.alloc(t.shape, dtype)
        for first, count in self.element_blocks(t.size, [t, y]):  # windows of both past the binding limit
            part_t, part_y = (t, y) if count == t.size else (self.window(t, first, (count,)),
                                                             self.window(y, first, (count,)))
            self.dispatch("compute/unary.wgsl", [part_t], [part_y], [count, 0.0, 0.0, 0.0], count,
                          subs={"EXPR": narrowing_expr(dtype), "TX": t.gpu_type, "TY": y.gpu_type}, workgroup=256)
        return y

    def copy(self, src: GTensor, src_offset: int, dst: GTensor, dst_offset: int, count: int) -> None:
        """Record a copy of ``count`` elements from ``src`` (element offset ``src_offset``) into ``dst``."""
        if count <= 0:
            return
        if src.alloc is None or dst.alloc is None:
            raise DeviceError("copy: a split tensor cannot be copied as one slab")
        src_offset += src.first  # offsets count from a window's first element
        dst_offset += dst.first
        if (src_offset + count) * 4 > src.alloc.reserved or (dst_offset + count) * 4 > dst.alloc.reserved:
            raise DeviceError(f"copy of {count} elements runs past a buffer (offsets {src_offset}, {dst_offset})")
        self.steps.append(Copy(src.alloc, 4 * src_offset, dst.alloc, 4 * dst_offset, 4 * count, self.layer_index))

    def copy_to_texture(self, src: GTensor, tex: GTexture) -> None:
        """Record a transfer copy of all of ``src`` (float32, a multiple of 4 elements) into the linear
        texture ``tex`` (``scratch_texture``)."""
        if src.alloc is None or src.nbytes % 16 or (4 * src.first) % 16 or tex.shape[1] != 4 * LINEAR_TEXELS or \
                src.nbytes > self.program.scratch.rows(tex) * LINEAR_TEXELS * 16:
            raise DeviceError(f"copy of {src.nbytes} bytes into texture '{tex.name}' {list(tex.shape)}: "
                              "not a linear texture that holds it")
        if src.nbytes:
            self.steps.append(TextureCopy(src.alloc, 4 * src.first, tex, 0, src.nbytes, self.layer_index))

    def upload(self, value: np.ndarray, name: str = "") -> GTensor:
        """A host array as a device tensor: the model's constants are uploaded once per program and kept, other
        values (computed for this run's signature) once per plan, kept with it (``GPUProgram.host_values_for``)."""
        return (self.program.host_values_for(value) or self.program.constants).tensor(value, name)

    def static(self, value: np.ndarray) -> np.ndarray:
        """``value``, a builder's module-level array, marked as the program's to keep (``ConstantStore.static``)."""
        return self.program.constants.static(value)

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
        slot, texels = len(self._scratch_held), -(-rows * cols // 4)
        tex = self.scratch_slot(slot, texels, name)
        if tex is not None:
            self._scratch_held.append(tex)
            self.scratch_calls.append((slot, texels, name, tex))
        return tex

    def scratch_slot(self, slot: int, texels: int, name: str = "") -> GTexture | None:
        """The program's scratch texture ``slot`` holding at least ``texels`` texels for the current layer (see
        ``scratch_texture``; ``layer_reuse`` asks for a template's slots again through here), None past the
        device limits."""
        tex = self.program.scratch.get(slot, texels, name)
        if tex is not None and not self.program.tracing:
            self.program.scratch.realize()  # a recorded run writes it now
        if tex is not None:
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

    def check_indices(self, bounds: list[int], what: str = "indices", value_error: str = "",
                      negative_ok: bool = True) -> int:
        """A fault slot per bound for this layer's data-driven indices (``faults.reserve_checks``); the checking
        dispatch binds the fault buffer (``dispatch(..., faults=True)``). ``value_error``: one slot
        for values the program must refuse instead (``value_fault``), raising that CPU kernel error text."""
        return reserve_checks(self, bounds, what, value_error, negative_ok)

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
        # A window is bound from its first element (Recorder.window).
        sizes = [binding_size(t, self.ctx.max_binding) for t in [*inputs, *outputs]]
        offsets = [4 * t.first for t in [*inputs, *outputs]]
        consts = {"WG": workgroup, **(constants or {})}
        key = pipeline_key(shader, subs or {}, consts, [(t.gpu_type, t.ndim) for t in inputs]
                           + [("texture", 2) for _ in textures or []], faults=faults)
        layer = self.layer
        label = label or (f"{layer.name} ({layer.op_type})" if layer is not None else shader)
        pipeline, bgl = self.ctx.pipeline(key, lambda: wgsl_source(shader, subs), consts, label, owner=self.program)
        words = pack_params(params, shader)
        ubuf, uoffset = self.program.uniforms().allocate(words)
        extra: list[Any] = [{"buffer": ubuf, "offset": uoffset, "size": UniformArena.SLOT}]
        extra.extend(textures or [])  # bound by their current view: a scratch slot may grow after this
        if faults:
            buf = self.program.faults.buffer
            extra.append({"buffer": buf, "offset": 0, "size": buf.size})
        step = Dispatch(pipeline, None, groups, self.layer_index, bgl,
                        [(t.alloc, size) for t, size in zip([*inputs, *outputs], sizes, strict=True)], extra, label,
                        len(inputs), offsets if any(offsets) else [], words)
        if not self.program.tracing:  # a traced plan's steps are bound once the planner has laid it out
            try:
                step.bind(self.ctx.device, self.program.native_calls)
            except Exception as exc:
                raise DeviceError(f"{label}: bind group for '{shader}' rejected: {exc}") from None
        self.steps.append(step)


class ComputeProgram(GPUProgram):
    """A graph compiled for the gpu-compute backend."""

    backend = BACKEND
    tiles_past_binding = True

    def make_recorder(self) -> Recorder:
        return Recorder(self)

    def make_stream(self, checked: bool) -> ComputeStream:
        return ComputeStream(self.ctx.device, self.debug_groups, checked=checked, native=self.native_calls)


__all__ = ["BACKEND", "ComputeProgram", "Recorder"]
