"""Device tensors and the small rules every GPU program shares: allocations (a buffer, or a slice of a planned
arena), GTensor and GTexture, binding sizes, workgroup grids, loop-pass counting, pipeline keys and uniform
parameter packing, and the runtime's internal signals to control-flow programs."""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np

from wgsentis.backends.gpu.dtypes import GPU_TYPES, TooLargeForDevice
from wgsentis.errors import DeviceError

_FLOAT_BITS, _FLOAT_WORD = struct.Struct("<f"), struct.Struct("<I")

PARAM_WORDS = 128  # uniform words per dispatch (32 x vec4<u32>), see wgsl/common/params.wgsl
# Loop passes a kernel may make that its builder does not count (Recorder.loops_fit): loops over a tensor's rank
# (index arithmetic, at most a few dozen passes) and small constant ones (mod_float.wgsl's 300 steps).
LOOP_ALLOWANCE = 512
# Linear textures hold a buffer's bytes in order, LINEAR_TEXELS texels (16 KiB) per row: texel t is at
# (t & (LINEAR_TEXELS - 1), t >> LINEAR_SHIFT). A row of that width is a multiple of the 256 bytes per row
# that copy_buffer_to_texture asks for, so a buffer reaches such a texture by a transfer copy (a memcpy
# on lavapipe: 0.15 ms for 3.2 MB, where a copy shader storing texels takes 1.5 ms).
LINEAR_SHIFT = 10
LINEAR_TEXELS = 1 << LINEAR_SHIFT
ALIGN = 256  # bytes: storage-buffer offset alignment (WebGPU's minimum) and the reservation granule



class NeedsDeviceValues(Exception):  # noqa: N818 - internal: a tracing builder needs a value only the device has
    """Raised by ``GPUProgram.read_scalar`` while tracing: the layer cannot be traced past, the run is recorded
    as it runs instead."""


class Declined(Exception):  # noqa: N818 - internal: a builder says why it leaves a layer to the host
    """Raised by a program builder instead of answering NotImplemented, with the reason the layer falls back: the
    input, dtype, rank or attribute it cannot take and why. The runtime puts the layer on the host with it."""


def describe_arguments(layer: Any, args: list[Any]) -> str:
    """What a builder was given, for the reason of a fallback whose builder gave none: each input's name, dtype,
    shape and where it lives, and the layer's attributes (subgraphs named, not printed)."""
    parts = []
    for position, (name, value) in enumerate(zip(layer.inputs, args, strict=False)):
        if value is None:
            continue
        dtype = getattr(value, "dtype", None)
        shape = getattr(value, "shape", None)
        if dtype is None or shape is None:
            what = type(value).__name__
        else:
            where = "device" if isinstance(value, GTensor) else "host"
            what = f"{np.dtype(dtype).name}{list(shape)} (rank {len(shape)}, {where})"
        parts.append(f"input {position} '{name}' {what}")
    attrs = [f"{key}={'<graph>' if hasattr(value, 'layers') else value!r}"
             for key, value in sorted(layer.attrs.items())]
    text = "; ".join(parts) or "no inputs"
    return text + (f"; attributes {', '.join(attrs)}" if attrs else "")


class SubgraphDeclined(Exception):  # noqa: N818 - internal: a control-flow layer runs on the host instead
    """A layer of an If branch or Loop body would fall back: the control-flow layer falls back as a whole."""

def aligned(n: int, a: int = ALIGN) -> int:
    """``n`` rounded up to a multiple of ``a``."""
    return (n + a - 1) // a * a


def reserved_bytes(nbytes: int) -> int:
    """Device bytes reserved for a tensor of ``nbytes``: whole 256-byte granules, at least one (shaders may read
    a vec4 past a tensor's last element; a granule keeps that read inside what the tensor owns)."""
    return max(ALIGN, aligned(nbytes))


