"""What a recorded plan is made of: dispatches (with the bindings to rebuild their bind groups once the planner
has moved their tensors into arenas), buffer and texture copies, fallback layers, transfers, and the Plan."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from wgsentis.backends.gpu.bind_groups import create_bind_group
from wgsentis.backends.gpu.faults import IndexCheck
from wgsentis.backends.gpu.tensors import LINEAR_TEXELS, Allocation, GTensor, GTexture


@dataclass
class Dispatch:
    """One compute dispatch of a layer, ready to replay. ``storage`` are its storage bindings in binding order
    (allocation, bytes bound), ``offsets`` the byte offset of each binding within its allocation (a window of a
    larger tensor, ``Recorder.window``; none given: 0), ``extra`` the entries after them (uniforms, textures,
    the fault buffer): ``bind`` (re)makes the bind group from them wherever the allocations now live (an
    allocation's own offset in its arena, a multiple of 256, plus the window's)."""

    pipeline: Any
    bind_group: Any
    groups: tuple[int, int, int]
    layer: int
    layout: Any = field(default=None, repr=False)
    storage: list[tuple[Allocation, int]] = field(default_factory=list, repr=False)
    extra: list[Any] = field(default_factory=list, repr=False)
    label: str = ""
    reads: int = 0  # how many of ``storage`` are read-only (the inputs, bound first)
    offsets: list[int] = field(default_factory=list, repr=False)
    params: Any = field(default=None, repr=False)  # its uniform words (layer_reuse stamps them into a new slot)

    def bind(self, device: Any, native: bool = True) -> None:
        offsets = self.offsets or [0] * len(self.storage)
        resources: list[Any] = [(a.buffer, a.offset + within, size)
                                for (a, size), within in zip(self.storage, offsets, strict=True)]
        resources.extend(r.view if isinstance(r, GTexture) else r for r in self.extra)
        self.bind_group = create_bind_group(device, self.layout, resources, self.label, native)


@dataclass
class Draw:
    """One draw of a pixel program (a full-screen triangle) into ``targets`` (GTextures, one per color
    attachment), with the bindings to rebuild its bind group like a Dispatch's."""

    pipeline: Any
    bind_group: Any
    targets: list[Any]
    layer: int
    layout: Any = field(default=None, repr=False)
    extra: list[Any] = field(default_factory=list, repr=False)  # textures (GTexture), uniforms, ...
    label: str = ""
    # The render pass descriptor a replay begins its pass with, built once (streams.RenderStream): (the target
    # views it was built for, the descriptor).
    pass_descriptor: Any = field(default=None, repr=False)
    # The texels (width, height) from the targets' top-left corner the draw covers: its outputs' layout. A plan
    # may lay a tensor in a larger texture of its format (PixelProgram.layout_memory); the pass's viewport is
    # then this region, never the whole attachment.
    region: tuple[int, int] = (0, 0)
    # The first texel row of the region (a draw that fills some rows of its output), and whether the pass keeps
    # the targets' texels instead of clearing them: an output drawn in row chunks, each chunk after the first.
    origin: int = 0
    load: bool = False
    params: Any = field(default=None, repr=False)  # the words of its parameter block (layer_reuse templates)

    def bind(self, device: Any, native: bool = True) -> None:
        resources = [r.view if isinstance(r, GTexture) else r for r in self.extra]
        self.bind_group = create_bind_group(device, self.layout, resources, self.label, native)


@dataclass
class Copy:
    """A buffer-to-buffer copy of a layer (a contiguous slab: Concat, Split, Slice), outside any pass; a memcpy
    where a copy shader would cost a dispatch. Offsets are bytes from the start of each allocation."""

    src: Allocation
    src_offset: int
    dst: Any  # Allocation (a TextureCopy's: a GTexture)
    dst_offset: int
    nbytes: int
    layer: int

    def encode(self, encoder: Any, native: bool = True) -> None:
        encoder.copy_buffer_to_buffer(self.src.buffer, self.src.offset + self.src_offset, self.dst.buffer,
                                      self.dst.offset + self.dst_offset, self.nbytes)

    def moved(self) -> None:
        """Its allocations moved (the planner's arenas): forget anything derived from where they were."""


