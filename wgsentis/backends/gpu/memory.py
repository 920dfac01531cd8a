"""Device memory a GPU program owns: the recording pool of intermediate buffers, the uniform arena, the
constant store (weights as buffers, textures or float16 words, and host-side data derived from them) and the
scratch textures layers share, each owned by one program and emptied by its ``close()``; and a plan's host values
(``PlanValues``: what the host computed for one signature), owned by that plan."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from wgsentis.backends.gpu.device import GPUContext
from wgsentis.backends.gpu.dtypes import TooLargeForDevice, to_device_array
from wgsentis.backends.gpu.tensors import LINEAR_TEXELS, PARAM_WORDS, Allocation, GTensor, GTexture, reserved_bytes
from wgsentis.errors import DeviceError


class BufferPool:
    """Intermediate buffers a recording reuses once the tensors in them are dead (best fit by size). The
    recording runs on them; the planner then lays the plan's tensors out in arenas, and the pool is dropped."""

    def __init__(self, ctx: GPUContext) -> None:
        self.ctx = ctx
        self.free: list[Any] = []
        self.total_bytes = 0
        self.count = 0

    def acquire(self, nbytes: int, what: str = "") -> Any:
        """A free buffer of at least ``nbytes``, or a new one; ``what`` (the tensor it is for) names it in a
        DeviceOutOfMemoryError when the device cannot make it."""
        want = reserved_bytes(nbytes)
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
    """Per-dispatch parameter blocks packed into uniform buffers, written once when a plan is recorded (replays
    write none). Buffers double in slots from ``first_slots`` up to ``max_slots``: a plan of a few dispatches
    holds a few kilobytes, a large one whole buffers. ``deferred`` (a traced plan, which nothing runs before
    its first replay): the blocks are gathered on the host and each buffer written once by ``flush``, instead of
    one queue write per dispatch (~10 us of host time each, a few percent of tracing a new input size)."""

    SLOT = PARAM_WORDS * 4

    def __init__(self, ctx: GPUContext, first_slots: int = 8, max_slots: int = 128, deferred: bool = False) -> None:
        self.ctx = ctx
        self.stride = max(self.SLOT, (self.SLOT + ctx.uniform_align - 1) // ctx.uniform_align * ctx.uniform_align)
        self.next_slots = first_slots
        self.max_slots = max_slots
        self.buffers: list[Any] = []
        self.capacity = 0  # slots of the last buffer
        self.used = 0
        self.total_bytes = 0
        self.deferred = deferred
        self._pending: np.ndarray | None = None  # deferred: the last buffer's words not yet written

    def allocate(self, words: np.ndarray) -> tuple[Any, int]:
        """A slot holding ``words``: (buffer, offset)."""
        if self.used == self.capacity:
            self.flush()
            usage = self.ctx.wgpu.BufferUsage
            self.capacity, self.next_slots = self.next_slots, min(2 * self.next_slots, self.max_slots)
            size = self.stride * self.capacity
            self.buffers.append(self.ctx.create_buffer(size, usage.UNIFORM | usage.COPY_DST, "wgsentis params",
                                                       "a uniform parameter buffer"))
            self.total_bytes += size
            self.used = 0
            if self.deferred:
                self._pending = np.zeros(size // 4, np.uint32)
        buf, offset = self.buffers[-1], self.used * self.stride
        self.used += 1
        if self._pending is not None:
            self._pending[offset // 4: offset // 4 + len(words)] = words
        else:
            self.ctx.queue.write_buffer(buf, offset, words)
        return buf, offset

    def flush(self) -> None:
        """Write the blocks gathered so far (``deferred``) into the last buffer."""
        if self._pending is not None and self.used:
            self.ctx.queue.write_buffer(self.buffers[-1], 0, self._pending[: self.used * self.stride // 4])
        self._pending = None

    def close(self) -> None:
        self._pending = None
        for buf in self.buffers:
            buf.destroy()
        self.buffers = []
        self.capacity = self.used = 0
        self.total_bytes = 0


class ConstantStore:
    """Weights on the device, uploaded once per program and kept until ``close()``: storage buffers (split in
    row blocks above the binding limit), rgba32float/rgba16float textures, float16 words; and ``derived``,
    host arrays computed from constants (repacked or transposed weights) that builders upload. Entries are
    keyed by the source array's id and hold the array, so an id is never mistaken for another array's."""

    def __init__(self, ctx: GPUContext) -> None:
        self.ctx = ctx
        self.entries: dict[Any, Any] = {}  # key -> uploaded tensor or texture
        self.sources: dict[Any, Any] = {}  # key -> the host arrays the entry was made from (kept alive)
        self.derived_arrays: dict[tuple, tuple[np.ndarray, tuple[np.ndarray, ...]]] = {}
        self.nbytes = 0
        self.uploads: list[tuple[str, int]] = []  # (name, bytes) of each upload, in order
        self._owned: list[Any] = []  # buffers and textures to destroy on close
        self._derived_ids: set[int] = set()  # ids of the arrays in derived_arrays (they hold them)
        # While a layer that may share its template with layers of other weights builds (layer_reuse.py): each
        # constant it asked for, as (sources, result, lookup), lookup(sources) finding the result of other
        # sources of the same shapes among what is kept (None where it is not), never making anything.
        self.trail: list[tuple[tuple[np.ndarray, ...], Any, Callable[[tuple], Any]]] | None = None

    def note(self, sources: tuple[np.ndarray, ...], result: Any, lookup: Callable[[tuple], Any]) -> None:
        """A constant a builder asked for, made or kept from ``sources`` (see ``trail``)."""
        if self.trail is not None:
            self.trail.append((sources, result, lookup))

    def derived(self, key: tuple, sources: tuple[np.ndarray, ...], make: Callable[[], np.ndarray]) -> np.ndarray:
        """``make()`` computed once per (key, source arrays) and kept, with its sources, until ``close()``."""
        value = self._derived_hit(key, sources)
        if value is None:
            value = np.ascontiguousarray(make())
            self.derived_arrays[(*(id(a) for a in sources), *key)] = (value, sources)
            self._derived_ids.add(id(value))
        self.note(sources, value, lambda others: self._derived_hit(key, others))
        return value

    def _derived_hit(self, key: tuple, sources: tuple[np.ndarray, ...]) -> np.ndarray | None:
        hit = self.derived_arrays.get((*(id(a) for a in sources), *key))
        return hit[0] if hit is not None and all(a is b for a, b in zip(hit[1], sources, strict=True)) else None

    def _hit(self, key: Any, value: np.ndarray) -> Any:
        hit = self.entries.get(key)
        return hit if hit is not None and self.sources.get(key) is value else None

    def _noted(self, key_of: Callable[[np.ndarray], Any], value: np.ndarray, result: Any) -> Any:
        """``result``, made or kept under ``key_of(value)``, noted on the trail; returns it."""
        if self.trail is not None and result is not None:
            self.note((value,), result, lambda others: self._hit(key_of(others[0]), others[0]))
        return result

    def _keep(self, key: Any, value: np.ndarray, uploaded: Any, nbytes: int, name: str) -> Any:
        self.entries[key] = uploaded
        self.sources[key] = value
        self.nbytes += nbytes
        self.uploads.append((name or "constant", nbytes))
        return uploaded

    def buffer(self, data: np.ndarray, label: str) -> Allocation:
        """A persistent storage buffer holding ``data`` (4 bytes when ``data`` is empty)."""
        usage = self.ctx.wgpu.BufferUsage
        buf = self.ctx.create_buffer(max(4, data.nbytes), usage.STORAGE | usage.COPY_SRC, label, f"constant '{label}'",
                                     data=data if data.size else np.zeros(4, np.uint32))
        self._owned.append(buf)
        return Allocation(buf, data.nbytes, persistent=True)

    def tensor(self, value: np.ndarray, name: str) -> GTensor:
        """``value`` as a device tensor (row blocks within the binding limit when it is larger)."""
        key = id(value)
        hit = self._hit(key, value)
        if hit is None:
            t, nbytes = device_tensor(self.ctx, value, name, self.buffer)
            hit = self._keep(key, value, t, nbytes, name)
        return self._noted(id, value, hit)  # (keyed by the array's id)

    def static(self, value: np.ndarray) -> np.ndarray:
        """``value``, a module-level array of a builder's (a zero bias), marked as kept by the program: uploaded
        once per program, not once per plan (``GPUProgram.host_values_for``)."""
        if id(value) not in self._derived_ids:
            self.derived_arrays[("static", id(value))] = (value, (value,))
            self._derived_ids.add(id(value))
        return value

    def is_static(self, value: np.ndarray) -> bool:
        """Whether ``value`` is a builder's module-level array that ``static`` marked (the same for every layer)."""
        return ("static", id(value)) in self.derived_arrays

    def is_derived(self, value: np.ndarray) -> bool:
        """Whether ``value`` is one of the arrays ``derived`` made or ``static`` marked (kept as long as the
        program)."""
        return id(value) in self._derived_ids

    @property
    def texture_limit(self) -> int:
        return int(self.ctx.limits.get("max-texture-dimension-2d", 8192))

    def texture(self, value: np.ndarray, name: str, *, half: bool = False) -> GTexture | None:
        """A (rows, cols) float32 matrix as an rgba32float texture (rgba16float when ``half``); None when it
        exceeds the device's texture size limit."""
        return self._noted(lambda v: ("texture", id(v), half), value, self._texture(value, name, half))

    def _texture(self, value: np.ndarray, name: str, half: bool) -> GTexture | None:
        key = ("texture", id(value), half)
        hit = self._hit(key, value)
        if hit is not None:
            return hit
        if value.ndim != 2 or value.dtype != np.float32:
            raise DeviceError(f"texture '{name}': a 2-D float32 matrix is needed, got {value.dtype}{list(value.shape)}")
        rows, cols = value.shape
        width = max(1, (cols + 3) // 4)
        if rows > self.texture_limit or width > self.texture_limit:
            return None
        dtype, texel = (np.float16, 8) if half else (np.float32, 16)
        data = np.zeros((rows, width * 4), dtype)
        data[:, :cols] = value
        usage = self.ctx.wgpu.TextureUsage
        texture = self.ctx.create_texture((width, max(rows, 1), 1), "rgba16float" if half else "rgba32float",
                                          usage.TEXTURE_BINDING | usage.COPY_DST, name, data.nbytes,
                                          f"constant '{name}' {list(value.shape)}")
        self._owned.append(texture)
        if rows:
            self.ctx.queue.write_texture({"texture": texture}, data, {"bytes_per_row": width * texel,
                                                                      "rows_per_image": rows}, (width, rows, 1))
        return self._keep(key, value, GTexture(texture, (rows, cols), name), data.nbytes, name or "texture")

    def half(self, value: np.ndarray, name: str) -> GTensor:
        """A float32 matrix (..., cols), cols a multiple of 4, rounded to float16 and uploaded as a storage
        buffer of vec4<f16> rows (read by shaders that ``enable f16``). The tensor is typed int32 with half as
        many columns: that is how its bytes are bound, never how they are read."""
        return self._noted(lambda v: ("half", id(v)), value, self._half(value, name))

    def _half(self, value: np.ndarray, name: str) -> GTensor:
        key = ("half", id(value))
        hit = self._hit(key, value)
        if hit is not None:
            return hit
        if value.dtype != np.float32 or value.ndim < 1 or value.shape[-1] % 4:
            raise DeviceError(f"constant '{name}': float16 storage needs float32 rows of a multiple of 4 values, "
                              f"got {value.dtype}{list(value.shape)}")
        words = np.ascontiguousarray(value.astype(np.float16)).view(np.int32)  # (..., cols / 2)
        if words.nbytes > self.ctx.max_binding:
            raise TooLargeForDevice(f"constant '{name}' ({words.nbytes} bytes in float16) exceeds the binding "
                                    "limit")
        t = GTensor(self.buffer(words, name), words.shape, np.int32, name)
        return self._keep(key, value, t, words.nbytes, name)

    def close(self) -> None:
        """Destroy every buffer and texture (the caller has waited for the work that reads them) and drop the
        host arrays kept with them."""
        for obj in self._owned:
            obj.destroy()
        self._owned = []
        self.entries.clear()
        self.sources.clear()
        self.derived_arrays.clear()
        self._derived_ids.clear()
        self.nbytes = 0


def device_tensor(ctx: GPUContext, value: np.ndarray, name: str,
                  make_buffer: Callable[[np.ndarray, str], Allocation]) -> tuple[GTensor, int]:
    """``value`` as a device tensor in buffers ``make_buffer`` gives (row blocks within the binding limit when it
    is larger: VGG-19's 411 MB FC weight), and the bytes uploaded."""
    data = to_device_array(value, f"constant '{name}'")
    shape = tuple(value.shape)
    if data.nbytes <= ctx.max_binding:
        return GTensor(make_buffer(data, name), shape, value.dtype, name, host=value), data.nbytes
    rows = shape[0]
    row_bytes = data.nbytes // max(rows, 1)
    per = max(1, ctx.max_binding // max(row_bytes, 1))
    chunks = []
    for start in range(0, rows, per):
        part = np.ascontiguousarray(data[start: start + per])
        chunks.append((start, len(part), make_buffer(part, f"{name}[{start}:{start + len(part)}]")))
    return GTensor(None, shape, value.dtype, name, host=value, chunks=chunks), data.nbytes


class HostValueAllocation(Allocation):
    """A plan's host value in device memory (``PlanValues``), with the words it holds: a layer template that binds
    it (``layer_reuse``) uploads those words again into the plan it is stamped onto, never binding another plan's
    memory (which a trace that stopped part way never even made)."""

    __slots__ = ("words",)

    def __init__(self, buffer: Any, words: np.ndarray, offset: int = 0) -> None:
        super().__init__(buffer, words.nbytes, persistent=True, offset=offset, reserved=max(4, words.nbytes))
        self.words = words


class PlanValues:
    """Host arrays a recording's builders upload that are not the model's constants (what a host layer computed for
    this signature: a decoder's position embeddings and attention mask, indices from shape arithmetic; tables a
    builder made), kept with the plan recorded, not with the program: a model fed a new size every call would
    otherwise keep every size's values until it is closed (the program's constant store keys arrays by identity
    and holds them). A traced plan (``deferred``: nothing runs before its first replay) packs the small ones into
    one storage buffer, written once as the trace ends (``flush``), instead of a buffer each; a plan recorded as it
    runs makes each at once. ``uploads``: (name, bytes) of each, for the run's transfers; ``nbytes``: the device
    bytes they hold."""

    PACKED_BYTES = 64 << 10  # larger values get buffers of their own

    def __init__(self, ctx: GPUContext, deferred: bool) -> None:
        self.ctx = ctx
        self.deferred = deferred
        self.buffers: list[Any] = []
        # gpu-pixel's: one texture per value and layout (``keep_texture``)
        self.textures: list[Any] = []
        self.texture_tensors: dict[tuple, tuple[np.ndarray, GTensor]] = {}
        self.uploads: list[tuple[str, int]] = []
        self.nbytes = 0
        self._seen: dict[int, tuple[np.ndarray, GTensor]] = {}  # id -> (the array, its tensor): one upload each
        self._pending: list[tuple[Allocation, np.ndarray]] = []
        self._packed = 0  # bytes of the packed buffer so far
        self._copies: dict[int, tuple[HostValueAllocation, HostValueAllocation]] = {}  # (copy_of)

    def tensor(self, value: np.ndarray, name: str) -> GTensor:
        """``value`` as a device tensor held by the plan (each array uploaded once per plan)."""
        hit = self._seen.get(id(value))
        if hit is not None and hit[0] is value:
            return hit[1]
        t, nbytes = device_tensor(self.ctx, value, name, self._buffer)
        self._seen[id(value)] = (value, t)
        self.uploads.append((name or "host value", nbytes))
        return t

    def _buffer(self, data: np.ndarray, label: str) -> Allocation:
        size = max(4, data.nbytes)
        if self.deferred and size <= self.PACKED_BYTES:
            # (Bound at its offset once the trace ends: a traced plan's steps are bound after ``flush``.)
            alloc = HostValueAllocation(None, data, offset=self._packed)
            self._pending.append((alloc, data))
            align = max(self.ctx.storage_align, 16)
            self._packed += -(-size // align) * align
            return alloc
        usage = self.ctx.wgpu.BufferUsage
        buf = self.ctx.create_buffer(size, usage.STORAGE | usage.COPY_SRC, label, f"host value '{label}'",
                                     data=data if data.size else np.zeros(1, np.uint32))
        self.buffers.append(buf)
        self.nbytes += size
        return HostValueAllocation(buf, data)

    def copy_of(self, alloc: HostValueAllocation, label: str) -> HostValueAllocation:
        """``alloc``'s words (another plan's host value, which a template binds) uploaded into this plan, once."""
        hit = self._copies.get(id(alloc))
        if hit is None or hit[0] is not alloc:
            hit = self._copies[id(alloc)] = (alloc, self._buffer(alloc.words, label))
            self.uploads.append((label, alloc.words.nbytes))
        return hit[1]

    def keep_texture(self, key: tuple, value: np.ndarray, t: GTensor, texture: Any, nbytes: int, name: str) -> None:
        """gpu-pixel's ``constant_texture`` of ``value`` (``key``: its id and blocked axis): the texture tensor
        ``t`` in ``texture``, ``nbytes`` written, held by the plan."""
        self.texture_tensors[key] = (value, t)
        self.textures.append(texture)
        self.uploads.append((name or "host value", nbytes))
        self.nbytes += nbytes

    def flush(self) -> None:
        """Write the packed values into one buffer and point their allocations at it."""
        if not self._pending:
            return
        packed = np.zeros(self._packed, np.uint8)
        for alloc, data in self._pending:
            packed[alloc.offset: alloc.offset + data.nbytes] = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        usage = self.ctx.wgpu.BufferUsage
        buf = self.ctx.create_buffer(self._packed, usage.STORAGE | usage.COPY_SRC, "wgsentis plan values",
                                     "the host values of a plan", data=packed)
        for alloc, _ in self._pending:
            alloc.buffer = buf
        self.buffers.append(buf)
        self.nbytes += self._packed
        self._pending = []

    def close(self) -> None:
        for obj in [*self.buffers, *self.textures]:
            obj.destroy()
        self.buffers, self.textures = [], []
        self.texture_tensors = {}
        self._seen, self._copies = {}, {}
        self._pending = []
        self.nbytes = 0


class ScratchTextures:
    """Linear rgba32float textures (LINEAR_TEXELS texels a row) that a layer writes as storage and reads as a
    matmul operand (an operand produced on the GPU: im2col columns, Winograd's transformed input). A layer's
    k-th request uses slot k; every layer's slot k is the same texture, as tall as the largest request made of
    it: a layer consumes its operand before the next one writes it (dispatches are ordered), and a linear
    texture holds any matrix that fits its texels. ``get`` reserves, ``realize`` makes the textures; a slot
    that must grow gets a taller texture (``grown``), and steps recorded earlier then bind the new one
    (``GPUProgram`` rebinds them)."""

    def __init__(self, ctx: GPUContext) -> None:
        self.ctx = ctx
        self.slots: list[GTexture] = []
        self.need: dict[int, int] = {}  # slot -> texture rows asked for
        self.grown = False  # a slot got a taller texture since the plans were last bound
        # Which slots (ids of their GTextures) did: only the steps that bind one of them need new bind groups.
        self.replaced: set[int] = set()

    @property
    def nbytes(self) -> int:
        return sum(t.shape[0] * LINEAR_TEXELS * 16 for t in self.slots if t.texture is not None)

    def get(self, slot: int, texels: int, name: str) -> GTexture | None:
        """Slot ``slot``'s texture, reserved for at least ``texels`` texels (made by ``realize``); None past the
        device's texture height."""
        rows = max(1, -(-texels // LINEAR_TEXELS))
        if rows > int(self.ctx.limits.get("max-texture-dimension-2d", 8192)):
            return None
        while len(self.slots) <= slot:
            self.slots.append(GTexture(None, (0, 4 * LINEAR_TEXELS), f"wgsentis scratch {len(self.slots)}"))
        self.need[slot] = max(self.need.get(slot, 0), rows)
        return self.slots[slot]

    def rows(self, tex: GTexture) -> int:
        """The rows ``tex`` has, or will have once realized when it is a reserved slot."""
        for slot, held in enumerate(self.slots):
            if held is tex:
                return max(tex.shape[0], self.need.get(slot, 0))
        return tex.shape[0]

    def realize(self) -> None:
        """Make every slot's texture as tall as asked for."""
        for slot, rows in self.need.items():
            tex = self.slots[slot]
            if tex.shape[0] >= rows:
                continue
            if tex.texture is not None:
                # Growing: half as tall again at least, so that sizes creeping up (a decoder's cache, one row a
                # token) grow it a logarithmic number of times, each rebinding the cached plans' steps that bind it.
                limit = int(self.ctx.limits.get("max-texture-dimension-2d", 8192))
                rows = max(rows, min(limit, -(-3 * tex.shape[0] // 2)))
            usage = self.ctx.wgpu.TextureUsage
            texture = self.ctx.create_texture((LINEAR_TEXELS, rows, 1), "rgba32float",
                                              usage.TEXTURE_BINDING | usage.STORAGE_BINDING | usage.COPY_DST,
                                              tex.name, rows * LINEAR_TEXELS * 16, f"scratch operand texture {slot}")
            # The old one is not destroyed: bind groups made earlier (and work in flight) still hold it.
            if tex.texture is not None:
                self.grown = True
                self.replaced.add(id(tex))
            tex.replace(texture, (rows, 4 * LINEAR_TEXELS))

    def close(self) -> None:
        for tex in self.slots:
            if tex.texture is not None:
                tex.texture.destroy()
        self.slots = []
        self.need = {}
