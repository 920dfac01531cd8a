"""gpu-compute backend: layers as WGSL compute dispatches recorded into command encoders.

A run is *recorded* the first time a worker sees an input signature (shapes, dtypes and the
host-read values): each layer either runs its GPU program builder (dispatches, planned buffers),
runs on the host at plan time (small shape/axes computations whose inputs are all host values),
or falls back to its numpy kernel with an explicit sync (download inputs, run, upload outputs).
The recording is kept as a *plan*; later runs with the same signature replay it: upload inputs,
then per layer only set_pipeline / set_bind_group / dispatch, then copy outputs to staging
buffers that are mapped asynchronously.
"""

from __future__ import annotations

import functools
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from wgsentis.backends.cpu import KernelContext, _Step
from wgsentis.backends.device import GPUContext, get_context, map_for_reading, wait_mapped, wgsl_source
from wgsentis.errors import PASS_THROUGH_ERRORS, DeviceError, IndexOutOfRangeError, LayerError, WgSentisError
from wgsentis.model import Graph, Layer, captured_names
from wgsentis.ops import registry

# Logical dtype -> how it is stored on the GPU (4 bytes per element for all of them).
GPU_TYPES: dict[np.dtype, str] = {
    np.dtype(np.float32): "f32",
    np.dtype(np.int32): "i32",
    np.dtype(np.int64): "i32",  # range-checked at upload; most adapters lack 64-bit integers
    np.dtype(np.bool_): "u32",
}
PRECISIONS = ("float32", "float16")  # Worker(precision=...): how constant matmul operands are held
SHAPE_ONLY_OPS = frozenset({"Shape", "Size"})  # read their input's shape, never its data
MAX_PLANS = 16  # recorded plans (input signatures) a program keeps, least recently used evicted first
PARAM_WORDS = 128  # uniform words per dispatch (32 x vec4<u32>), see wgsl/common/params.wgsl
# Loop passes a kernel may make that its builder does not count (Recorder.loops_fit): loops over a tensor's rank
# (index arithmetic, at most a few dozen passes) and small constant ones (mod_float.wgsl's 300 steps).
LOOP_ALLOWANCE = 512
_I32_MIN, _I32_MAX = -(2**31), 2**31 - 1


def gpu_type_of(dtype: np.dtype) -> str | None:
    """The WGSL storage type of a logical dtype, or None when it cannot live on the GPU."""
    return GPU_TYPES.get(np.dtype(dtype))


# -- device memory ---------------------------------------------------------------------------------
class Allocation:
    """A device buffer (or the part of a pooled one) holding one tensor's data; ``refs`` counts the
    live tensor names (a tensor and its views) that still need it."""

    __slots__ = ("buffer", "nbytes", "persistent", "refs")

    def __init__(self, buffer: Any, nbytes: int, persistent: bool = False) -> None:
        self.buffer = buffer
        self.nbytes = nbytes
        self.persistent = persistent
        self.refs = 0


class GTensor:
    """A tensor in device memory: contiguous, row-major, 4 bytes per element.

    ``host`` holds the host value when one is known without a download (model inputs, uploaded
    constants), so layers that need it on the host never sync. ``chunks`` splits a tensor above
    the binding limit into row blocks, each its own allocation.
    """

    __slots__ = ("alloc", "chunks", "dtype", "host", "name", "shape")

    def __init__(self, alloc: Allocation | None, shape: tuple[int, ...], dtype: np.dtype, name: str = "",
                 host: np.ndarray | None = None, chunks: list[tuple[int, int, Allocation]] | None = None) -> None:
        self.alloc = alloc
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.name = name
        self.host = host
        self.chunks = chunks  # (row_start, row_count, allocation)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return 4 * self.size

    @property
    def gpu_type(self) -> str:
        return GPU_TYPES[self.dtype]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"GTensor({self.name!r}, {self.dtype.name}{list(self.shape)})"


class GTexture:
    """A constant 2-D float32 matrix held as an rgba32float texture: texel (x, y) holds columns 4x..4x+3
    of row y. Some drivers vectorise texture loads where they scalarise storage-buffer loads."""

    __slots__ = ("name", "shape", "texture", "view")

    def __init__(self, texture: Any, shape: tuple[int, int], name: str) -> None:
        self.texture = texture
        self.view = texture.create_view()
        self.shape = shape
        self.name = name