class Allocation:
    """Device memory holding one tensor's data: ``reserved`` bytes at ``offset`` in ``buffer``. While a plan is
    recorded it is a buffer of the recording's pool; the planner then moves it into the plan's arena (a new
    buffer and offset). ``refs`` counts the live tensor names (a tensor and its views) that still need it;
    ``born``/``dies`` are the first and last ticks of the recording's clock that use it (one tick per placed
    layer, a subgraph's layers included; -1: before the first layer), the lifetime the planner packs arenas
    by."""

    __slots__ = ("born", "buffer", "dies", "nbytes", "offset", "persistent", "refs", "reserved")

    def __init__(self, buffer: Any, nbytes: int, persistent: bool = False, offset: int = 0,
                 reserved: int | None = None, born: int = -1) -> None:
        self.buffer = buffer
        self.offset = offset
        self.nbytes = nbytes
        self.reserved = reserved if reserved is not None else max(4, int(buffer.size) - offset)
        self.persistent = persistent
        self.refs = 0
        self.born = born
        self.dies: int | None = None  # None: alive to the end of the run (outputs, never released)

    def move(self, buffer: Any, offset: int) -> None:
        """Point this allocation at ``offset`` in ``buffer`` (the planner's arena)."""
        self.buffer, self.offset = buffer, offset


class GTensor:
    """A tensor in device memory: contiguous, row-major, 4 bytes per element.

    ``host`` holds the host value when one is known without a download (model inputs, uploaded
    constants), so layers that need it on the host never sync. ``chunks`` splits a tensor above
    the binding limit into row blocks, each its own allocation. ``layout`` is a texture tensor's
    place in its texture (gpu-pixel's ``pixel_layout.TextureLayout``; a view has its own), None in a buffer.
    ``first`` is the element of ``alloc`` where this tensor's element 0 lies: 0, except for a *window*
    (``Recorder.window``), a part of a larger tensor that a dispatch binds from there on (its byte offset a
    multiple of the device's storage-offset alignment). Windows only ever reach bindings and copies, never a
    layer's outputs (readback and uploads address whole allocations).
    """

    __slots__ = ("alloc", "bound", "chunks", "dtype", "first", "host", "layout", "name", "shape")

    def __init__(self, alloc: Allocation | None, shape: tuple[int, ...], dtype: np.dtype, name: str = "",
                 host: np.ndarray | None = None, chunks: list[tuple[int, int, Allocation]] | None = None,
                 first: int = 0) -> None:
        self.alloc = alloc
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.name = name
        self.host = host
        self.chunks = chunks  # (row_start, row_count, allocation)
        self.layout: Any = None
        self.first = int(first)
        # int64 tensors: a bound on |value| the plan relies on (placement.int64_result_bounds), None: any int32.
        self.bound: int | None = None

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
    """A 2-D float32 matrix held as an rgba32float texture: texel (x, y) holds columns 4x..4x+3 of row y. Some
    drivers vectorise texture loads where they scalarise storage-buffer loads."""

    __slots__ = ("name", "shape", "texture", "view")

    def __init__(self, texture: Any, shape: tuple[int, int], name: str) -> None:
        self.texture = texture  # None: a scratch slot reserved but not made yet (memory.ScratchTextures)
        self.view = texture.create_view() if texture is not None else None
        self.shape = shape
        self.name = name

    def replace(self, texture: Any, shape: tuple[int, int], view: Any = None) -> None:
        """Hold ``texture`` from now on (a scratch slot grown taller); bind groups made earlier keep the old one.
        ``view``: a view of ``texture`` to share (tensors laid in one texture), else a new one."""
        self.texture = texture
        self.view = texture.create_view() if view is None else view
        self.shape = shape


def binding_size(t: GTensor, limit: int) -> int:
    """Bytes of ``t``'s allocation to bind from ``t.first`` on: all it reserves from there, or the binding limit
    when that is larger than the tensor needs (a window's bytes past its end belong to the same larger tensor;
    a shader may read them, never write them). Raises TooLargeForDevice for a split tensor or one over the
    limit."""
    if t.alloc is None:
        raise TooLargeForDevice(f"tensor '{t.name}' {list(t.shape)} is split in row blocks; this program binds it "
                                "whole")
    size = max(4, t.alloc.reserved - 4 * t.first)
    if size <= limit:
        return size
    if t.nbytes > limit // 16 * 16:
        raise TooLargeForDevice(f"tensor '{t.name}' {list(t.shape)} ({t.nbytes} bytes) exceeds the device's "
                                f"binding limit of {limit} bytes")
    return limit // 16 * 16  # a reservation past the limit for a tensor within it: bind the part within


