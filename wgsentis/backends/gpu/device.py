"""GPU device: one wgpu adapter and device per process, with the adapter's real limits and the
optional features that help (timestamp queries, shader-f16); shader and pipeline caches."""

from __future__ import annotations

import functools
import hashlib
import re
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np

from wgsentis.errors import DeviceError, DeviceOutOfMemoryError

MAX_PIPELINES = 2048  # compute pipelines the context keeps, least recently used dropped first
MAX_SHADER_MODULES = 1024
# Features requested when the adapter has them.
WANTED_FEATURES = ("timestamp-query", "timestamp-query-inside-passes", "timestamp-query-inside-encoders",
                   "shader-f16")
# Limits raised to the adapter's own values (the defaults are WebGPU's portable minimums).
WANTED_LIMITS = ("max-storage-buffer-binding-size", "max-buffer-size", "max-storage-buffers-per-shader-stage",
                 "max-compute-workgroup-storage-size", "max-compute-invocations-per-workgroup",
                 "max-compute-workgroup-size-x", "max-compute-workgroup-size-y", "max-compute-workgroup-size-z",
                 "max-compute-workgroups-per-dimension", "max-uniform-buffer-binding-size", "max-bind-groups")


@dataclass
class DeviceInfo:
    """What the profiler and ``stats()`` report about the device."""

    name: str
    vendor: str
    backend: str  # Vulkan, Metal, D3D12, ...
    adapter_type: str  # DiscreteGPU, IntegratedGPU, CPU, ...
    driver: str
    limits: dict[str, int] = field(default_factory=dict)
    features: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "vendor": self.vendor, "backend": self.backend, "adapter_type": self.adapter_type,
                "driver": self.driver, "limits": dict(self.limits), "features": list(self.features)}


class HeldBytes:
    """Device bytes held by the live device tensors of one context (``device_tensors.DeviceValue``: the outputs
    of runs with on_device=True); thread-safe, since a value dies on whichever thread drops it last."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.nbytes = 0
        self.count = 0

    def add(self, nbytes: int) -> None:
        with self._lock:
            self.nbytes += nbytes
            self.count += 1

    def remove(self, nbytes: int) -> None:
        with self._lock:
            self.nbytes -= nbytes
            self.count -= 1


@dataclass(frozen=True)
class AdapterInfo:
    """One GPU adapter ``wgsentis.adapters()`` lists: ``index`` is what ``Worker(..., adapter=index)`` takes."""

    index: int
    name: str
    vendor: str
    backend: str  # Vulkan, Metal, D3D12
    adapter_type: str  # DiscreteGPU, IntegratedGPU, VirtualGPU, CPU
    driver: str


def _identity(info: Any) -> dict[str, str]:
    """What DeviceInfo and AdapterInfo say of an adapter, from wgpu's adapter info."""
    return {"name": str(info.get("device", "")), "vendor": str(info.get("vendor", "")),
            "backend": str(info.get("backend_type", "")), "adapter_type": str(info.get("adapter_type", "")),
            "driver": str(info.get("description", ""))}


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