class BufferPool:
    """Intermediate buffers reused once the tensors in them are dead (best fit by size)."""

    def __init__(self, ctx: GPUContext) -> None:
        self.ctx = ctx
        self.free: list[Any] = []
        self.total_bytes = 0
        self.count = 0

    def acquire(self, nbytes: int, what: str = "") -> Any:
        """A free buffer of at least ``nbytes``, or a new one; ``what`` (the tensor it is for) names it in a
        DeviceOutOfMemoryError when the device cannot make it."""
        want = max(16, (nbytes + 255) // 256 * 256)
        best = None
        for buf in self.free:
            # Reuse a free buffer big enough but not wastefully so (at most twice the size).
            if want <= buf.size <= 2 * want and (best is None or buf.size < best.size):
                best = buf
        if best is not None:
            self.free.remove(best)
            return best
        usage = self.ctx.wgpu.BufferUsage
        buf = self.ctx.create_buffer(want, usage.STORAGE | usage.COPY_SRC | usage.COPY_DST,
                                     f"wgsentis pool #{self.count}", what)
        self.count += 1
        self.total_bytes += want
        return buf

    def release(self, buf: Any) -> None:
        self.free.append(buf)


class UniformArena:
    """Per-dispatch parameter blocks packed into shared uniform buffers."""

    SLOT = PARAM_WORDS * 4

    def __init__(self, ctx: GPUContext, slots_per_buffer: int = 128) -> None:
        self.ctx = ctx
        self.stride = max(self.SLOT, (self.SLOT + ctx.uniform_align - 1) // ctx.uniform_align * ctx.uniform_align)
        self.per_buffer = slots_per_buffer
        self.buffers: list[Any] = []
        self.used = slots_per_buffer
        self.total_bytes = 0

    def allocate(self, words: np.ndarray) -> tuple[Any, int]:
        if self.used == self.per_buffer:
            usage = self.ctx.wgpu.BufferUsage
            size = self.stride * self.per_buffer
            self.buffers.append(self.ctx.device.create_buffer(size=size, usage=usage.UNIFORM | usage.COPY_DST,
                                                              label="wgsentis params"))
            self.total_bytes += size
            self.used = 0
        buf, offset = self.buffers[-1], self.used * self.stride
        self.used += 1
        self.ctx.queue.write_buffer(buf, offset, words)
        return buf, offset


# -- recorded steps ----------------------------------------------------------------------------------
@dataclass
class Dispatch:
    """One compute dispatch of a layer, ready to replay."""

    pipeline: Any
    bind_group: Any
    groups: tuple[int, int, int]
    layer: int


@dataclass
class Copy:
    """A buffer-to-buffer copy of a layer (a contiguous slab: Concat, Split, Slice), outside any pass;
    a memcpy where a copy shader would cost a dispatch."""

    src: Any
    src_offset: int
    dst: Any
    dst_offset: int
    nbytes: int
    layer: int

    def encode(self, encoder: Any) -> None:
        encoder.copy_buffer_to_buffer(self.src, self.src_offset, self.dst, self.dst_offset, self.nbytes)


# Linear textures hold a buffer's bytes in order, LINEAR_TEXELS texels (16 KiB) per row: texel t is at
# (t & (LINEAR_TEXELS - 1), t >> LINEAR_SHIFT). A row of that width is a multiple of the 256 bytes per row
# that copy_buffer_to_texture asks for, so a buffer reaches such a texture by a transfer copy (a memcpy
# on lavapipe: 0.15 ms for 3.2 MB, where a copy shader storing texels takes 1.5 ms).
LINEAR_SHIFT = 10
LINEAR_TEXELS = 1 << LINEAR_SHIFT


@dataclass
class TextureCopy(Copy):
    """A buffer-to-texture copy of ``nbytes`` (a multiple of 16) into a linear texture (``dst``), as
    whole texture rows and one partial row."""

    native: Any = field(default=None, repr=False, compare=False)  # see _native_copies

    def regions(self) -> list[tuple[int, int, int, int]]:
        """(buffer offset, first texture row, texels per row, rows) of each copy command."""
        row_bytes = LINEAR_TEXELS * 16
        rows, tail = divmod(self.nbytes, row_bytes)
        out = [(self.src_offset, 0, LINEAR_TEXELS, rows)] if rows else []
        if tail:
            out.append((self.src_offset + rows * row_bytes, rows, tail // 16, 1))
        return out

    def encode(self, encoder: Any) -> None:
        if self.native is None:
            self.native = _native_copies(self) or False
        if self.native:
            handle = encoder._internal
            for call, args in self.native:
                call(handle, *args)
            return
        for offset, row, texels, rows in self.regions():
            encoder.copy_buffer_to_texture(
                {"buffer": self.src, "offset": offset, "bytes_per_row": LINEAR_TEXELS * 16, "rows_per_image": rows},
                {"texture": self.dst, "origin": (0, row, 0)}, (texels, rows, 1))


def _native_copies(copy: TextureCopy) -> list[tuple[Callable[..., Any], tuple[Any, ...]]] | None:
    """The wgpu-native calls of ``copy`` with their argument structs built once. wgpu-py builds three
    structs from dicts on every copy_buffer_to_texture (~35 us of host time, more than three dispatches),
    and a replay encodes the same copy every run. Built with wgpu-py's own struct helpers; None (the
    public method then) where this wgpu-py lacks them."""
    try:
        from wgpu.backends.wgpu_native import _api

        calls = []
        for offset, row, texels, rows in copy.regions():
            layout = _api.new_struct("WGPUTexelCopyBufferLayout", offset=offset, bytesPerRow=LINEAR_TEXELS * 16,
                                     rowsPerImage=rows)
            source = _api.new_struct_p("WGPUTexelCopyBufferInfo *", layout=layout, buffer=copy.src._internal)
            origin = _api.new_struct("WGPUOrigin3D", x=0, y=row, z=0)
            destination = _api.new_struct_p("WGPUTexelCopyTextureInfo *", texture=copy.dst._internal, mipLevel=0,
                                            origin=origin, aspect="all")
            size = _api.new_struct_p("WGPUExtent3D *", width=texels, height=rows, depthOrArrayLayers=1)
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


FAULT_SLOTS = 1024  # bounds-checked index slots a plan may hold (two words each); beyond, layers fall back


@dataclass(frozen=True)
class IndexCheck:
    """A fault slot: data-driven indices of ``layer`` that must lie in [-bound, bound) (wgsl/common/faults.wgsl).
    A plan's slots are numbered in the order they were recorded, so the first one that faulted is the
    earliest layer at fault."""

    layer: str
    op_type: str
    bound: int
    what: str = "indices"

    def error(self, above: int, below: int) -> IndexOutOfRangeError | None:
        """The error a slot's two words report (None when both are zero): the largest index past the end,
        else the smallest below -bound, as the CPU kernels' ``check_indices`` names it."""
        if above:
            return IndexOutOfRangeError(self.layer, self.op_type, self.bound + above - 1, self.bound, self.what)
        if below:
            return IndexOutOfRangeError(self.layer, self.op_type, -self.bound - below, self.bound, self.what)
        return None


def index_fault(raw: np.ndarray, checks: list[IndexCheck]) -> IndexOutOfRangeError | None:
    """The error of the first faulted slot among ``checks``, given the bytes of their fault words (two u32
    per slot) as read back; None when none faulted."""
    raw = raw[: 8 * len(checks)]
    if not raw.any():  # the usual case, in a microsecond
        return None
    pairs = raw.view(np.uint32).reshape(-1, 2)
    slot = int(np.flatnonzero(pairs.any(axis=1))[0])
    return checks[slot].error(int(pairs[slot, 0]), int(pairs[slot, 1]))


@dataclass
class Plan:
    """A recorded run for one input signature."""

    steps: list[Dispatch | Copy | Fallback] = field(default_factory=list)
    input_tensors: dict[str, GTensor] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)  # name -> GTensor or host value
    gpu_layers: list[str] = field(default_factory=list)
    cpu_layers: list[str] = field(default_factory=list)  # planned on the host
    fallback_layers: list[str] = field(default_factory=list)
    host_read_inputs: dict[str, np.ndarray] = field(default_factory=dict)  # inputs whose values it baked in
    index_checks: list[IndexCheck] = field(default_factory=list)  # its fault slots, in slot order
    pool_bytes: int = 0  # device bytes of the plan's intermediate buffers
    peak_live_bytes: int = 0  # the largest set of intermediates alive at once (the lower bound)


# -- program builders' view ------------------------------------------------------------------------
class Recorder:
    """What a GPU program builder uses: allocate outputs, make views, upload constants, dispatch."""

    def __init__(self, program: GPUProgram) -> None:
        self.program = program
        self.ctx = program.ctx
        self.layer: Layer | None = None
        self.layer_index = -1
        self._scratch_layer = -2  # the layer _scratch_held belongs to
        self._scratch_held: list[GTexture] = []
        self.dispatches: list[Dispatch] = []
        self.layer_allocs: list[Allocation] = []  # made by the current layer's builder
        self.index_checks: list[IndexCheck] = []  # the recording's fault slots (the plan's)

    # tensors
    def alloc(self, shape: tuple[int, ...] | list[int], dtype: Any = np.float32) -> GTensor:
        """A new device tensor (from the buffer pool) for an output of the current layer."""
        dtype = np.dtype(dtype)
        if dtype not in GPU_TYPES:
            raise DeviceError(f"dtype {dtype.name} cannot live on the GPU")
        t = GTensor(None, tuple(shape), dtype)
        if t.nbytes > self.ctx.max_binding:
            raise _TooLarge(f"tensor of shape {list(t.shape)} ({t.nbytes} bytes) exceeds the device's binding "
                            f"limit of {self.ctx.max_binding} bytes")
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

    def copy(self, src: GTensor, src_offset: int, dst: GTensor, dst_offset: int, count: int) -> None:
        """Record a copy of ``count`` elements from ``src`` (element offset ``src_offset``) into ``dst``."""
        if count <= 0:
            return
        if src.alloc is None or dst.alloc is None:
            raise DeviceError("copy: a split tensor cannot be copied as one slab")
        if (src_offset + count) * 4 > src.alloc.buffer.size or (dst_offset + count) * 4 > dst.alloc.buffer.size:
            raise DeviceError(f"copy of {count} elements runs past a buffer (offsets {src_offset}, {dst_offset})")
        self.dispatches.append(Copy(src.alloc.buffer, 4 * src_offset, dst.alloc.buffer, 4 * dst_offset, 4 * count,
                                    self.layer_index))

    def copy_to_texture(self, src: GTensor, tex: GTexture) -> None:
        """Record a transfer copy of all of ``src`` (float32, a multiple of 4 elements) into the linear
        texture ``tex`` (``scratch_texture(..., linear=True)``)."""
        if src.alloc is None or src.nbytes % 16 or tex.shape[1] != 4 * LINEAR_TEXELS or \
                src.nbytes > tex.shape[0] * LINEAR_TEXELS * 16:
            raise DeviceError(f"copy of {src.nbytes} bytes into texture '{tex.name}' {list(tex.shape)}: "
                              "not a linear texture that holds it")
        if src.nbytes:
            self.dispatches.append(TextureCopy(src.alloc.buffer, 0, tex.texture, 0, src.nbytes, self.layer_index))

    def upload(self, value: np.ndarray, name: str = "") -> GTensor:
        """A host array as a device tensor (constants are uploaded once per worker and kept)."""
        return self.program.upload_constant(value, name)

    def scratch_texture(self, rows: int, cols: int, name: str = "", *, linear: bool = False) -> GTexture | None:
        """An rgba32float texture of at least (rows, cols) for an operand computed on the GPU (see
        ``GPUProgram.scratch_texture``), not one this layer holds already; None when it exceeds the
        device limits. ``linear``: one that holds ``rows * cols`` floats in buffer order (cols ignored),
        LINEAR_TEXELS texels per row, filled by ``copy_to_texture``."""
        if self._scratch_layer != self.layer_index:
            self._scratch_layer, self._scratch_held = self.layer_index, []
        if linear:
            rows, cols = -(-rows * cols // (4 * LINEAR_TEXELS)), 4 * LINEAR_TEXELS
        tex = self.program.scratch_texture(rows, cols, name, tuple(self._scratch_held), exact_width=linear)
        if tex is not None:
            self._scratch_held.append(tex)
        return tex

    @property
    def half_weights(self) -> bool:
        """Whether constant matmul operands are held in half precision (Worker precision="float16")."""
        return self.program.precision == "float16"

    def upload_half(self, value: np.ndarray, name: str = "") -> GTensor:
        """A constant float32 matrix rounded to float16 (see ``GPUProgram.upload_half``)."""
        return self.program.upload_half(value, name)

    def texture(self, value: np.ndarray, name: str = "", *, half: bool = False) -> GTexture | None:
        """A constant (rows, cols) float32 matrix as an rgba32float texture (rgba16float when ``half``),
        uploaded once per worker and kept; None when it exceeds the device's texture size limit."""
        return self.program.upload_texture(value, name, half=half)

    def check_indices(self, bounds: list[int], what: str = "indices") -> int:
        """Reserve one fault slot per bound for the current layer's data-driven indices, which must lie in
        [-bound, bound) (wgsl/common/faults.wgsl); returns the first slot's word, a parameter of the checking
        dispatch (slot j at that word + 2j), which binds the fault buffer (``dispatch(..., faults=True)``).
        A violation raises IndexOutOfRangeError when the run's outputs (or a fallback's inputs) are read."""
        first = len(self.index_checks)
        if first + len(bounds) > FAULT_SLOTS:
            raise _TooLarge(f"more than {FAULT_SLOTS} bounds-checked index slots in one plan")
        layer = self.layer
        name, op_type = (layer.name, layer.op_type) if layer is not None else ("", "")
        self.index_checks.extend(IndexCheck(name, op_type, int(b), what) for b in bounds)
        self.program.clear_faults(first, len(bounds))  # before this run's first submit that can write them
        return 2 * first

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
            raise _TooLarge(f"'{shader}': {loops} loop passes per invocation exceed the device's limit of "
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
        # run on the host: _place turns _TooLarge into a fallback, never a rejected bind group.
        sizes = [_binding_size(t, self.ctx.max_binding) for t in [*inputs, *outputs]]
        consts = {"WG": workgroup, **(constants or {})}
        key = pipeline_key(shader, subs or {}, consts, [(t.gpu_type, t.ndim) for t in inputs]
                           + [("texture", 2) for _ in textures or []], faults=faults)
        source = wgsl_source(shader, subs)
        layer = self.layer
        label = label or (f"{layer.name} ({layer.op_type})" if layer is not None else shader)
        pipeline, bgl = self.ctx.pipeline(key, source, consts, label)
        words = pack_params(params, shader)
        ubuf, uoffset = self.program.arena.allocate(words)
        entries = [{"binding": i, "resource": {"buffer": t.alloc.buffer, "offset": 0, "size": size}}
                   for i, (t, size) in enumerate(zip([*inputs, *outputs], sizes, strict=True))]
        entries.append({"binding": len(entries),
                        "resource": {"buffer": ubuf, "offset": uoffset, "size": UniformArena.SLOT}})
        for tex in textures or []:
            entries.append({"binding": len(entries), "resource": tex.view})
        if faults:
            buf = self.program.fault_buffer()
            entries.append({"binding": len(entries), "resource": {"buffer": buf, "offset": 0, "size": buf.size}})
        try:
            bind_group = self.ctx.device.create_bind_group(layout=bgl, entries=entries, label=label)
        except Exception as exc:
            raise DeviceError(f"{label}: bind group for '{shader}' rejected: {exc}") from None
        self.dispatches.append(Dispatch(pipeline, bind_group, groups, self.layer_index))


class _TooLarge(Exception):  # noqa: N818 - internal: past a device limit (binding size, loop passes): a fallback
    pass


def loop_passes(*trips: int) -> int:
    """Loop passes one invocation makes in loops nested outermost first with these trip counts, as lavapipe
    counts them (``GPUContext.max_loop_iterations``): a loop makes one pass per trip and one more that exits, and
    the loops in its body run on every trip and once more, masked off, on that last pass. lavapipe runs the lanes
    of an invocation batch together with masks, so a loop behind a runtime branch or an early return still makes
    at least one pass, and as many as its longest lane: count every loop of a kernel at its worst trip count
    (branches on override constants are compiled away). Loops one after another add up.
    Measured on Mesa 22.3.6: n trips cost n + 1; o x i nested loops o * (i + 2) + 2."""
    passes, masked = 0, 0
    for trip in reversed(trips):
        passes, masked = max(int(trip), 0) * (passes + 1) + 1 + masked, masked + 1
    return passes


def _binding_size(t: GTensor, limit: int) -> int:
    """Bytes of ``t``'s buffer to bind: all of it, or the binding limit when a pooled buffer is larger than
    the tensor needs. Raises _TooLarge for a split tensor or one over the limit."""
    if t.alloc is None:
        raise _TooLarge(f"tensor '{t.name}' {list(t.shape)} is split in row blocks; this program binds it whole")
    size = max(4, t.alloc.buffer.size)
    if size <= limit:
        return size
    if t.nbytes > limit:
        raise _TooLarge(f"tensor '{t.name}' {list(t.shape)} ({t.nbytes} bytes) exceeds the device's binding limit "
                        f"of {limit} bytes")
    return limit // 16 * 16  # a pooled buffer up to twice the tensor: bind the part within the limit


def fold_groups(groups: int, limit: int) -> tuple[int, int, int]:
    """Fold a 1-D workgroup count above the per-dimension limit into a 2-D grid (x * y >= groups)."""
    if groups <= limit:
        return (groups, 1, 1)
    y = math.ceil(groups / limit)
    x = math.ceil(groups / y)
    if y > limit:
        raise DeviceError(f"{groups} workgroups exceed the device's {limit} x {limit} grid")
    return (x, y, 1)


def pipeline_key(shader: str, subs: dict[str, str], constants: dict[str, int | float],
                 inputs: list[tuple[str, int]], *, faults: bool = False) -> tuple:
    """The one place a pipeline's cache key is built: program, substitutions, override constants
    (the workgroup size among them), each input's storage type and rank, and whether the fault buffer
    is bound (a binding more in the layout)."""
    return (shader, tuple(sorted(subs.items())), tuple(sorted(constants.items())), tuple(inputs), bool(faults))


def pack_params(params: list[int | float], shader: str) -> np.ndarray:
    """Pack ints (as u32/i32 bit patterns) and floats (as f32 bit patterns) into the uniform words."""
    if len(params) > PARAM_WORDS:
        raise DeviceError(f"shader '{shader}': {len(params)} parameters exceed {PARAM_WORDS}")
    words = np.zeros(PARAM_WORDS, dtype=np.uint32)
    for i, value in enumerate(params):
        if isinstance(value, float | np.floating):
            words[i] = np.array(value, dtype=np.float32).view(np.uint32)
        else:
            words[i] = np.uint32(int(value) & 0xFFFFFFFF)
    return words


# -- host <-> device conversion -----------------------------------------------------------------------
def to_device_array(value: np.ndarray, what: str) -> np.ndarray:
    """The 4-byte representation of a host array (int64 range-checked to int32, bool as u32)."""
    value = np.asarray(value)
    if value.dtype == np.float32 or value.dtype == np.int32:
        return np.ascontiguousarray(value)
    if value.dtype == np.int64:
        if value.size and (value.min() < _I32_MIN or value.max() > _I32_MAX):
            raise _TooLarge(f"{what}: int64 values outside the int32 range cannot live on the GPU")
        return value.astype(np.int32)
    if value.dtype == np.bool_:
        return value.astype(np.uint32)
    raise DeviceError(f"{what}: dtype {value.dtype.name} cannot live on the GPU")


def from_device_array(raw: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Inverse of ``to_device_array`` for ``raw`` 4-byte words."""
    gpu = GPU_TYPES[np.dtype(dtype)]
    view = raw.view({"f32": np.float32, "i32": np.int32, "u32": np.uint32}[gpu])[: math.prod(shape)]
    if dtype == np.bool_:
        return (view != 0).reshape(shape)
    return view.astype(dtype, copy=True).reshape(shape)


def _aligned(n: int, a: int = 256) -> int:
    return (n + a - 1) // a * a


class PendingReadback:
    """Outputs copied into one staging buffer whose mapping was requested; resolves when mapped."""

    def __init__(self, ctx: GPUContext, staging: Any, layout: dict[str, tuple[int, tuple[int, ...], np.dtype]],
                 host_values: dict[str, Any],
                 extra: tuple[int, int, Callable[[np.ndarray], None]] | None = None,
                 checks: tuple[int, list[IndexCheck]] | None = None) -> None:
        self.ctx = ctx
        self.staging = staging
        self.layout = layout
        self.host_values = host_values
        self.extra = extra  # (offset, nbytes, callback): more bytes in the same staging buffer (timestamps)
        self.checks = checks  # (offset, slots): the run's index fault words, in the same staging buffer
        self.values: dict[str, Any] | None = None
        self.error: IndexOutOfRangeError | None = None  # a faulted index: raised by every wait()
        self.promise = staging.map_async("READ") if staging is not None else None

    def done(self) -> bool:
        if self.values is not None or self.promise is None:
            return True
        # wgpu's poll thread moves the promise out of "pending" once the map callback fired.
        return getattr(self.promise, "_state", "pending") != "pending"

    def wait(self) -> dict[str, Any]:
        """The outputs by name; raises IndexOutOfRangeError, before handing out any value, when a
        bounds-checked index of the run lay outside its axis."""
        if self.error is not None:
            raise self.error
        if self.values is None:
            values = dict(self.host_values)
            if self.promise is not None:
                wait_mapped(self.promise, f"the outputs {', '.join(self.layout)}" if self.layout else "the outputs")
                raw = np.frombuffer(self.staging.read_mapped(copy=True), dtype=np.uint8)
                self.staging.unmap()
                self.staging.destroy()
                if self.checks is not None:
                    offset, slots = self.checks
                    self.error = index_fault(raw[offset: offset + 8 * len(slots)], slots)
                    if self.error is not None:
                        self.promise = None
                        raise self.error
                for name, (offset, shape, dtype) in self.layout.items():
                    words = raw[offset: offset + 4 * math.prod(shape)].view(np.uint32)
                    values[name] = from_device_array(words, shape, dtype)
                if self.extra is not None:
                    offset, nbytes, callback = self.extra
                    callback(raw[offset: offset + nbytes])
            self.values = values
        return self.values


# -- the program ---------------------------------------------------------------------------------------
class GPUProgram:
    """A graph compiled for the gpu-compute backend: plans per input signature, shared weights."""

    def __init__(self, graph: Graph, threads: int = 1, debug_groups: bool = False,
                 precision: str = "float32", ctx: GPUContext | None = None) -> None:
        self.ctx = ctx or get_context()  # another context: e.g. a device with other limits
        if precision not in PRECISIONS:
            raise DeviceError(f"precision '{precision}' is not one of {list(PRECISIONS)}")
        if precision == "float16" and not self.ctx.has_f16:
            raise DeviceError(f"precision='float16' needs the adapter feature 'shader-f16', which "
                              f"'{self.ctx.info.name}' ({self.ctx.info.backend}) does not offer; use 'float32'")
        self.precision = precision
        self.graph = graph
        self.threads = threads
        self.debug_groups = debug_groups
        self.output_names = [o.name for o in graph.outputs]
        self.pool = BufferPool(self.ctx)
        self.arena = UniformArena(self.ctx)
        self.constants: dict[Any, Any] = {}  # id(host array) -> uploaded tensor (or ("texture", id) -> GTexture)
        self.constant_bytes = 0
        self.scratch_textures: dict[tuple[int, int], GTexture] = {}  # (rows, texels per row) -> texture
        self.scratch_texture_bytes = 0
        # A plan per input signature, least recently used first; each holds its own device buffers, so a
        # model run at ever new shapes would otherwise grow without bound (134 MB for 100 batch sizes).
        self.plans: OrderedDict[tuple, Plan] = OrderedDict()
        self.max_plans = MAX_PLANS
        self.transfers: list[Transfer] = []  # this run's
        self.weight_transfers: list[Transfer] = []  # constants, uploaded once per worker
        self.last_plan: Plan | None = None
        self._next_stream: _CommandStream | None = None  # ready for the next replay
        self._cpu_steps = [_Step(layer, _HostProgram(self)) for layer in graph.layers]
        self.host_needed = self._plan_host_tensors()
        self._last_use = self._last_uses()
        self._live_bytes = 0
        self._peak_live = 0
        self.on_layer: Callable[[int, str], None] | None = None
        self.last_encode_seconds = 0.0  # host time encoding the last replayed run
        # Profiling: True writes timestamps between layers (or a timestamped pass per layer); "whole"
        # only at the start and end of the run, keyed -1 (what the per-layer stamps themselves cost).
        self.profile_layers: bool | str = False
        self.last_layer_gpu_ns: dict[int, int] = {}  # layer index -> GPU duration of the last profiled run
        self.last_layer_spans: dict[int, int] = {}  # layer index -> timed intervals behind that duration
        self._query_sets: list[Any] = []
        self._resolve_buffer: Any = None
        self.control: Any = None  # the RunControl of the run in progress (wgsentis.run_control), or None
        # Index bounds checks (wgsl/common/faults.wgsl): one fault buffer for every plan (runs are ordered
        # on the queue), and the slots of the run in progress, which its downloads and readback check.
        self._faults: Any = None
        self._run_checks: list[IndexCheck] = []

    def close(self) -> None:
        """Drop plans and buffers (the device itself is shared by the process)."""
        self.plans.clear()
        self.constants.clear()
        self.scratch_textures.clear()
        self._next_stream = None
        self.last_plan = None
        self._faults = None
        self._run_checks = []

    # -- index faults ------------------------------------------------------------------------------------
    def fault_buffer(self) -> Any:
        """The storage buffer of FAULT_SLOTS index fault slots (two u32 words each; zero when made)."""
        if self._faults is None:
            usage = self.ctx.wgpu.BufferUsage
            self._faults = self.ctx.create_buffer(8 * FAULT_SLOTS, usage.STORAGE | usage.COPY_SRC | usage.COPY_DST,
                                                  "wgsentis index faults", "the index fault buffer")
        return self._faults

    def clear_faults(self, first: int, count: int) -> None:
        """Zero slots first..first+count-1. A queue write lands before the next submit, after every run
        submitted earlier: the slots start this run cleared whatever the previous run left in them."""
        if count:
            self.ctx.queue.write_buffer(self.fault_buffer(), 8 * first, np.zeros(2 * count, np.uint32))

    def _start_checks(self, checks: list[IndexCheck]) -> None:
        """Make ``checks`` (a plan's fault slots, or a recording's growing list) the run's: cleared now,
        read back with the outputs (``_finish``) and with every fallback's inputs (``_download``)."""
        self._run_checks = checks
        self.clear_faults(0, len(checks))

    def _fault_copy(self, encoder: Any, staging: Any, offset: int) -> tuple[int, list[IndexCheck]] | None:
        """Record the copy of the run's fault words into ``staging`` at ``offset``; returns what
        ``index_fault`` needs to read them, or None when the run has no checked index."""
        checks = self._run_checks
        if not checks:
            return None
        encoder.copy_buffer_to_buffer(self._faults, 0, staging, offset, 8 * len(checks))
        return offset, list(checks)

    # -- analysis done once ---------------------------------------------------------------------------
    def _plan_host_tensors(self) -> set[str]:
        """Tensors that must be read on the host: the inputs GPU programs take as host values (shapes,
        axes, pads...) and, walking back, whatever computes them, except through Shape/Size, which
        read only their input's shape. Layers producing these run on the CPU at plan time."""
        needed: set[str] = set()
        for layer in self.graph.layers:
            gpu = registry.lookup_gpu(layer.op_type, layer.domain, layer.opset)
            for pos in gpu.host_inputs if gpu is not None else ():
                if pos < len(layer.inputs) and layer.inputs[pos]:
                    needed.add(layer.inputs[pos])
        for layer in reversed(self.graph.layers):
            if layer.op_type in SHAPE_ONLY_OPS or not any(o in needed for o in layer.outputs):
                continue
            needed.update(n for n in layer.inputs if n and n not in self.graph.constants)
        return needed

    def _last_uses(self) -> dict[str, int]:
        last: dict[str, int] = {}
        for i, layer in enumerate(self.graph.layers):
            for n in set(layer.inputs) | captured_names(layer):
                if n:
                    last[n] = i
        for n in self.output_names:
            last[n] = len(self.graph.layers)
        return last

    # -- memory ----------------------------------------------------------------------------------------
    def new_allocation(self, nbytes: int, what: str = "", layer: Layer | None = None) -> Allocation:
        control = self.control
        if layer is not None and control is not None and control.memory_limit is not None:
            # The run's memory budget bounds the device too: the bytes the plan holds live, this buffer included.
            control.check_bytes(layer, None, self._live_bytes + nbytes,
                                f"device memory: {self._live_bytes:,} bytes live on the device, then {what}")
        alloc = Allocation(self.pool.acquire(nbytes, what), nbytes)
        self._live_bytes += nbytes
        self._peak_live = max(self._peak_live, self._live_bytes)
        return alloc

    def _retain(self, value: Any) -> None:
        if isinstance(value, GTensor) and value.alloc is not None and not value.alloc.persistent:
            value.alloc.refs += 1

    def _drop(self, value: Any) -> None:
        if isinstance(value, GTensor) and value.alloc is not None and not value.alloc.persistent:
            value.alloc.refs -= 1
            if value.alloc.refs == 0:
                self._live_bytes -= value.alloc.nbytes
                self.pool.release(value.alloc.buffer)

    def upload_constant(self, value: np.ndarray, name: str) -> GTensor:
        key = id(value)
        hit = self.constants.get(key)
        if hit is not None and hit.host is value:
            return hit
        data = to_device_array(value, f"constant '{name}'")
        shape = tuple(value.shape)
        if data.nbytes > self.ctx.max_binding:
            # Split into row blocks, each within the binding limit (VGG-19's 411 MB FC weight).
            rows = shape[0]
            row_bytes = data.nbytes // max(rows, 1)
            per = max(1, self.ctx.max_binding // max(row_bytes, 1))
            chunks = []
            for start in range(0, rows, per):
                part = np.ascontiguousarray(data[start: start + per])
                chunks.append((start, len(part), self._constant_buffer(part, f"{name}[{start}:{start + len(part)}]")))
            t = GTensor(None, shape, value.dtype, name, host=value, chunks=chunks)
        else:
            t = GTensor(self._constant_buffer(data, name), shape, value.dtype, name, host=value)
        return self._keep_constant(key, t, data.nbytes, name)

    def _constant_buffer(self, data: np.ndarray, label: str) -> Allocation:
        """A persistent storage buffer holding ``data`` (4 bytes when ``data`` is empty)."""
        usage = self.ctx.wgpu.BufferUsage
        buf = self.ctx.create_buffer(max(4, data.nbytes), usage.STORAGE | usage.COPY_SRC, label, f"constant '{label}'",
                                     data=data if data.size else np.zeros(4, np.uint32))
        return Allocation(buf, data.nbytes, persistent=True)

    def _keep_constant(self, key: Any, uploaded: Any, nbytes: int, name: str) -> Any:
        """Cache an uploaded constant under ``key`` and count its upload."""
        self.constants[key] = uploaded
        self.constant_bytes += nbytes
        self.weight_transfers.append(Transfer("upload", name or "constant", nbytes))
        return uploaded

    @property
    def _texture_limit(self) -> int:
        return int(self.ctx.limits.get("max-texture-dimension-2d", 8192))

    def upload_texture(self, value: np.ndarray, name: str, *, half: bool = False) -> GTexture | None:
        key = ("texture", id(value), half)
        hit = self.constants.get(key)
        if hit is not None:
            return hit
        if value.ndim != 2 or value.dtype != np.float32:
            raise DeviceError(f"texture '{name}': a 2-D float32 matrix is needed, got {value.dtype}{list(value.shape)}")
        rows, cols = value.shape
        width = max(1, (cols + 3) // 4)
        if rows > self._texture_limit or width > self._texture_limit:
            return None
        dtype, texel = (np.float16, 8) if half else (np.float32, 16)
        data = np.zeros((rows, width * 4), dtype)
        data[:, :cols] = value
        usage = self.ctx.wgpu.TextureUsage
        texture = self.ctx.create_texture((width, max(rows, 1), 1), "rgba16float" if half else "rgba32float",
                                          usage.TEXTURE_BINDING | usage.COPY_DST, name, data.nbytes,
                                          f"constant '{name}' {list(value.shape)}")
        if rows:
            self.ctx.queue.write_texture({"texture": texture}, data, {"bytes_per_row": width * texel,
                                                                      "rows_per_image": rows}, (width, rows, 1))
        # Keyed by id: the caller keeps ``value`` alive (repacked weights).
        return self._keep_constant(key, GTexture(texture, (rows, cols), name), data.nbytes, name or "texture")

    def upload_half(self, value: np.ndarray, name: str) -> GTensor:
        """A constant float32 matrix (..., cols), cols a multiple of 4, rounded to float16 and uploaded as
        a storage buffer of vec4<f16> rows (read by shaders that ``enable f16``). The tensor is typed
        int32 with half as many columns: that is how its bytes are bound, never how they are read."""
        key = ("half", id(value))
        hit = self.constants.get(key)
        if hit is not None:
            return hit
        if value.dtype != np.float32 or value.ndim < 1 or value.shape[-1] % 4:
            raise DeviceError(f"constant '{name}': float16 storage needs float32 rows of a multiple of 4 values, "
                              f"got {value.dtype}{list(value.shape)}")
        words = np.ascontiguousarray(value.astype(np.float16)).view(np.int32)  # (..., cols / 2)
        if words.nbytes > self.ctx.max_binding:
            raise _TooLarge(f"constant '{name}' ({words.nbytes} bytes in float16) exceeds the binding limit")
        t = GTensor(self._constant_buffer(words, name), words.shape, np.int32, name)
        return self._keep_constant(key, t, words.nbytes, name)

    def scratch_texture(self, rows: int, cols: int, name: str, busy: tuple[GTexture, ...] = (),
                        exact_width: bool = False) -> GTexture | None:
        """An rgba32float texture of at least (rows, cols) that a layer writes as storage and reads as a
        sampled matmul operand (an operand produced on the GPU). Layers share them: a layer consumes its
        texture before the next one writes it, dispatches are ordered, and a texture larger than asked
        for serves as well (programs address texels explicitly). The smallest free one that covers the
        request is reused; otherwise a new one is made, at least twice as tall as the tallest of its width,
        so that a network whose channel counts grow, as DenseNet's do, makes a few textures rather than
        one per layer. ``busy``: textures the caller holds already; ``exact_width``: only a texture of
        exactly this width serves (a linear texture's addressing depends on it). None when it exceeds the
        device's texture size limit."""
        width = max(1, (cols + 3) // 4)
        limit = self._texture_limit
        if rows > limit or width > limit or rows == 0:
            return None
        fits = [t for t in self.scratch_textures.values()
                if t.shape[0] >= rows and (t.shape[1] == 4 * width if exact_width else t.shape[1] >= 4 * width)
                and all(t is not u for u in busy)]
        if fits:
            return min(fits, key=lambda t: t.shape[0] * t.shape[1])
        # Rows grow geometrically per width: a second texture of a width is at least twice the first.
        tallest = max((t.shape[0] for t in self.scratch_textures.values() if t.shape[1] == 4 * width), default=0)
        tex_rows = min(limit, max(rows, 2 * tallest))
        usage = self.ctx.wgpu.TextureUsage
        texture = self.ctx.create_texture((width, tex_rows, 1), "rgba32float",
                                          usage.TEXTURE_BINDING | usage.STORAGE_BINDING | usage.COPY_DST, name,
                                          tex_rows * width * 16, f"a scratch operand texture for '{name}'")
        tex = GTexture(texture, (tex_rows, 4 * width), name)
        self.scratch_textures[(tex_rows, width)] = tex
        self.scratch_texture_bytes += tex_rows * width * 16
        return tex

    # -- running ----------------------------------------------------------------------------------------
    def run(self, feeds: dict[str, Any], control: Any = None) -> PendingReadback:
        """Run on ``feeds``: replay the plan for this signature, or record one. Returns the readback.

        ``control`` (a RunControl) is checked before every layer while recording, and before every host
        layer of a replay (cancellation, timeout, memory budget): a replay's GPU work is one submission.
        Errors from wgpu itself (validation, out of memory, a lost device) become a DeviceError that
        names the graph; our own typed errors pass through unchanged."""
        self.control = control
        try:
            return self._run(feeds)
        except WgSentisError:
            raise
        except Exception as exc:
            raise DeviceError(f"graph '{self.graph.name}' on {self.ctx.info.name}: the GPU run failed: "
                              f"{type(exc).__name__}: {str(exc).strip()[:500]}") from exc

    def _run(self, feeds: dict[str, Any]) -> PendingReadback:
        self.transfers = []
        signature = tuple((n, np.asarray(v).shape, np.asarray(v).dtype.str) if isinstance(v, np.ndarray)
                          else (n, type(v).__name__) for n, v in sorted(feeds.items()))
        plan = self.plans.get(signature)
        if plan is not None:
            self.plans.move_to_end(signature)  # most recently used last; the first is evicted first
        if plan is not None and any(not np.array_equal(feeds[n], v) for n, v in plan.host_read_inputs.items()):
            plan = None  # it baked in other values of inputs read on the host (e.g. a shape input)
        if plan is not None:
            try:
                return self._replay(plan, feeds)
            except PlanInvalid:
                del self.plans[signature]
        plan, readback = self._record(feeds)
        if plan is not None:
            self.plans[signature] = plan
            while len(self.plans) > self.max_plans:
                # Dropped, never destroyed: work already submitted keeps its buffers alive until it is done.
                self.plans.popitem(last=False)
        return readback

    def _upload_input(self, name: str, value: np.ndarray, target: GTensor | None) -> GTensor:
        data = to_device_array(value, f"input '{name}'")
        t = target
        if t is None:
            t = GTensor(self.new_allocation(max(4, data.nbytes), f"tensor '{name}' {list(value.shape)}"), value.shape,
                        value.dtype, name)
        if data.nbytes:
            self.ctx.queue.write_buffer(t.alloc.buffer, 0, data)
        t.host = value  # known on the host: layers reading it there need no download
        self.transfers.append(Transfer("upload", name, data.nbytes))
        return t

    def _record(self, feeds: dict[str, Any]) -> tuple[Plan | None, PendingReadback]:
        self._live_bytes = 0
        self._peak_live = 0
        # Each recording gets its own buffers: an earlier plan's are still referenced by its bind groups.
        self.pool = BufferPool(self.ctx)
        plan = Plan()
        cacheable = True
        env: dict[str, Any] = {}
        for name, value in feeds.items():
            if isinstance(value, np.ndarray) and gpu_type_of(value.dtype) is not None:
                try:
                    t = self._upload_input(name, value, None)
                except _TooLarge:
                    env[name] = value
                    # Layers reading it run on the host with this value baked into the plan: replay only it.
                    plan.host_read_inputs[name] = np.array(value, copy=True)
                    continue
                plan.input_tensors[name] = t
                env[name] = t
                self._retain(t)
            else:
                env[name] = value
        for name in list(env):
            if self._last_use.get(name, -1) < 0 and name not in self.output_names:
                self._drop(env[name])
        rec = Recorder(self)
        plan.index_checks = rec.index_checks  # filled as checking layers are recorded
        self._start_checks(rec.index_checks)
        stream = _CommandStream(self.ctx.device, self.debug_groups)
        encoded = 0  # steps of rec already encoded
        for i, layer in enumerate(self.graph.layers):
            rec.layer, rec.layer_index = layer, i
            args = [self._value(n, env) if n else None for n in layer.inputs]
            if self.control is not None:
                self.control.before_layer(layer, args)  # stop or refuse before anything is allocated
            kind, outputs = self._place(rec, layer, args)
            if kind != "fallback" and layer.op_type not in SHAPE_ONLY_OPS:
                for n in layer.inputs:
                    if n in plan.input_tensors and (kind == "cpu" or n in _host_read(layer, args, env)):
                        plan.host_read_inputs[n] = np.array(feeds[n], copy=True)
            if kind == "gpu":
                new = rec.dispatches[encoded:]
                encoded = len(rec.dispatches)
                self._emit_layer(stream, i, new)
                plan.steps.extend(new)
                plan.gpu_layers.append(layer.name)
            elif kind == "cpu":
                outputs = self._run_host(i, [_host_of(a) for a in args])
                plan.cpu_layers.append(layer.name)
            else:
                outputs, step = self._fallback_record(i, layer, args, stream.take(), env)
                plan.steps.append(step)
                plan.fallback_layers.append(layer.name)
                # Outputs kept on the host (sequences, types the GPU lacks) make later layers depend
                # on values a replay cannot check cheaply: such runs are recorded every time.
                cacheable = cacheable and all(t is not None and n not in self.host_needed
                                              for t, n in zip(step.targets, layer.outputs, strict=False) if n)
            for name, value in zip(layer.outputs, outputs, strict=False):
                if name:
                    env[name] = value
                    self._retain(value)
            for n in set(layer.inputs) | captured_names(layer):
                if n and self._last_use.get(n) == i and n in env:
                    self._drop(env[n])
            for name, value in zip(layer.outputs, outputs, strict=False):
                if name and name not in self._last_use:
                    self._drop(value)
            if self.on_layer is not None:
                self.on_layer(i, kind)
        plan.outputs = {n: env[n] for n in self.output_names}
        plan.peak_live_bytes = self._peak_live
        plan.pool_bytes = self.pool.total_bytes
        readback = self._finish(stream.take(), plan.outputs)
        self.last_plan = plan
        return (plan if cacheable else None), readback

    def _place(self, rec: Recorder, layer: Layer, args: list[Any]) -> tuple[str, Any]:
        """Decide where a layer runs: "cpu" (planned on the host), "gpu", or "fallback" (CPU with a sync)."""
        if layer.op_type in SHAPE_ONLY_OPS and not layer.domain:
            # Only the shape is read: a zero-stride stand-in carries it without any data.
            for k, a in enumerate(args):
                if isinstance(a, GTensor):
                    args[k] = np.broadcast_to(np.zeros((), a.dtype), a.shape)
            return "cpu", None
        impl = registry.lookup(layer.op_type, layer.domain, layer.opset)
        known = [a.host if isinstance(a, GTensor) and a.host is not None else a for a in args]
        if impl is not None and not registry.is_deterministic(impl, known):
            return "fallback", None  # random work runs again on every replay, never baked into the plan
        host_layer = any(o in self.host_needed for o in layer.outputs)
        if (host_layer and _all_host(args)) or all(a is None or isinstance(a, np.ndarray) for a in args):
            # Values already on the host (shapes and what is computed from them) stay there: no sync.
            if not captured_names(layer):
                return "cpu", None
        gpu = registry.lookup_gpu(layer.op_type, layer.domain, layer.opset)
        if gpu is None or captured_names(layer):
            return "fallback", None
        for pos in gpu.host_inputs:
            if pos < len(args) and isinstance(args[pos], GTensor):
                if args[pos].host is None:
                    return "fallback", None  # its value exists only on the device: a sync is needed
                args[pos] = args[pos].host
        start = len(rec.dispatches)
        rec.layer_allocs = []
        try:
            outputs = gpu.build(rec, layer, *args, **layer.attrs)
        except _TooLarge:
            outputs = NotImplemented
        except PASS_THROUGH_ERRORS:
            raise
        except WgSentisError as exc:
            raise LayerError(layer.name, layer.op_type, str(exc)) from exc
        except Exception as exc:
            raise LayerError(layer.name, layer.op_type, f"GPU program: {type(exc).__name__}: {exc}") from exc
        outputs = NotImplemented if outputs is NotImplemented else (
            outputs if isinstance(outputs, tuple) else (outputs,))
        # Buffers the builder made but did not return are its temporaries (or leftovers of a build
        # that gave up): free them now. Later layers reusing them run after this layer's dispatches.
        kept = {id(o.alloc) for o in outputs if isinstance(o, GTensor)} if outputs is not NotImplemented else set()
        for alloc in rec.layer_allocs:
            if id(alloc) not in kept and alloc.refs == 0:
                self._live_bytes -= alloc.nbytes
                self.pool.release(alloc.buffer)
        rec.layer_allocs = []
        if outputs is NotImplemented:
            del rec.dispatches[start:]
            return "fallback", None
        return "gpu", outputs

    def _value(self, name: str, env: dict[str, Any]) -> Any:
        if name in env:
            return env[name]
        if name in self.graph.constants:
            return self.graph.constants[name]
        raise WgSentisError(f"tensor '{name}' was never produced")

    def _emit_layer(self, stream: _CommandStream, layer_index: int, steps: list[Any],
                    stamps: _Stamps | None = None) -> None:
        """Encode one layer's dispatches and copies, inside its debug group and between timestamps."""
        layer = self.graph.layers[layer_index]
        label = f"{layer.name} ({layer.op_type})"
        has_copy = any(isinstance(step, Copy) for step in steps)
        if stamps is not None:
            stamps.begin_layer(stream, layer_index)
        # A group that holds copies lives on the encoder (copies close the pass); else inside the pass.
        group_owner = None
        if self.debug_groups:
            group_owner = stream.encoder_for_copies() if has_copy else stream.compute_pass()
            group_owner.push_debug_group(label)
        for step in steps:
            if isinstance(step, Copy):
                stream.copy(step)
            else:
                stream.dispatch(step)
        if group_owner is not None:
            if has_copy:
                stream.end_pass()
            group_owner.pop_debug_group()
        if stamps is not None:
            stamps.end_layer(stream, layer_index)

    def _emit_steps(self, stream: _CommandStream, steps: list[Any], stamps: _Stamps | None = None) -> None:
        """Encode a recorded plan's steps, running its fallback layers in between."""
        if stamps is None and not self.debug_groups:
            # The plain replay: no per-layer grouping to do, so none of its host cost.
            for step in steps:
                if isinstance(step, Dispatch):
                    stream.dispatch(step)
                elif isinstance(step, Copy):
                    stream.copy(step)
                else:
                    self._replay_fallback(step, stream.take())
            return
        start = 0
        while start < len(steps):
            step = steps[start]
            if isinstance(step, Fallback):
                self._replay_fallback(step, stream.take())
                start += 1
                continue
            stop = start + 1
            while stop < len(steps) and not isinstance(steps[stop], Fallback) and steps[stop].layer == step.layer:
                stop += 1
            self._emit_layer(stream, step.layer, steps[start:stop], stamps)
            start = stop

    def _run_host(self, index: int, args: list[Any]) -> tuple[Any, ...]:
        step = self._cpu_steps[index]
        try:
            with np.errstate(all="ignore"):  # IEEE results (see backends/cpu.py _run_step)
                result = step.run(args)
        except PASS_THROUGH_ERRORS:
            raise
        except WgSentisError as exc:
            raise LayerError(step.layer.name, step.layer.op_type, str(exc)) from exc
        except Exception as exc:
            raise LayerError(step.layer.name, step.layer.op_type, f"{type(exc).__name__}: {exc}") from exc
        result = result if isinstance(result, tuple) else (result,)
        return tuple(np.asarray(v) if isinstance(v, np.generic) else v for v in result)

    def _download(self, tensors: list[GTensor], encoder: Any, layer: str) -> list[np.ndarray]:
        """Submit ``encoder`` with copies of ``tensors`` into a staging buffer; wait; return host arrays.
        The run's index fault words ride along: a host layer must not compute on what a faulted index
        produced (it could fail otherwise, or not at all), so a fault raises its IndexOutOfRangeError here."""
        usage = self.ctx.wgpu.BufferUsage
        offsets, total = [], 0
        for t in tensors:
            offsets.append(total)
            total += _aligned(max(4, t.nbytes))
        fault_at, checks = total, None
        if tensors and self._run_checks:
            total += _aligned(8 * len(self._run_checks))
        staging = None
        if total:
            staging = self.ctx.create_buffer(total, usage.MAP_READ | usage.COPY_DST, f"{layer} download",
                                             f"the staging buffer for the inputs of layer '{layer}'")
            for t, off in zip(tensors, offsets, strict=True):
                if t.nbytes:
                    encoder.copy_buffer_to_buffer(t.alloc.buffer, 0, staging, off, _aligned(t.nbytes, 4))
            if tensors:
                checks = self._fault_copy(encoder, staging, fault_at)
        start = time.perf_counter()
        self.ctx.queue.submit([encoder.finish()])
        out = []
        if staging is not None:
            map_for_reading(staging, f"the inputs of layer '{layer}'")
            raw = np.frombuffer(staging.read_mapped(copy=True), dtype=np.uint8)
            staging.unmap()
            staging.destroy()
            if checks is not None:
                error = index_fault(raw[fault_at:], checks[1])
                if error is not None:
                    raise error
        for t, off in zip(tensors, offsets, strict=True):
            words = raw[off: off + t.nbytes].view(np.uint32) if t.nbytes else np.zeros(0, np.uint32)
            out.append(from_device_array(words, t.shape, t.dtype))
        seconds = time.perf_counter() - start
        for t in tensors:
            self.transfers.append(Transfer("download", t.name, t.nbytes, layer, seconds / max(1, len(tensors))))
        return out

    def _fallback_inputs(self, layer: Layer, args: list[Any], encoder: Any) -> list[Any]:
        """Download the device-only arguments of a fallback layer (submitting ``encoder``)."""
        on_device = [(k, a) for k, a in enumerate(args) if isinstance(a, GTensor) and a.host is None]
        for k, a in on_device:
            a.name = a.name or (layer.inputs[k] if k < len(layer.inputs) else "")
        values = self._download([a for _, a in on_device], encoder, layer.name)
        host = [_host_of(a) for a in args]
        for (k, _), v in zip(on_device, values, strict=True):
            host[k] = v
        return host

    def _fallback_record(self, index: int, layer: Layer, args: list[Any], encoder: Any,
                         env: dict[str, Any]) -> tuple[tuple[Any, ...], Fallback]:
        captured = {n: self._value(n, env) for n in sorted(captured_names(layer))}
        for n, v in captured.items():
            if isinstance(v, GTensor):
                v.name = v.name or n
        host = self._with_outer_scope(index, layer, args, captured, encoder)
        if self.control is not None:
            self.control.before_layer(layer, host)  # the host values are known now: check the budget again
        results = self._run_host(index, host)
        outputs: list[Any] = []
        targets: list[GTensor | None] = []
        for name, value in zip(layer.outputs, results, strict=False):
            target = None
            if name and isinstance(value, np.ndarray) and gpu_type_of(value.dtype) is not None:
                try:
                    target = self._upload_input(name, value, None)
                    self.transfers[-1].layer = layer.name
                except _TooLarge:
                    target = None
            outputs.append(target if target is not None else value)
            targets.append(target)
        step = Fallback(index, list(args), targets, captured)
        for name, t in zip(layer.outputs, targets, strict=False):
            if t is not None and name not in self.host_needed:
                t.host = None  # later layers must read the device copy: a replay brings new data
        return tuple(outputs), step

    def _with_outer_scope(self, index: int, layer: Layer, args: list[Any], captured: dict[str, Any],
                          encoder: Any) -> list[Any]:
        """Host values of a fallback layer's inputs and of the outer-scope tensors its subgraphs read,
        downloaded together in one sync."""
        names = list(captured)
        host = self._fallback_inputs(layer, [*args, *captured.values()], encoder)
        if names:
            outer = dict(self.graph.constants)
            outer.update(zip(names, host[len(args):], strict=True))
            self._cpu_steps[index].ctx.outer = outer
        return host[: len(args)]

    def _replay_fallback(self, step: Fallback, encoder: Any) -> None:
        layer = self.graph.layers[step.layer]
        host = self._with_outer_scope(step.layer, layer, step.args, step.captured, encoder)
        if self.control is not None:
            self.control.before_layer(layer, host)
        results = self._run_host(step.layer, host)
        for name, value, target in zip(layer.outputs, results, step.targets, strict=False):
            if target is None or not name:
                continue
            if not isinstance(value, np.ndarray) or tuple(value.shape) != target.shape or value.dtype != target.dtype:
                raise PlanInvalid(name)
            self._upload_input(name, value, target)
            target.host = None
            self.transfers[-1].layer = layer.name

    def _finish(self, encoder: Any, outputs: dict[str, Any],
                extra: tuple[Any, int, Callable[[np.ndarray], None]] | None = None) -> PendingReadback:
        """Copy the outputs (and ``extra``, a (buffer, nbytes, callback) such as resolved timestamps) into
        one staging buffer, submit, and request its mapping: one map per run."""
        usage = self.ctx.wgpu.BufferUsage
        layout, host_values, total = {}, {}, 0
        for name, value in outputs.items():
            if isinstance(value, GTensor) and value.host is None:
                layout[name] = (total, value.shape, value.dtype)
                total += _aligned(max(4, value.nbytes))
            else:
                host_values[name] = _host_of(value)
        extra_slice = None
        if extra is not None:
            extra_slice = (total, extra[1], extra[2])
            total += _aligned(extra[1])
        fault_at, checks = total, None
        if self._run_checks:  # the run's index fault words: one more small copy, the same map
            total += _aligned(8 * len(self._run_checks))
        staging = None
        if total:
            staging = self.ctx.create_buffer(total, usage.MAP_READ | usage.COPY_DST, "wgsentis outputs",
                                             f"the staging buffer for the outputs {list(layout)}")
            for name, (offset, _shape, _dtype) in layout.items():
                t = outputs[name]
                if t.nbytes:
                    encoder.copy_buffer_to_buffer(t.alloc.buffer, 0, staging, offset, _aligned(t.nbytes, 4))
                self.transfers.append(Transfer("download", name, t.nbytes, "output"))
            if extra is not None:
                encoder.copy_buffer_to_buffer(extra[0], 0, staging, extra_slice[0], extra[1])
            checks = self._fault_copy(encoder, staging, fault_at)
        self._run_checks = []  # this run's are read back; a later _finish without _start_checks checks none
        self.ctx.queue.submit([encoder.finish()])
        return PendingReadback(self.ctx, staging, layout, host_values, extra_slice, checks)

    def _replay(self, plan: Plan, feeds: dict[str, Any]) -> PendingReadback:
        for name, t in plan.input_tensors.items():
            try:
                self._upload_input(name, feeds[name], t)
            except _TooLarge:
                raise PlanInvalid(name) from None  # e.g. int64 values past int32: this run records anew
        self._start_checks(plan.index_checks)
        stamps = None
        if self.profile_layers and self.ctx.has_timestamps:
            inside = stamps_inside_passes(self.ctx)
            if self.profile_layers != "whole":
                stamps = _Stamps(self, inside=inside)
            elif inside:  # the run's two ends need stamps outside any layer's pass
                stamps = _Stamps(self, inside=True, whole=True)
        started = time.perf_counter()
        # The encoder (and its first pass) made while the previous run was on the GPU, if any.
        stream = self._next_stream or _CommandStream(self.ctx.device, self.debug_groups, checked=False)
        self._next_stream = None
        self._emit_steps(stream, plan.steps, stamps)
        if stamps is not None:
            stamps.finish(stream)
        # Host time spent encoding this replay (including any fallback layers' own work).
        self.last_encode_seconds = time.perf_counter() - started
        encoder = stream.take()
        extra = None
        if stamps is not None and stamps.count:
            # The resolved timestamps ride in the outputs' staging buffer: one map, no extra sync.
            self.last_layer_gpu_ns = {}
            extra = (stamps.resolve(encoder), 8 * stamps.count, self._set_layer_times(stamps))
        readback = self._finish(encoder, plan.outputs, extra)
        # Creating an encoder and beginning a pass cost ~50 us each on wgpu-native: do it now, while the
        # GPU runs what was just submitted, rather than at the start of the next run.
        self._next_stream = _CommandStream(self.ctx.device, self.debug_groups, checked=False)
        self._next_stream.compute_pass()
        return readback

    def _set_layer_times(self, stamps: _Stamps) -> Callable[[np.ndarray], None]:
        def store(raw: np.ndarray) -> None:
            self.last_layer_gpu_ns = stamps.durations(raw.view(np.uint64).astype(np.int64))
            self.last_layer_spans = stamps.span_counts()

        return store

    # -- profiling ----------------------------------------------------------------------------------
    MAX_QUERIES = 4096  # per query set (wgpu's limit)

    def _query_set(self, index: int) -> Any:
        while len(self._query_sets) <= index:
            self._query_sets.append(self.ctx.device.create_query_set(type="timestamp", count=self.MAX_QUERIES,
                                                                     label="wgsentis layer timestamps"))
        return self._query_sets[index]


# Timestamps written between layers need both: inside the open pass, and on the encoder around copies.
_INSIDE_STAMPS = frozenset({"timestamp-query-inside-passes", "timestamp-query-inside-encoders"})


def stamps_inside_passes(ctx: GPUContext) -> bool:
    """Whether the adapter can write timestamps between layers (inside passes and around copies)."""
    return _INSIDE_STAMPS <= set(ctx.info.features)


class _CommandStream:
    """A command encoder with at most one open compute pass: dispatches open it, copies close it,
    ``take()`` hands the encoder over (to submit) and starts a fresh one."""

    def __init__(self, device: Any, labels: bool = False, checked: bool = True) -> None:
        self.device = device
        self._encoder: Any = device.create_command_encoder(label="wgsentis run")
        self.cpass: Any = None
        self.pipeline: Any = None  # set in the open pass
        self.pass_timestamps: dict[str, Any] | None = None  # for the next pass opened
        # Pass labels (for captures) cost wgpu-py ~8 us of string conversion a pass: only with debug groups.
        self.pass_label = "wgsentis layers" if labels else None
        self.native = _native_pass_calls(checked)

    @property
    def encoder(self) -> Any:
        if self._encoder is None:
            self._encoder = self.device.create_command_encoder(label="wgsentis run")
        return self._encoder

    def compute_pass(self) -> Any:
        if self.cpass is None:
            kwargs = {"timestamp_writes": self.pass_timestamps} if self.pass_timestamps else {}
            if self.pass_label:
                kwargs["label"] = self.pass_label
            self.cpass = self.encoder.begin_compute_pass(**kwargs)
            self.pass_timestamps = None
            self.pipeline = None
        return self.cpass

    def end_pass(self) -> None:
        if self.cpass is not None:
            self.cpass.end()
            self.cpass = None

    def encoder_for_copies(self) -> Any:
        self.end_pass()
        return self.encoder

    def dispatch(self, d: Dispatch) -> None:
        cpass = self.cpass if self.cpass is not None else self.compute_pass()
        native = self.native
        if native is not None:
            handle = cpass._internal
            if d.pipeline is not self.pipeline:  # consecutive layers often share one (the matmul's)
                native[0](handle, d.pipeline._internal)
                self.pipeline = d.pipeline
            native[1](handle, 0, d.bind_group._internal, 0, native[3])
            native[2](handle, *d.groups)
            return
        if d.pipeline is not self.pipeline:
            cpass.set_pipeline(d.pipeline)
            self.pipeline = d.pipeline
        cpass.set_bind_group(0, d.bind_group)
        cpass.dispatch_workgroups(*d.groups)

    def copy(self, c: Copy) -> None:
        self.end_pass()
        c.encode(self.encoder)

    def take(self) -> Any:
        """The encoder so far (to submit); later commands go to a fresh one, made when first needed."""
        self.end_pass()
        encoder = self.encoder
        self._encoder = None
        return encoder


@functools.cache  # every replay makes a stream: resolve the functions once
def _native_pass_calls(checked: bool = True) -> tuple[Any, Any, Any, Any] | None:
    """wgpu-native's set-pipeline, set-bind-group and dispatch calls and its NULL, or None where this
    wgpu-py differs. A replay encodes ~100 dispatches per model run; wgpu-py's methods build a
    dynamic-offset array for every set_bind_group (13 us a dispatch in all, 4 us this way). ``checked``:
    through wgpu-py's wrappers that turn a validation error into an exception (~1 us a call: two thirds
    of a replay's encoding); replays of a recorded plan, whose every call was checked when it was
    recorded, call the functions directly. Bind groups and pipelines stay alive in the recorded plan."""
    try:
        from wgpu.backends.wgpu_native import _api

        lib = _api.libf if checked else _api.lib
        return (lib.wgpuComputePassEncoderSetPipeline, lib.wgpuComputePassEncoderSetBindGroup,
                lib.wgpuComputePassEncoderDispatchWorkgroups, _api.ffi.NULL)
    except Exception:  # any mismatch with this wgpu-py: its public methods instead
        return None


class _Stamps:
    """Per-layer GPU timestamps of a profiled replay.

    Where the adapter writes timestamps inside passes, they go between layers in the open pass (or on
    the encoder around copies): a pass per layer costs ~0.15 ms each on some drivers (lavapipe),
    which would swamp small layers. Otherwise each layer gets its own pass with timestamp writes
    (copies then go untimed).
    """

    def __init__(self, program: GPUProgram, inside: bool, whole: bool = False) -> None:
        self.program = program
        self.inside = inside
        self.whole = whole  # one span (layer -1) from the first layer's start to the run's end
        self.count = 0
        self.spans: list[tuple[int, int, int]] = []  # (layer index, query at start, query at end)
        self._start = -1
        self._last_end = -1  # query of the last layer's end stamp, and the pass it was written in
        self._last_pass: Any = None

    def _next(self) -> tuple[Any, int, int]:
        q = self.count
        self.count += 1
        return self.program._query_set(q // GPUProgram.MAX_QUERIES), q % GPUProgram.MAX_QUERIES, q

    def _write(self, stream: _CommandStream) -> int:
        from wgpu.backends.wgpu_native.extras import write_timestamp

        query_set, index, q = self._next()
        write_timestamp(stream.cpass if stream.cpass is not None else stream.encoder, query_set, index)
        return q

    def begin_layer(self, stream: _CommandStream, layer_index: int) -> None:
        if self.whole:
            if self.count == 0:
                self._start = self._write(stream)
            return
        if self.inside:
            # The previous layer's end stamp starts this one when nothing ran in between (same open pass).
            if not (self._last_end >= 0 and stream.cpass is not None and stream.cpass is self._last_pass):
                self._start = self._write(stream)
            else:
                self._start = self._last_end
            return
        stream.end_pass()
        # Only pairs are taken in this scheme, so a pair starts at an even query and never straddles
        # two query sets (MAX_QUERIES is even).
        query_set, begin, q = self._next()
        _, end, _ = self._next()
        stream.pass_timestamps = {"query_set": query_set, "beginning_of_pass_write_index": begin,
                                  "end_of_pass_write_index": end}
        self._start = q

    def end_layer(self, stream: _CommandStream, layer_index: int) -> None:
        if self.whole:
            return
        if self.inside:
            self._last_end = self._write(stream)
            self._last_pass = stream.cpass
            self.spans.append((layer_index, self._start, self._last_end))
            return
        if stream.pass_timestamps is not None:
            # The layer opened no compute pass (copies only): its pair was never written. Give it
            # back, since every query up to ``count`` is resolved, and resolving one never written
            # waits for it forever on some drivers (NVIDIA's: the readback then never completes).
            stream.pass_timestamps = None
            self.count -= 2
            return
        stream.end_pass()
        self.spans.append((layer_index, self._start, self._start + 1))

    def resolve(self, encoder: Any) -> Any:
        """Record the resolve of every query written into a buffer; returns that buffer."""
        usage = self.program.ctx.wgpu.BufferUsage
        resolved = self.program._resolve_buffer
        if resolved is None or resolved.size < 8 * self.count:  # kept across runs: one per program
            resolved = self.program.ctx.device.create_buffer(size=8 * self.count,
                                                             usage=usage.QUERY_RESOLVE | usage.COPY_SRC,
                                                             label="wgsentis resolved timestamps")
            self.program._resolve_buffer = resolved
        for set_index in range((self.count + GPUProgram.MAX_QUERIES - 1) // GPUProgram.MAX_QUERIES):
            first = set_index * GPUProgram.MAX_QUERIES
            n = min(GPUProgram.MAX_QUERIES, self.count - first)
            encoder.resolve_query_set(self.program._query_set(set_index), 0, n, resolved, 8 * first)
        return resolved

    def finish(self, stream: _CommandStream) -> None:
        """After the last layer: the closing stamp of a ``whole`` run."""
        if self.whole and self.count:
            self.spans.append((-1, self._start, self._write(stream)))

    def span_counts(self) -> dict[int, int]:
        """Layer index -> how many timed intervals its duration sums (more than one around copies)."""
        out: dict[int, int] = {}
        for layer_index, _begin, _end in self.spans:
            out[layer_index] = out.get(layer_index, 0) + 1
        return out

    def durations(self, stamps: np.ndarray) -> dict[int, int]:
        """Layer index -> GPU nanoseconds (summed over a layer's spans) from the resolved ``stamps``."""
        out: dict[int, int] = {}
        for layer_index, begin, end in self.spans:
            out[layer_index] = out.get(layer_index, 0) + max(0, int(stamps[end] - stamps[begin]))
        return out


class _HostProgram:
    """Stands in for the CPU GraphProgram where kernels ask for subprograms (control flow)."""

    def __init__(self, program: GPUProgram) -> None:
        from wgsentis.backends.cpu import GraphProgram

        self._cpu = GraphProgram(Graph("host", [], [], {}, []), 1)
        self.program = program
        self.graph = program.graph  # whose constants a kernel may keep derived weights of

    @property
    def control(self) -> Any:
        """The GPU program's RunControl for the run in progress (what Loop/Scan kernels check)."""
        return self.program.control

    def subprogram(self, graph: Graph) -> Any:
        return self._cpu.subprogram(graph)


def _host_read(layer: Layer, args: list[Any], env: dict[str, Any]) -> set[str]:
    """Names of a layer's inputs that its GPU builder received as host values (read on the host)."""
    return {n for n, a in zip(layer.inputs, args, strict=False)
            if n and isinstance(a, np.ndarray) and isinstance(env.get(n), GTensor)}


def _all_host(args: list[Any]) -> bool:
    return all(not isinstance(a, GTensor) or a.host is not None for a in args)


def _host_of(value: Any) -> Any:
    return value.host if isinstance(value, GTensor) else value


__all__ = ["GPUProgram", "GTensor", "KernelContext", "PendingReadback", "Recorder", "loop_passes"]