def fits_binding(t: GTensor, limit: int) -> bool:
    """Whether a dispatch can bind ``t`` (``binding_size`` would not raise)."""
    return t.alloc is not None and t.nbytes <= limit // 16 * 16


def window_grain(align: int, stride: int) -> int:
    """The smallest count of ``stride``-element steps whose bytes are a multiple of ``align``: windows that start
    a whole number of such steps into a tensor start where a binding may (``Recorder.window``)."""
    words = max(1, align // 4)
    return words // math.gcd(words, max(int(stride), 1))


def fold_groups(groups: int, limit: int) -> tuple[int, int, int]:
    """Fold a 1-D workgroup count above the per-dimension limit into a 2-D grid (x * y >= groups)."""
    if groups <= limit:
        return (groups, 1, 1)
    y = math.ceil(groups / limit)
    x = math.ceil(groups / y)
    if y > limit:
        raise DeviceError(f"{groups} workgroups exceed the device's {limit} x {limit} grid")
    return (x, y, 1)


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


def pipeline_key(shader: str, subs: dict[str, str], constants: dict[str, int | float],
                 inputs: list[tuple[str, int]], *, faults: bool = False, stage: str = "compute",
                 targets: tuple[str, ...] = ()) -> tuple:
    """The one place a pipeline's cache key is built: program, substitutions, override constants
    (the workgroup size among them), each input's storage type and rank, whether the fault buffer
    is bound (a binding more in the layout), the stage ("compute", or "render" for a pixel program) and a
    render pipeline's target formats."""
    return (shader, tuple(sorted(subs.items())), tuple(sorted(constants.items())), tuple(inputs), bool(faults),
            stage, tuple(targets))


def pack_params(params: list[int | float], shader: str) -> np.ndarray:
    """Pack ints (as u32/i32 bit patterns) and floats (as f32 bit patterns) into the uniform words."""
    if len(params) > PARAM_WORDS:
        raise DeviceError(f"shader '{shader}': {len(params)} parameters exceed {PARAM_WORDS}")
    words = np.zeros(PARAM_WORDS, dtype=np.uint32)
    words[:len(params)] = [_float_word(v) if isinstance(v, float | np.floating) else int(v) & 0xFFFFFFFF
                           for v in params]
    return words


UDIV_MAX_DIVISOR = 1 << 24  # wgsl/common/udiv.wgsl is exact up to this divisor (and numerators below 2^31)


def udiv_words(divisor: int) -> tuple[int, float]:
    """The two uniform words of a run-time divisor for wgsl/common/udiv.wgsl's ``udiv(n, d, rcp)``: the divisor and
    its float32 reciprocal. A size kept in uniforms this way serves every size from one pipeline, where an override
    constant compiles a pipeline per size. ValueError outside the divisors udiv is exact for."""
    divisor = int(divisor)
    if not 1 <= divisor <= UDIV_MAX_DIVISOR:
        raise ValueError(f"udiv divisor {divisor} is outside 1..{UDIV_MAX_DIVISOR}")
    return divisor, float(np.float32(1.0) / np.float32(divisor))


def _float_word(value: float) -> int:
    """The bit pattern of ``value`` rounded to float32 (a uniform word): through struct (a numpy scalar per word cost
    a trace of a 600-layer decoder ~2 ms); past float32's range it rounds to infinity as numpy does."""
    try:
        return _FLOAT_WORD.unpack(_FLOAT_BITS.pack(value))[0]
    except OverflowError:
        with np.errstate(over="ignore"):  # infinity is the float32 value meant
            return int(np.array(value, dtype=np.float32).view(np.uint32))