class GPUContext:
    """A device, its queue, and caches of shader modules and pipelines.

    ``limits``: limits to request instead of the adapter's own (each at most the adapter's), e.g. WebGPU's
    portable defaults, or a small max-buffer-size to see what the engine does at a device's edge. The
    process-wide context (``get_context``) takes the adapter's. ``adapter``: the wgpu adapter to open (one of
    ``adapters()``, through ``context_for``); None asks wgpu for its high-performance choice."""

    def __init__(self, limits: dict[str, int] | None = None, adapter: Any = None) -> None:
        try:
            import wgpu
        except Exception as exc:  # pragma: no cover - wgpu is a dependency
            raise DeviceError(f"wgpu is not importable: {exc}") from None
        self.wgpu = wgpu
        self.instance_extras = _apply_instance_extras() if adapter is None else instance_extras()
        reason = "no adapter was returned"
        if adapter is None:
            try:
                adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
            except Exception as exc:
                reason = _first_line(exc)
        if adapter is None:
            raise DeviceError(
                f"no GPU adapter found by wgpu ({reason}). Install a Vulkan driver (on Debian/Ubuntu: "
                "mesa-vulkan-drivers libvulkan1, which gives lavapipe on the CPU) or use the 'cpu' backend"
            )
        features = [f for f in WANTED_FEATURES if f in adapter.features]
        required = {k: adapter.limits[k] for k in WANTED_LIMITS if k in adapter.limits}
        for key, value in (limits or {}).items():
            if key not in adapter.limits or int(value) > int(adapter.limits[key]):
                raise DeviceError(f"GPUContext(limits={limits}): '{key}' is not a limit of adapter "
                                  f"'{adapter.info.get('device')}' or is above its {adapter.limits.get(key)}")
            required[key] = int(value)
        try:
            self.device = adapter.request_device_sync(required_features=features, required_limits=required,
                                                      label="wgsentis")
        except Exception as exc:
            name = adapter.info.get("device")
            raise DeviceError(f"could not open the GPU device on adapter '{name}': {exc}") from None
        self.adapter = adapter
        self.queue = self.device.queue
        self.info = DeviceInfo(**_identity(adapter.info), limits=dict(self.device.limits), features=sorted(features))
        self.limits = dict(self.device.limits)
        self.max_binding = int(self.limits["max-storage-buffer-binding-size"])
        self.max_buffer = int(self.limits["max-buffer-size"])
        self.max_workgroups = int(self.limits["max-compute-workgroups-per-dimension"])
        self.uniform_align = int(self.limits.get("min-uniform-buffer-offset-alignment", 256))
        self.storage_align = int(self.limits.get("min-storage-buffer-offset-alignment", 256))
        self.has_timestamps = "timestamp-query" in features
        self.has_f16 = "shader-f16" in features
        # Bounded: keys hold override constants, some of them shape-derived, so a process that runs models at
        # ever new shapes would grow these without end. Plans keep the pipelines they use alive themselves.
        self._modules: OrderedDict[str, Any] = OrderedDict()
        self._pipelines: OrderedDict[tuple, tuple[Any, Any]] = OrderedDict()
        self._lock = threading.Lock()
        # Pipelines built (cache misses), in all and per owner (the program whose recording asked): what shows
        # that a new size of a model reuses its pipelines (uniform sizes) instead of compiling new ones.
        self.pipelines_created = 0
        self._created_by: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self.held = HeldBytes()  # what callers hold on this device, which the memory budget counts as live

    # -- shaders and pipelines -------------------------------------------------------------------
    def pipeline(self, key: tuple, source: str | Callable[[], str], constants: dict[str, float | int], label: str,
                 owner: Any = None) -> tuple[Any, Any]:
        """The compute pipeline and its bind group layout for ``key`` (built once, then cached); a build is
        counted for ``owner`` (``pipelines_created_by``)."""
        def make(module: Any) -> Any:
            return self.device.create_compute_pipeline(
                layout="auto", label=label,
                compute={"module": module, "entry_point": "main", "constants": dict(constants)})

        return self._cached_pipeline(key, source, label, "pipeline", make, owner)

    def render_pipeline(self, key: tuple, source: str | Callable[[], str], constants: dict[str, float | int],
                        label: str, formats: list[str], owner: Any = None) -> tuple[Any, Any]:
        """The render pipeline (vertex ``vs_main``, fragment ``fs_main`` writing ``formats`` targets) and its bind
        group layout for ``key``, built once and cached with the compute pipelines (``key`` must tell them
        apart: ``tensors.pipeline_key(stage="render", targets=...)``)."""
        def make(module: Any) -> Any:
            return self.device.create_render_pipeline(
                layout="auto", label=label,
                vertex={"module": module, "entry_point": "vs_main"},
                fragment={"module": module, "entry_point": "fs_main", "constants": dict(constants),
                          "targets": [{"format": f} for f in formats]},
                primitive={"topology": "triangle-list"})

        return self._cached_pipeline(key, source, label, "render pipeline", make, owner)

    def _cached_pipeline(self, key: tuple, source: str | Callable[[], str], label: str, kind: str,
                         make: Callable[[Any], Any], owner: Any = None) -> tuple[Any, Any]:
        """The pipeline ``make(module)`` builds from ``source``'s module, and its bind group layout, cached
        under ``key`` (least recently used dropped first); ``kind`` names it in a DeviceError. A build counts
        in ``pipelines_created`` and, with ``owner``, in ``pipelines_created_by(owner)``. ``source`` may be a
        function that makes the text: it is called only on a miss (a plan traced for a new size finds every
        pipeline cached, and assembling hundreds of sources per trace was a tenth of its host time)."""
        with self._lock:
            hit = self._pipelines.get(key)
            if hit is not None:
                self._pipelines.move_to_end(key)
                return hit
            module = self._module(source() if callable(source) else source, label)
            try:
                pipeline = make(module)
            except Exception as exc:
                raise DeviceError(f"{kind} '{label}' could not be created: {exc}") from None
            entry = (pipeline, pipeline.get_bind_group_layout(0))
            self.pipelines_created += 1
            if owner is not None:
                self._created_by[owner] = self._created_by.get(owner, 0) + 1
            self._pipelines[key] = entry
            if len(self._pipelines) > MAX_PIPELINES:
                self._pipelines.popitem(last=False)
            return entry

    def _module(self, source: str, label: str) -> Any:
        """The shader module of ``source``, compiled once (the caller holds the lock)."""
        digest = hashlib.sha1(source.encode()).hexdigest()
        module = self._modules.get(digest)
        if module is not None:
            self._modules.move_to_end(digest)
            return module
        try:
            module = self.device.create_shader_module(code=source, label=label)
        except Exception as exc:
            raise DeviceError(f"shader '{label}' failed to compile: {exc}") from None
        self._modules[digest] = module
        if len(self._modules) > MAX_SHADER_MODULES:
            self._modules.popitem(last=False)
        return module

    @functools.cached_property
    def division_function(self) -> str:
        """The WGSL function (math.wgsl) that divides float32 as the CPU does on this device:
        ``div_plain`` or ``div_rounded``, whichever gives more exact quotients on probe pairs."""
        rng = np.random.default_rng(0)
        n = 4096
        # Quotients stay normal (within 1e+-30): drivers may flush subnormals, which is another matter.
        a = (rng.standard_normal(n) * 10.0 ** rng.integers(-15, 15, n)).astype(np.float32)
        b = (rng.standard_normal(n) * 10.0 ** rng.integers(-15, 15, n)).astype(np.float32)
        a[:2], b[:2] = (5.0, 1.0), (255.0, 3.0)
        expected = a / b
        usage = self.wgpu.BufferUsage
        pipeline, layout = self.pipeline(("probe_division",), wgsl_source("compute/probe_division.wgsl"), {},
                                         "wgsentis division probe")
        buffers = [self.device.create_buffer_with_data(data=v.tobytes(), usage=usage.STORAGE) for v in (a, b)]
        out = self.device.create_buffer(size=8 * n, usage=usage.STORAGE | usage.COPY_SRC)
        staging = self.device.create_buffer(size=8 * n, usage=usage.MAP_READ | usage.COPY_DST)
        group = self.device.create_bind_group(layout=layout, entries=[
            {"binding": i, "resource": {"buffer": buf, "offset": 0, "size": buf.size}}
            for i, buf in enumerate([*buffers, out])])
        encoder = self.device.create_command_encoder(label="wgsentis division probe")
        cpass = encoder.begin_compute_pass()
        cpass.set_pipeline(pipeline)
        cpass.set_bind_group(0, group)
        cpass.dispatch_workgroups(n // 64)
        cpass.end()
        encoder.copy_buffer_to_buffer(out, 0, staging, 0, 8 * n)
        self.queue.submit([encoder.finish()])
        map_for_reading(staging, "the division probe")
        plain, rounded = np.frombuffer(staging.read_mapped(copy=True), np.float32).reshape(2, n)
        staging.unmap()
        for buf in (*buffers, out, staging):
            buf.destroy()
        return "div_rounded" if (rounded == expected).sum() > (plain == expected).sum() else "div_plain"

    @property
    def cached_pipelines(self) -> int:
        return len(self._pipelines)

    def pipelines_created_by(self, owner: Any) -> int:
        """How many pipelines this context built for ``owner`` (a program), the cached ones it reused apart."""
        with self._lock:
            return self._created_by.get(owner, 0)

    @property
    def max_loop_iterations(self) -> int | None:
        """The most loop passes one shader invocation may make in all, or None where the driver sets no limit.

        lavapipe (Mesa's llvmpipe, adapter type CPU) compiles every loop with one counter per invocation that
        starts at LP_MAX_TGSI_LOOP_ITERATIONS = 65535 and drops by one on each pass of any loop (nested or one
        after another, the pass that exits included, and one pass of a loop behind a branch not taken: lanes
        run together under masks); at zero every loop ends after its current pass, silently, and the kernel
        writes wrong results. Measured on Mesa 22.3.6: a 70000-trip loop ran 65535 trips; loops of 40000 then
        40000 trips ran 40000 and 25534; 10 x 10 nested loops used 122 passes; the count is per invocation (64
        invocations of a workgroup each ran 40000 + 25534). Builders count their loops with
        ``gpu_compute.loop_passes`` and check them with ``Recorder.loops_fit``."""
        info = self.info
        names = f"{info.name} {info.vendor} {info.driver}".lower()
        if info.adapter_type.lower() == "cpu" and ("llvmpipe" in names or "lavapipe" in names):
            return 65535
        return None

    # -- memory ------------------------------------------------------------------------------------------
    def create_buffer(self, size: int, usage: int, label: str, what: str = "", data: np.ndarray | None = None) -> Any:
        """A device buffer of ``size`` bytes (initialised from ``data`` when given). Raises
        DeviceOutOfMemoryError naming ``what`` (the tensor or layer it is for; the label when empty) and the
        size when the device cannot make it: above its max-buffer-size, or out of memory."""
        try:
            if data is not None:
                return self.device.create_buffer_with_data(data=data, usage=usage, label=label)
            return self.device.create_buffer(size=size, usage=usage, label=label)
        except Exception as exc:
            raise allocation_error(f"{what} (buffer '{label}')" if what else f"buffer '{label}'", size, exc) from None

    def create_texture(self, size: tuple[int, int, int], texture_format: str, usage: int, label: str, nbytes: int,
                       what: str = "") -> Any:
        """A 2-D texture of ``size`` texels (``nbytes`` in all); errors as ``create_buffer``."""
        try:
            return self.device.create_texture(size=size, format=texture_format, usage=usage, label=label)
        except Exception as exc:
            shape = f"{size[0]} x {size[1]} {texture_format}"
            name = f"{what} (texture '{label}', {shape})" if what else f"texture '{label}' ({shape})"
            raise allocation_error(name, nbytes, exc) from None

    def wait_idle(self, what: str) -> None:
        """Block until the work submitted so far is done (a tiny copy mapped for reading is the fence: wgpu-py
        0.32's on_submitted_work_done_sync raises). ``what`` names the waiter in a DeviceError."""
        usage = self.wgpu.BufferUsage
        src = self.device.create_buffer(size=16, usage=usage.COPY_SRC, label="wgsentis fence")
        dst = self.device.create_buffer(size=16, usage=usage.MAP_READ | usage.COPY_DST, label="wgsentis fence read")
        encoder = self.device.create_command_encoder(label="wgsentis fence")
        encoder.copy_buffer_to_buffer(src, 0, dst, 0, 16)
        self.queue.submit([encoder.finish()])
        map_for_reading(dst, what)
        dst.unmap()


# wgpu reports a size the device refuses as a validation error, a driver out of memory as either kind.
_NO_MEMORY = re.compile(r"memory|greater than the maximum|exceeds the limit|too large", re.IGNORECASE)


def allocation_error(what: str, nbytes: int, exc: BaseException) -> DeviceError:
    """The typed error for a failed buffer or texture creation: DeviceOutOfMemoryError when the device had no
    room for ``nbytes`` (wgpu's out-of-memory error, or a size above the device's limits), else DeviceError."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    reason = lines[-1] if lines else type(exc).__name__  # wgpu's last "Caused by" line says why
    if isinstance(exc, MemoryError) or _NO_MEMORY.search(reason):
        return DeviceOutOfMemoryError(what, nbytes, reason)
    return DeviceError(f"the GPU could not create {what} of {nbytes:,} bytes: {reason}")


_context: GPUContext | None = None
_context_lock = threading.Lock()
_instance_extras: dict[str, Any] | None = None  # wgpu-native instance extras for the first adapter request


def configure_instance(*, backends: tuple[str, ...] = ("All",), flags: tuple[str, ...] = ("Default",)) -> None:
    """Set the wgpu-native instance extras (backends, debug flags) the process-wide context is created
    with, e.g. ``backends=("Vulkan",), flags=("Debug",)`` so labels and debug groups reach RenderDoc.

    Must run before the wgpu instance exists (before the first GPU worker); raises DeviceError after.
    """
    global _instance_extras
    with _context_lock:
        if _context is not None or wgpu_instance_exists():
            raise DeviceError(
                f"configure_instance(backends={list(backends)}, flags={list(flags)}): the wgpu instance already "
                "exists; call it before the first GPU worker (or anything that requests an adapter)"
            )
        _instance_extras = {"backends": list(backends), "flags": list(flags)}


def instance_extras() -> dict[str, Any] | None:
    """The instance extras the context was (or will be) created with; None for wgpu's defaults."""
    return None if _instance_extras is None else dict(_instance_extras)


def context_exists() -> bool:
    """Whether the process-wide GPU context has been created."""
    return _context is not None


def wgpu_instance_exists() -> bool:
    """Whether wgpu-native's process-wide instance has been created (its extras can no longer change)."""
    try:
        from wgpu.backends.wgpu_native import _helpers
    except Exception:  # pragma: no cover - another wgpu backend
        return False
    return getattr(_helpers, "_the_instance", None) is not None


def _apply_instance_extras() -> dict[str, Any] | None:
    """Hand the configured instance extras to wgpu-native before its instance is created."""
    if _instance_extras is None:
        return None
    if wgpu_instance_exists():
        raise DeviceError(f"instance extras {_instance_extras} were configured, but the wgpu instance was already "
                          "created by other code; configure them before anything requests an adapter")
    from wgpu.backends.wgpu_native.extras import set_instance_extras

    set_instance_extras(**_instance_extras)
    return dict(_instance_extras)


# A submission the GPU has not finished after this long is taken as a hung or lost device: readback
# then raises instead of blocking the caller forever. The slowest reference model on lavapipe (a CPU
# device) finishes in about a second.
GPU_WAIT_SECONDS = 120.0


def map_read_async(buffer: Any) -> Any:
    """Request ``buffer``'s mapping for reading; returns the promise. Our readbacks map a buffer right after
    submitting the copy into it, so wgpu-py's own safeguard for a map with nothing submitted before it (an empty
    submission per map: a second submit per run, wgpu-native issue 305) is skipped ("READ_NOSYNC") where this
    wgpu-py offers that mode."""
    try:
        return buffer.map_async("READ_NOSYNC")
    except (ValueError, KeyError, TypeError, AttributeError):  # a wgpu-py without the mode
        return buffer.map_async("READ")


def map_for_reading(buffer: Any, what: str, timeout_s: float | None = None) -> None:
    """Map ``buffer`` for reading, waiting at most ``timeout_s`` (GPU_WAIT_SECONDS) for the GPU; raises
    DeviceError naming ``what`` (the outputs or tensors being read) on a failure or a timeout."""
    wait_mapped(map_read_async(buffer), what, timeout_s)


def wait_mapped(promise: Any, what: str, timeout_s: float | None = None) -> None:
    """Wait for a ``map_async`` promise as ``map_for_reading`` does."""
    limit = GPU_WAIT_SECONDS if timeout_s is None else timeout_s
    # wgpu-native's poll thread sets this event when the map callback fires; sync_wait() waits on it
    # with no limit, so a submission that never completes would hang the caller.
    event = getattr(promise, "_thread_event", None)
    if getattr(promise, "_state", "") == "pending" and event is not None and not event.wait(limit):
        raise DeviceError(f"the GPU did not finish the work behind {what} within {limit:g} s: "
                          "the device is hung or was lost")
    try:
        promise.sync_wait()
    except Exception as exc:
        raise DeviceError(f"reading {what} back from the GPU failed: {exc}") from exc


def get_context() -> GPUContext:
    """The process-wide GPU context (created on first use; raises DeviceError without an adapter)."""
    global _context
    with _context_lock:
        if _context is None:
            _context = GPUContext()
        return _context


# wgpu's backends the engine runs on: its OpenGL backend lacks what the GPU backends need (storage textures of
# rgba32float in fragment shaders, timestamp queries), so its adapters are not listed.
ADAPTER_BACKENDS = ("Vulkan", "Metal", "D3D12")
_ADAPTER_ORDER = ("DiscreteGPU", "IntegratedGPU", "VirtualGPU", "CPU")
_adapter_list: list[tuple[AdapterInfo, Any]] | None = None
_adapter_contexts: dict[int, GPUContext] = {}


def _adapters() -> list[tuple[AdapterInfo, Any]]:
    """The usable adapters with their wgpu objects, enumerated once per process (the caller holds the lock):
    discrete GPUs first, then integrated, virtual and CPU ones, each kind in wgpu's order."""
    global _adapter_list
    if _adapter_list is None:
        try:
            import wgpu

            if _instance_extras is not None and not wgpu_instance_exists():
                _apply_instance_extras()
            found = list(wgpu.gpu.enumerate_adapters_sync())
        except Exception as exc:
            raise DeviceError(f"wgpu could not list the GPU adapters: {_first_line(exc)}") from None
        usable = [a for a in found if str(a.info.get("backend_type", "")) in ADAPTER_BACKENDS]

        def rank(adapter: Any) -> int:
            kind = str(adapter.info.get("adapter_type", ""))
            return _ADAPTER_ORDER.index(kind) if kind in _ADAPTER_ORDER else len(_ADAPTER_ORDER)

        usable.sort(key=rank)  # stable: wgpu's order within a kind
        _adapter_list = [(AdapterInfo(index=i, **_identity(a.info)), a) for i, a in enumerate(usable)]
    return _adapter_list


def adapters() -> list[AdapterInfo]:
    """The GPU adapters wgpu offers on Vulkan, Metal or D3D12, discrete GPUs first; empty without one. Listing
    them creates wgpu's instance, so ``configure_instance`` must come before (as before any GPU worker)."""
    with _context_lock:
        try:
            return [info for info, _ in _adapters()]
        except DeviceError:
            return []


def context_for(adapter: int | None) -> GPUContext:
    """The device of ``adapters()[adapter]``, opened once per process and index; None: ``get_context()``'s,
    wgpu's high-performance choice. Two indices are two devices, and so are an index and None even on the same
    GPU (wgpu tells two identical GPUs apart only by their order), so device tensors pass between Workers made
    with the same ``adapter`` argument."""
    if adapter is None:
        return get_context()
    with _context_lock:
        found = _adapters()
        if not 0 <= adapter < len(found):
            names = "; ".join(f"{info.index}: {info.name} ({info.backend}, {info.adapter_type})"
                              for info, _ in found) or "none"
            raise DeviceError(f"adapter {adapter} is not one of this machine's {len(found)} GPU adapters "
                              f"(wgsentis.adapters(): {names})")
        ctx = _adapter_contexts.get(adapter)
        if ctx is None:
            ctx = _adapter_contexts[adapter] = GPUContext(adapter=found[adapter][1])
        return ctx


def gpu_available() -> tuple[bool, str]:
    """Whether a wgpu adapter can be opened here, and why not."""
    try:
        get_context()
    except DeviceError as exc:
        return False, str(exc)
    return True, ""


# -- WGSL sources --------------------------------------------------------------------------------
_INCLUDE = re.compile(r'^\s*#include\s+"([^"]+)"\s*$', re.MULTILINE)
_source_cache: dict[str, str] = {}


def wgsl_source(path: str, substitutions: dict[str, str] | None = None) -> str:
    """Read ``wgsl/<path>``, expand ``#include "file"`` lines and ``{{NAME}}`` substitutions."""
    key = path
    text = _source_cache.get(key)
    if text is None:
        text = _read_wgsl(path)
        _source_cache[key] = text
    for name, value in (substitutions or {}).items():
        text = text.replace("{{" + name + "}}", value)
    if "{{" in text:
        missing = sorted(set(re.findall(r"\{\{(\w+)\}\}", text)))
        raise DeviceError(f"shader '{path}': substitutions {missing} were not given")
    return text


def _read_wgsl(path: str, stack: tuple[str, ...] = (), included: set[str] | None = None) -> str:
    """A shader's text with its includes expanded, each file at most once (a second include of a file
    already in, e.g. common/math.wgsl through two helpers, expands to nothing: WGSL forbids
    redefinitions). A file including itself through its own includes is a cycle."""
    included = set() if included is None else included
    if path in stack:
        raise DeviceError(f"shader include cycle: {' -> '.join((*stack, path))}")
    if path in included:
        return ""
    included.add(path)
    node = resources.files("wgsentis") / "wgsl" / path
    try:
        text = node.read_text()
    except FileNotFoundError:
        raise DeviceError(f"shader source 'wgsl/{path}' is missing from the package") from None
    return _INCLUDE.sub(lambda m: _read_wgsl(m.group(1), (*stack, path), included), text)