@dataclass
class TextureCopy(Copy):
    """A buffer-to-texture copy of ``nbytes`` (a multiple of 16) into a linear texture (``dst``), as whole
    texture rows and one partial row."""

    native: Any = field(default=None, repr=False, compare=False)  # see _native_copies

    def regions(self) -> list[tuple[int, int, int, int]]:
        """(buffer offset, first texture row, texels per row, rows) of each copy command."""
        row_bytes = LINEAR_TEXELS * 16
        rows, tail = divmod(self.nbytes, row_bytes)
        base = self.src.offset + self.src_offset
        out = [(base, 0, LINEAR_TEXELS, rows)] if rows else []
        if tail:
            out.append((base + rows * row_bytes, rows, tail // 16, 1))
        return out

    def encode(self, encoder: Any, native: bool = True) -> None:
        """Record the copy: through wgpu-native's calls with their structs built once (``native`` and this
        wgpu-py allows), else through wgpu-py's public method."""
        if native and self.native is None:
            self.native = _native_copies(self) or False
        if native and self.native:
            handle = encoder._internal
            for call, args in self.native:
                call(handle, *args)
            return
        for offset, row, texels, rows in self.regions():
            encoder.copy_buffer_to_texture(
                {"buffer": self.src.buffer, "offset": offset, "bytes_per_row": LINEAR_TEXELS * 16,
                 "rows_per_image": rows},
                {"texture": self.dst.texture, "origin": (0, row, 0)}, (texels, rows, 1))

    def moved(self) -> None:
        self.native = None  # rebuilt for the buffer (and texture) where they are now


def _native_copies(copy: TextureCopy) -> list[tuple[Callable[..., Any], tuple[Any, ...]]] | None:
    """The wgpu-native calls of ``copy`` with their argument structs built once. wgpu-py builds three
    structs from dicts on every copy_buffer_to_texture (~35 us of host time, more than three dispatches),
    and a replay encodes the same copy every run. Filled field by field with cffi (wgpu-py's struct helpers
    took most of a new plan's first replay: each copy is built once per plan); None (the public method then)
    where this wgpu-py lacks its structs."""
    try:
        from wgpu.backends.wgpu_native import _api

        ffi, all_aspects = _api.ffi, _api.enummap["TextureAspect.all"]
        calls = []
        for offset, row, texels, rows in copy.regions():
            source = ffi.new("WGPUTexelCopyBufferInfo *")
            source.layout.offset, source.layout.bytesPerRow = offset, LINEAR_TEXELS * 16
            source.layout.rowsPerImage, source.buffer = rows, copy.src.buffer._internal
            destination = ffi.new("WGPUTexelCopyTextureInfo *")
            destination.texture, destination.mipLevel, destination.aspect = copy.dst.texture._internal, 0, \
                all_aspects
            destination.origin.x, destination.origin.y, destination.origin.z = 0, row, 0
            size = ffi.new("WGPUExtent3D *")
            size.width, size.height, size.depthOrArrayLayers = texels, rows, 1
            calls.append((_api.libf.wgpuCommandEncoderCopyBufferToTexture, (source, destination, size)))
        return calls
    except Exception:  # any mismatch with this wgpu-py: the public method instead
        return None


@dataclass
class Fallback:
    """A layer run by its numpy kernel between GPU segments (download, run, upload).

    ``args`` are the values it read when recorded (device tensors hold the same data at this
    point of every replay); ``targets`` the device tensors its outputs are uploaded into.
    """

    layer: int
    args: list[Any]
    targets: list[GTensor | None]
    captured: dict[str, Any] = field(default_factory=dict)  # outer-scope values its subgraphs read


@dataclass
class Transfer:
    """One upload or download, as ``stats()`` and the profiler report it."""

    kind: str  # "upload" | "download"
    name: str
    nbytes: int
    layer: str = ""
    seconds: float = 0.0


class PlanInvalid(Exception):  # noqa: N818 - internal control flow, never reaches users
    """A replay saw a value or shape the plan was not recorded for; record again."""


@dataclass(frozen=True)
class Placement:
    """Where one layer runs and why: ``device`` is "gpu", "host" (planned on the host: its inputs are host
    values, so no sync) or "fallback" (its numpy kernel between GPU segments, with a download and upload)."""

    layer: str
    op_type: str
    device: str
    reason: str


@dataclass
class Plan:
    """A recorded run for one input signature, its intermediates laid out in arenas by the planner."""

    steps: list[Dispatch | Copy | Fallback] = field(default_factory=list)
    input_tensors: dict[str, GTensor] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)  # name -> GTensor or host value
    placements: list[Placement] = field(default_factory=list)
    host_read_inputs: dict[str, Any] = field(default_factory=dict)  # inputs whose values it baked in
    index_checks: list[IndexCheck] = field(default_factory=list)  # its fault slots, in slot order
    allocations: list[Allocation] = field(default_factory=list)  # every intermediate (and input) it holds
    arenas: list[Any] = field(default_factory=list)  # the device buffers they live in
    arena_bytes: int = 0  # device bytes of the arenas
    peak_live_bytes: int = 0  # the largest set of intermediates (and the layer's scratch) alive at once
    staging: Any = None  # its readback's staging buffers, kept between runs (readback.StagingPool)
    uniforms: Any = None  # its dispatches' parameter blocks (memory.UniformArena), written once when recorded
    host_values: Any = None  # the host arrays its builders uploaded (memory.PlanValues), written once too
    trace: Any = None  # a full trace's layers (resize.TraceRecord), from which later sizes are planned
    base: Plan | None = None  # a re-sized plan: the plan whose steps, arenas and uniforms it shares (resize.py)
    prepared_ahead: bool = False  # traced ahead of the run of its size, not yet replayed (lookahead.py)

    @staticmethod
    def summary(plan: Plan | None) -> dict[str, Any]:
        """Where each layer of ``plan`` runs and why, and the order of its GPU work and fallbacks (``segments``:
        ("gpu" | "fallback", layer index) per step group, in submission order); empty lists for None."""
        if plan is None:
            return {"placements": [], "gpu_layers": [], "cpu_layers": [], "fallback_layers": [],
                    "dispatched_layers": [], "segments": []}
        segments: list[tuple[str, int]] = []
        for step in plan.steps:
            kind = "fallback" if isinstance(step, Fallback) else "gpu"
            if not segments or segments[-1] != (kind, step.layer):
                segments.append((kind, step.layer))
        return {"placements": [{"layer": p.layer, "op": p.op_type, "device": p.device, "reason": p.reason}
                               for p in plan.placements],
                "gpu_layers": plan.gpu_layers, "cpu_layers": plan.cpu_layers,
                "fallback_layers": plan.fallback_layers,
                "dispatched_layers": sorted({s.layer for s in plan.steps if isinstance(s, Dispatch | Draw)}),
                "segments": segments}

    @property
    def gpu_layers(self) -> list[str]:
        return self.layers_on("gpu")

    @property
    def cpu_layers(self) -> list[str]:
        """Layers planned on the host."""
        return self.layers_on("host")

    @property
    def fallback_layers(self) -> list[str]:
        return self.layers_on("fallback")

    def layers_on(self, device: str) -> list[str]:
        """Names of the layers placed on ``device`` ("gpu", "host", "fallback"), in graph order."""
        return [p.layer for p in self.placements if p.device == device]
