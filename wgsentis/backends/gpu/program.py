"""The GPU program every GPU backend shares: a graph run on the device through planned, replayed plans.

A new input signature (shapes, dtypes and the host-read values) is first *traced*, before any GPU work: each
layer is placed (``placement.Placer``: on the GPU, planned on the host, or a fallback with a sync) and the GPU
layers' builders record their steps on virtual allocations. The planner lays the tensors out in arenas by
lifetime (``planner``), the steps are bound there, and the run replays the plan: upload inputs, encode its
steps (running fallback layers in between), one submission, the outputs copied into a staging buffer kept
with the plan. A plan whose fallback layer needs values computed on the device cannot be traced past it: it
is recorded while it runs on a transient buffer pool, then laid out the same way for its replays.

A backend subclasses ``GPUProgram`` with its recorder (``make_recorder``) and its command stream
(``make_stream``); ``wgsentis.backends.gpu_compute`` is the compute one.
"""

from __future__ import annotations

import functools
import sys
import time
from typing import Any

import numpy as np

from wgsentis.backends.gpu.device import GPUContext, allocation_error, get_context
from wgsentis.backends.host_memory import release_freed_memory
from wgsentis.backends.gpu.dtypes import (
    NARROW_TYPES,
    PRECISIONS,
    TooLargeForDevice,
    from_device_array,
    gpu_type_of,
    to_device_array,
)
from wgsentis.backends.gpu.fallback import HostSync
from wgsentis.backends.gpu.faults import FaultBuffer
from wgsentis.backends.gpu.memory import BufferPool, ConstantStore, ScratchTextures, UniformArena
from wgsentis.backends.gpu.placement import (
    ANY_INT32,
    Placer,
    host_of,
    host_read,
    input_bound,
    int64_result_bounds,
    run_step,
    value_bound,
)
from wgsentis.backends.gpu.outer_tiles import tiled_build
from wgsentis.backends.gpu.planner import DEFAULT_MAX_PLANS, PlanCache, live_peak, plan_arenas
from wgsentis.backends.gpu.readback import PendingReadback, StagingPool
from wgsentis.backends.gpu.report import RunReport, program_stats
from wgsentis.backends.gpu.steps import Copy, Dispatch, Draw, Fallback, Placement, Plan, PlanInvalid, Transfer
from wgsentis.backends.gpu.streams import CommandStream
from wgsentis.backends.gpu.tensors import (
    Allocation,
    Declined,
    GTensor,
    GTexture,
    NeedsDeviceValues,
    SubgraphDeclined,
    aligned,
    describe_arguments,
    reserved_bytes,
)
from wgsentis.backends.gpu.timestamps import QuerySets, Stamps, stamps_inside_passes
from wgsentis.budget import check_device_bytes
from wgsentis.errors import PASS_THROUGH_ERRORS, DeviceError, LayerError, RunInterruptedError, WgSentisError
from wgsentis.ir import Graph, Layer, captured_names
from wgsentis.ops.spec import spec_of
from wgsentis.ops.kernel_options import DEFAULT_KERNEL_OPTIONS, KernelOptions


_WIDE = (np.dtype(np.float32), np.dtype(np.int32))


def _without_run_host_copy(value: Any) -> Any:
    """A device argument as its builder may see it: without the host copy of a value of this run (an input, a
    view of one), which a builder would bake into the plan, replayed on other values; host inputs a builder
    reads are declared (``host_inputs``) and so part of the plan's signature. Constants keep theirs."""
    if not isinstance(value, GTensor) or value.host is None or value.alloc is None or value.alloc.persistent:
        return value
    bare = GTensor(value.alloc, value.shape, value.dtype, value.name, chunks=value.chunks, first=value.first)
    bare.layout = value.layout
    bare.bound = value.bound  # (a bound the plan checks at every upload, not this run's values)
    return bare


def _narrow_host_inputs(args: list[Any]) -> bool:
    """Whether every device argument is a narrow-typed tensor with a host copy (and there is one)."""
    device = [a for a in args if isinstance(a, GTensor)]
    return bool(device) and all(a.host is not None and a.dtype in NARROW_TYPES for a in device)


def _widened(rec: Any, value: Any) -> Any:
    """A narrow-typed argument as its wide type, for builders that know only float32 and int32: a device tensor
    retyped in place (the words already hold the wide values), a host array converted."""
    if isinstance(value, GTensor) and value.dtype in NARROW_TYPES:
        return rec.retype(value, NARROW_TYPES[value.dtype])
    if isinstance(value, np.ndarray) and value.dtype in NARROW_TYPES:
        return value.astype(NARROW_TYPES[value.dtype])
    return value


class GPUProgram(HostSync):
    """A graph compiled for a GPU backend: plans per input signature (an LRU of ``max_plans``), shared weights.

    The program protocol (what ``Worker`` uses): ``output_names``, ``execute(feeds, control)`` -> a readback
    with ``wait()``/``done()``, ``stats()``, ``close()``. Public hooks for tools: ``set_timestamps``,
    ``last_run``, ``plan_summary``, ``run_layer_by_layer``."""

    backend = ""  # the registry's backend name of this program's builders

    # Whether a layer past the storage binding limit is built again in tiles (outer_tiles.tiled_build):
    # gpu-compute binds windows of buffers; gpu-pixel's tensors are textures.
    tiles_past_binding = False

    def __init__(self, graph: Graph, threads: int = 1, debug_groups: bool = False,
                 precision: str = "float32", ctx: GPUContext | None = None, max_plans: int = DEFAULT_MAX_PLANS,
                 native_calls: bool = True, fast_winograd: bool = False,
                 kernels: KernelOptions = DEFAULT_KERNEL_OPTIONS) -> None:
        self.ctx = ctx or get_context()  # another context: e.g. a device with other limits
        if precision not in PRECISIONS:
            raise DeviceError(f"precision '{precision}' is not one of {list(PRECISIONS)}")
        if precision == "float16" and not self.ctx.has_f16:
            raise DeviceError(f"precision='float16' needs the adapter feature 'shader-f16', which "
                              f"'{self.ctx.info.name}' ({self.ctx.info.backend}) does not offer; use 'float32'")
        self.precision = precision
        # 3x3 convolutions may take Winograd F(4x4, 3x3) (up to 1.75x faster on wide planes, but 4-7x the rounding
        # error of a direct float32 sum, measured); False: F(2x2, 3x3) at most, within a direct sum's error.
        self.fast_winograd = fast_winograd
        # The kernel forms builders may take (textures for operands and inputs, vec4 stores; the host layers'
        # CPU Winograd): builders read ``rec.program.kernels``.
        self.kernels = kernels
        # Encode through wgpu-native's calls with arguments built once (wgpu-py's methods convert their
        # arguments on every call); False: wgpu-py's public methods only (what other wgpu-py versions get).
        self.native_calls = native_calls
        self.graph = graph
        self.threads = threads
        self.debug_groups = debug_groups
        self.output_names = [o.name for o in graph.outputs]
        self.constants = ConstantStore(self.ctx)
        self.scratch = ScratchTextures(self.ctx)
        self.faults = FaultBuffer(self.ctx)
        self.queries = QuerySets(self.ctx)
        self.plans = PlanCache(max_plans)
        self._env: dict[str, Any] = {}
        self._stream: Any = None
        self._plan: Plan | None = None
        self._feeds: dict[str, Any] = {}
        self._encoded = 0
        self._reads_device = False
        self._deaths: dict[int, tuple[Graph, list[list[str]]]] = {}  # _subgraph_deaths' cache
        self.placer = Placer(graph, self.backend, lambda: self.control, kernels)
        self.last_plan: Plan | None = None
        self.last_run = RunReport()
        self.control: Any = None  # the RunControl of the run in progress (wgsentis.run_control), or None
        self._timestamps: bool | str = False
        self._pass_per_layer = False
        self._next_stream: CommandStream | None = None  # ready for the next replay
        # The recording in progress: its pool, uniforms, allocations, live bytes and per-layer scratch requests.
        self._pool: BufferPool | None = None
        self._uniforms: UniformArena | None = None
        self._allocations: list[Allocation] = []
        self._live_bytes = 0
        self._layer_index = -1
        # The recording's clock: one tick per layer placed, a subgraph's layers included (a Loop's iterations
        # each take their body's ticks). Allocation lifetimes and scratch requests are in ticks, so the
        # intermediates of one iteration share memory with the next's.
        self._tick = -1
        self.scratch_requests: dict[int, int] = {}
        self._download_pools: dict[int, StagingPool] = {}  # fallbacks' staging buffers by size
        self.tracing = False  # a plan is being traced: allocations are virtual, nothing runs on the device
        self._closed = False

    # -- for subclasses --------------------------------------------------------------------------------
    def make_recorder(self) -> Any:
        """The backend's recorder: what its builders record steps with."""
        raise NotImplementedError

    def make_stream(self, checked: bool) -> CommandStream:
        """A command stream of the backend's passes (``checked``: through wgpu-py's validating wrappers)."""
        raise NotImplementedError

    # -- public hooks ------------------------------------------------------------------------------------
    def set_timestamps(self, mode: bool | str, *, pass_per_layer: bool = False) -> None:
        """Profile the following replays with GPU timestamps: True, per layer (``last_run.layer_gpu_ns``);
        "whole", only the run's start and end (key -1: what the per-layer stamps themselves cost); False, none.
        Needs the adapter's timestamp-query feature (``ctx.has_timestamps``). Stamps go between layers inside
        the open pass where the adapter can write them there; ``pass_per_layer`` gives each layer its own
        timestamped pass instead (what adapters without that feature get)."""
        if mode not in (True, False, "whole"):
            raise DeviceError(f"set_timestamps({mode!r}): choose True, False or 'whole'")
        self._timestamps = mode
        self._pass_per_layer = pass_per_layer

    def plan_summary(self) -> dict[str, Any]:
        """The last recorded plan: where each layer runs and why, and the order of its GPU work and fallbacks
        (``Plan.summary``)."""
        return Plan.summary(self.last_plan)

    @property
    def weight_bytes(self) -> int:
        """Device bytes of the constants (weights and what is derived from them) the program holds."""
        return self.constants.nbytes

    @property
    def weight_uploads(self) -> int:
        return len(self.constants.uploads)

    def stats(self) -> dict[str, Any]:
        """Where the last run's layers ran, what crossed between host and device, device memory, fixed costs
        (``report.program_stats``)."""
        return program_stats(self)

    def close(self) -> None:
        """Wait for the work in flight, then free every device buffer and texture the program holds and drop
        its plans and the host arrays kept for them (the device itself is shared by the process)."""
        if self._closed:
            return
        self._closed = True
        if sys.is_finalizing():
            return  # interpreter exit: wgpu's poll thread may be gone, so no wait; the process frees everything
        try:
            self.ctx.wait_idle(f"the work of graph '{self.graph.name}' before closing its program")
        except DeviceError:
            pass  # a lost device: nothing in flight to wait for
        for plan in self.plans.values():
            self._free_plan(plan)
        if self.last_plan is not None:
            self._free_plan(self.last_plan)
        self.plans.clear()
        self.last_plan = None
        self._next_stream = None
        for pool in self._download_pools.values():
            pool.close()
        self._download_pools.clear()
        self.constants.close()
        self.scratch.close()
        self.faults.close()
        self.queries.close()
        self.placer.close()
        # The weights' host copies and derived arrays were freed into the heap, which keeps them for reuse
        # (backends/host_memory.py); a closed program will not reuse them: give them back.
        release_freed_memory()

    @staticmethod
    def _free_plan(plan: Plan) -> None:
        for buf in plan.arenas:
            buf.destroy()
        plan.arenas = []
        if plan.staging is not None:
            plan.staging.close()
        if plan.uniforms is not None:
            plan.uniforms.close()
        plan.steps = []

    # -- memory (what recorders call) ------------------------------------------------------------------
    def new_allocation(self, nbytes: int, what: str = "", layer: Layer | None = None) -> Allocation:
        """Device memory for an intermediate of the recording in progress (from its pool)."""
        control = self.control
        if layer is not None and control is not None and control.memory_limit is not None:
            # The run's memory budget bounds the device too: the bytes the plan holds live, this buffer included.
            check_device_bytes(control, layer, nbytes, self._live_bytes, what)
        if self.tracing:  # virtual until the planner lays the plan out: check now what the device can hold
            reserved = reserved_bytes(nbytes)
            limit = int(self.ctx.limits.get("max-buffer-size", 1 << 30))
            if reserved > limit:
                raise allocation_error(what or "a tensor", reserved, ValueError(
                    f"Buffer size {reserved} is greater than the maximum buffer size ({limit})"))
            alloc = Allocation(None, nbytes, reserved=reserved, born=self._tick)
        else:
            if self._pool is None:  # a builder used outside a recording (tests of the builder API)
                self._pool = BufferPool(self.ctx)
            alloc = Allocation(self._pool.acquire(nbytes, what), nbytes, reserved=reserved_bytes(nbytes),
                               born=self._tick)
        self._allocations.append(alloc)
        self._live_bytes += alloc.reserved
        return alloc

    def free_allocation(self, alloc: Allocation) -> None:
        """``alloc`` is dead after the current layer: its pool buffer serves later layers (once: a second free,
        from a control-flow layer giving up on its body, must not hand the buffer out twice)."""
        if alloc.dies is not None:
            return
        alloc.dies = self._tick
        self._live_bytes -= alloc.reserved
        if self._pool is not None and alloc.buffer is not None:
            self._pool.release(alloc.buffer)

    def uniforms(self) -> UniformArena:
        """The recording's uniform arena (kept with its plan)."""
        if self._uniforms is None:  # a builder used outside a recording (tests of the builder API)
            self._uniforms = UniformArena(self.ctx)
        return self._uniforms

    def note_scratch(self, nbytes: int) -> None:
        """The current layer asked for ``nbytes`` of scratch textures (counted in the plan's live-set bound)."""
        self.scratch_requests[self._tick] = self.scratch_requests.get(self._tick, 0) + nbytes

    def _retain(self, value: Any) -> None:
        if isinstance(value, GTensor) and value.alloc is not None and not value.alloc.persistent:
            value.alloc.refs += 1

    def _drop(self, value: Any) -> None:
        if isinstance(value, GTensor) and value.alloc is not None and not value.alloc.persistent:
            value.alloc.refs -= 1
            if value.alloc.refs == 0:
                self.free_allocation(value.alloc)

    # -- running ---------------------------------------------------------------------------------------
    def execute(self, feeds: dict[str, Any], control: Any = None) -> PendingReadback:
        """The program protocol's run: ``run`` with the host's BLAS kept to one thread (host layers run beside
        the device, where BLAS threads would only spin)."""
        from wgsentis.ops.parallel import set_blas_threads

        set_blas_threads(1)
        return self.run(feeds, control)

    def run(self, feeds: dict[str, Any], control: Any = None) -> PendingReadback:
        """Run on ``feeds``: replay the plan for this signature, or record one. Returns the readback.

        ``control`` (a RunControl) is checked before every layer while recording, and before every host
        layer of a replay (cancellation, timeout, memory budget): a replay's GPU work is one submission.
        Errors from wgpu itself (validation, out of memory, a lost device) become a DeviceError that
        names the graph; our own typed errors pass through unchanged."""
        if self._closed:
            raise DeviceError(f"the GPU program of graph '{self.graph.name}' is closed")
        self.control = control
        try:
            return self._run(feeds)
        except WgSentisError:
            raise
        except Exception as exc:
            raise DeviceError(f"graph '{self.graph.name}' on {self.ctx.info.name}: the GPU run failed: "
                              f"{type(exc).__name__}: {str(exc).strip()[:500]}") from exc

    def _run(self, feeds: dict[str, Any]) -> PendingReadback:
        self.last_run = RunReport()
        signature = tuple((n, np.asarray(v).shape, np.asarray(v).dtype.str) if isinstance(v, np.ndarray)
                          else (n, type(v).__name__) for n, v in sorted(feeds.items()))
        plan = self.plans.get(signature)
        if plan is not None and any(not np.array_equal(feeds[n], v) for n, v in plan.host_read_inputs.items()):
            plan = None  # it baked in other values of inputs read on the host (e.g. a shape input)
        if plan is not None:
            try:
                return self._replay(plan, feeds)
            except PlanInvalid:
                self.plans.discard(signature)
                self.last_run = RunReport()
        started = time.perf_counter()
        plan, _ = self._record(feeds, trace=True)
        if plan is not None:
            # Planned before any GPU work: its first run is a replay on the arenas laid out for it.
            self.plans.put(signature, plan)
            traced = time.perf_counter() - started
            readback = self._replay(plan, feeds)
            self.last_run.recorded = True
            self.last_run.encode += traced
            return readback
        # A fallback layer needs values computed on the device: the run is recorded while it runs.
        self.last_run = RunReport()
        plan, readback = self._record(feeds)
        if plan is not None:
            self.plans.put(signature, plan)
        return readback

    def _upload_input(self, name: str, value: np.ndarray, target: GTensor | None, layer: str = "") -> GTensor:
        started = time.perf_counter()
        prepared = self.prepare_upload(value, f"input '{name}'")  # raises TooLargeForDevice before allocating
        if target is not None and target.bound is not None and value_bound(value) > target.bound:
            # The plan placed int64 arithmetic on the device for values under this bound: record anew.
            raise TooLargeForDevice(f"input '{name}': int64 values past the bound {target.bound} its plan was made for")
        t = target if target is not None else self.input_tensor(name, value)
        if target is None and value.dtype == np.int64:
            t.bound = input_bound(value)
        t.host = value  # known on the host: layers reading it there need no download
        if self.tracing:
            return t  # uploaded by the plan's first replay, once the planner has placed it
        nbytes = self.write(t, prepared)
        self.last_run.transfers.append(Transfer("upload", name, nbytes, layer, time.perf_counter() - started))
        return t

    # -- tensor storage: storage buffers here; a backend that keeps tensors elsewhere overrides these -----------
    def prepare_upload(self, value: np.ndarray, what: str) -> Any:
        """``value`` checked and converted for the device (raises TooLargeForDevice where it cannot live there)."""
        return to_device_array(value, what)

    def input_tensor(self, name: str, value: np.ndarray) -> GTensor:
        """A device tensor to upload ``value`` into (an input, or a fallback layer's output)."""
        return GTensor(self.new_allocation(max(4, 4 * value.size), f"tensor '{name}' {list(value.shape)}"),
                       value.shape, value.dtype, name)

    def write(self, t: GTensor, prepared: Any) -> int:
        """Upload ``prepared`` (``prepare_upload``'s result) into ``t``; returns the bytes written."""
        if prepared.nbytes:
            self.ctx.queue.write_buffer(t.alloc.buffer, t.alloc.offset, prepared)
        return int(prepared.nbytes)

    def layout_memory(self, plan: Plan, end: int) -> None:
        """Lay ``plan``'s intermediates out for its replays (``end``: one past the recording's last tick): arenas of
        storage buffers by lifetime (``planner.plan_arenas``); the caller then binds every step."""
        plan.arenas, plan.arena_bytes = plan_arenas(self.ctx, plan.allocations, plan.steps, end,
                                                    f"'{self.graph.name}'")

    def readback_bytes(self, t: GTensor) -> int:
        """Staging bytes ``copy_out`` writes for ``t`` (a multiple of 256, where the next copy may start)."""
        return aligned(max(4, t.nbytes))

    def copy_out(self, encoder: Any, t: GTensor, staging: Any, offset: int) -> None:
        """Record the copy of ``t`` into ``staging`` at ``offset``."""
        if t.nbytes:
            encoder.copy_buffer_to_buffer(t.alloc.buffer, t.alloc.offset, staging, offset, aligned(t.nbytes, 4))

    def decode(self, t: GTensor, raw: np.ndarray) -> np.ndarray:
        """``t``'s value from the staging bytes ``copy_out`` wrote (``raw`` starts at its offset)."""
        words = raw[: t.nbytes].view(np.uint32) if t.nbytes else np.zeros(0, np.uint32)
        return from_device_array(words, t.shape, t.dtype)

    def _run_host(self, index: int, args: list[Any]) -> tuple[Any, ...]:
        started = time.perf_counter()
        try:
            return self.placer.run_host(index, args)
        finally:
            kernel_s = self.last_run.host_kernel_s
            kernel_s[index] = kernel_s.get(index, 0.0) + time.perf_counter() - started

    def _record(self, feeds: dict[str, Any], trace: bool = False) -> tuple[Plan | None, PendingReadback | None]:
        """Record a plan for ``feeds``' signature. ``trace``: plan it without running anything on the device
        (tensors are virtual allocations until the planner lays them out); returns (None, None) at the first
        fallback layer, whose inputs only a run can give. Otherwise the run is recorded while it runs on a
        transient pool, then laid out for its replays. Returns (the plan, or None when it cannot be replayed;
        the recording run's readback, or None for a trace)."""
        started = time.perf_counter()
        self.last_run.recorded = True
        self.tracing = trace
        try:
            return self._record_layers(feeds, trace, started)
        finally:
            self.tracing = False
            self._pool = None
            self._uniforms = None
            self._allocations = []

    def _record_layers(self, feeds: dict[str, Any], trace: bool,
                       started: float) -> tuple[Plan | None, PendingReadback | None]:
        # Each recording has its own pool: an earlier plan's tensors live in that plan's arenas.
        self._pool = None if trace else BufferPool(self.ctx)
        self._uniforms = UniformArena(self.ctx)
        self._allocations = []
        self._live_bytes = 0
        self._layer_index = -1
        self._tick = -1
        self.scratch_requests = {}
        placer = self.placer
        plan = Plan(uniforms=self._uniforms)
        cacheable = True
        env: dict[str, Any] = {}
        for name, value in feeds.items():
            if isinstance(value, np.ndarray) and gpu_type_of(value.dtype) is not None:
                try:
                    t = self._upload_input(name, value, None)
                except TooLargeForDevice:
                    env[name] = value
                    # Layers reading it run on the host with this value baked into the plan: replay only it.
                    plan.host_read_inputs[name] = np.array(value, copy=True)
                    continue
                plan.input_tensors[name] = t
                env[name] = t
                self._retain(t)
            else:
                env[name] = value
                # Values that stay on the host (strings, maps, sequences) are baked into what the plan ran on them:
                # a replay must see the same values, or the run is recorded anew.
                if isinstance(value, np.ndarray):
                    plan.host_read_inputs[name] = np.array(value, copy=True)
                elif value is not None:
                    cacheable = False
        for name in list(env):
            if placer.last_use.get(name, -1) < 0 and name not in self.output_names:
                self._drop(env[name])
        rec = self.make_recorder()
        plan.index_checks = rec.index_checks  # filled as checking layers are recorded
        self.faults.start(rec.index_checks)
        stream = None if trace else self.make_stream(True)
        # What control-flow builders reach through the program (record_subgraph, read_scalar): the recording's
        # values, stream and plan, and the steps of rec already encoded.
        self._env, self._stream, self._plan, self._feeds = env, stream, plan, feeds
        self._encoded = 0
        self._reads_device = False  # a builder read a device value: the plan is recorded anew on every run
        for i, layer in enumerate(self.graph.layers):
            self._layer_index = i
            self._tick += 1
            rec.layer, rec.layer_index = layer, i
            args = [self._value(n, env) if n else None for n in layer.inputs]
            if self.control is not None:
                self.control.before_layer(layer, args)  # stop or refuse before anything is allocated
            kind, reason, outputs = self._place(rec, layer, args)
            if kind != "fallback" and not spec_of(layer.op_type, layer.domain).shape_only:
                for n in layer.inputs:
                    if n in plan.input_tensors and (kind == "host" or n in host_read(layer, args, env)):
                        plan.host_read_inputs[n] = np.array(feeds[n], copy=True)
            if kind == "gpu":
                new = rec.steps[self._encoded:]
                self._encoded = len(rec.steps)
                if stream is not None:
                    self._emit_layer(stream, i, new)
                plan.steps.extend(new)
            elif kind == "host":
                outputs = self._run_host(i, [host_of(a) for a in args])
            elif trace:
                return None, None
            else:
                if _narrow_host_inputs(args):
                    # Its device inputs are narrow-typed inputs of the run (float16, int8...), whose host copies
                    # serve: no sync, at record and at replay alike. Before such inputs lived on the device too,
                    # this layer ran on the host from them, a host layer; it still is.
                    kind, reason = "host", f"{reason}; its float16/8-bit inputs' host copies serve, no sync"
                outputs, step = self._fallback_record(i, layer, args, stream.take(), env)
                plan.steps.append(step)
                # Outputs kept on the host (sequences, types the GPU lacks) make later layers depend
                # on values a replay cannot check cheaply: such runs are recorded every time.
                cacheable = cacheable and all(t is not None and n not in placer.host_needed
                                              for t, n in zip(step.targets, layer.outputs, strict=False) if n)
            plan.placements.append(Placement(layer.name, layer.op_type, kind, reason))
            for name, value in zip(layer.outputs, outputs, strict=False):
                if name:
                    env[name] = value
                    self._retain(value)
            for n in set(layer.inputs) | captured_names(layer):
                if n and placer.last_use.get(n) == i and n in env:
                    self._drop(env[n])
            for name, value in zip(layer.outputs, outputs, strict=False):
                if name and name not in placer.last_use:
                    self._drop(value)
        cacheable = cacheable and not self._reads_device
        plan.outputs = {n: self._value(n, env) for n in self.output_names}  # (an output may be a constant)
        end = self._tick + 1  # one past the last tick: when the outputs die
        plan.allocations = self._allocations
        plan.peak_live_bytes = live_peak(plan.allocations, end, self.scratch_requests)
        readback = None
        if stream is not None:
            self.last_run.encode = time.perf_counter() - started
            readback = self._finish(stream.take(), plan.outputs)
        self.scratch.realize()
        if cacheable:
            # Replays run on memory laid out from the lifetimes the recording showed (a recorded run ran on
            # the transient pool), every step bound where its tensors now live.
            self.layout_memory(plan, end)
            for step in plan.steps:
                if isinstance(step, Dispatch | Draw):
                    try:
                        step.bind(self.ctx.device)
                    except Exception as exc:
                        raise DeviceError(f"{step.label}: bind group rejected: {exc}") from None
                elif isinstance(step, Copy):
                    step.moved()
        else:
            plan.arena_bytes = self._pool.total_bytes
        if self.scratch.grown:
            # A scratch slot got a taller texture: the cached plans' steps bind it from now on (the old one is
            # released with their old bind groups once the work in flight is done).
            for cached in self.plans.values():
                self._rebind_textures(cached)
            self.scratch.grown = False
        self.last_plan = plan
        return (plan if cacheable else None), readback

    def _tiled(self, rec: Any, layer: Layer, build: Any, args: list[Any], start: int,
               exc: TooLargeForDevice) -> tuple[Any, str]:
        """A layer whose builder went past a device limit, built again in tiles along its leading axes where the
        backend binds windows of storage buffers (``tiles_past_binding``: outer_tiles.tiled_build); the outputs
        (NotImplemented where it does not apply) and the reason it falls back otherwise."""
        reason = f"past a device limit: {exc}"
        if not self.tiles_past_binding:
            return NotImplemented, reason
        del rec.steps[start:]  # what the whole-tensor build recorded before it gave up
        self.free_temporaries(rec.layer_allocs)
        rec.layer_allocs = []
        try:
            outputs = tiled_build(rec, layer, build, args)
        except TooLargeForDevice as again:
            return NotImplemented, f"past a device limit: {again}"
        except Declined as declined:
            return NotImplemented, str(declined)
        return outputs, reason

    def _rebind_textures(self, plan: Plan) -> None:
        """Remake the bind groups (and native copy calls) of ``plan``'s steps that use textures."""
        for step in plan.steps:
            if isinstance(step, Dispatch) and any(isinstance(r, GTexture) for r in step.extra):
                step.bind(self.ctx.device)
            elif isinstance(step, Copy):
                step.moved()

    def _place(self, rec: Any, layer: Layer, args: list[Any]) -> tuple[str, str, Any]:
        """Where a layer runs, why, and (on the GPU) the outputs its builder recorded."""
        kind, reason = self.placer.decide(layer, args)
        rec.made_and_kept = []
        if kind != "gpu":
            return kind, reason, None
        gpu = self.placer.builder(layer)
        start = len(rec.steps)
        rec.layer_allocs = []
        narrow_in = {a.dtype for a in args if isinstance(a, GTensor | np.ndarray) and a.dtype in NARROW_TYPES}
        if narrow_in and not gpu.narrow_types:
            args = [_widened(rec, a) for a in args]
        if not gpu.reads_scope:  # (control flow reads its conditions through read_scalar, which registers them)
            args = [_without_run_host_copy(a) for a in args]
        if gpu.reads_scope and getattr(rec, "scope", None) is None:
            rec.scope = lambda name: self._value(name, self._env)  # a top-level layer's outer scope
        try:
            outputs = gpu.build(rec, layer, *args, **layer.attrs)
            if outputs is NotImplemented:
                reason = f"its program declined these inputs: {describe_arguments(layer, args)}"
        except Declined as exc:
            outputs, reason = NotImplemented, str(exc)
        except TooLargeForDevice as exc:
            outputs, reason = self._tiled(rec, layer, gpu.build, args, start, exc)
        except NeedsDeviceValues as exc:
            # Tracing cannot read the device: this run is recorded as it runs instead (the read is a sync).
            outputs, reason = NotImplemented, str(exc)
        except SubgraphDeclined as exc:
            outputs, reason = NotImplemented, f"its subgraph cannot run on the GPU: {exc}"
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
        self.free_temporaries(rec.layer_allocs, kept)
        # What this builder made and returned (record_subgraph hands it to the enclosing layer's temporaries;
        # a returned view of an outer tensor or a constant is not the builder's to free).
        rec.made_and_kept = [alloc for alloc in rec.layer_allocs if id(alloc) in kept]
        rec.layer_allocs = []
        if outputs is NotImplemented:
            del rec.steps[start:]
            # Steps a control-flow program already encoded before it gave up (read_scalar) have run; what is encoded
            # next starts where the kept steps end.
            self._encoded = min(self._encoded, start)
            return "fallback", reason, None
        if any(isinstance(o, GTensor) and o.dtype == np.int64 for o in outputs):
            bounds = int64_result_bounds(layer, args)
            for o, bound in zip(outputs, bounds, strict=False):
                if isinstance(o, GTensor) and o.dtype == np.int64:
                    o.bound = min(bound, ANY_INT32)
        if (narrow_in and not gpu.narrow_types) or any(isinstance(o, GTensor) and o.dtype in NARROW_TYPES
                                                       for o in outputs):
            # (A builder that takes narrow types as they are gives its outputs their dtypes itself.)
            outputs = tuple(self._narrowed(rec, layer, o, n, set() if gpu.narrow_types else narrow_in)
                            for o, n in zip(outputs, layer.outputs, strict=False))
        return "gpu", "", outputs

    def _narrowed(self, rec: Any, layer: Layer, out: Any, name: str, narrow_in: set[np.dtype]) -> Any:
        """A builder's output in its logical dtype: where the model's types (or, failing them, a narrow input of the
        same storage) say the output is narrow (float16, int8...) but the builder computed it wide, its values
        are rounded or wrapped into the narrow type (not for ops that only move or select values)."""
        if not isinstance(out, GTensor) or out.dtype not in _WIDE:
            return out
        info = self.graph.value_info.get(name)
        want = info.dtype if info is not None and info.dtype is not None else None
        if want is None:
            same = [d for d in narrow_in if NARROW_TYPES[d] == out.dtype]
            want = same[0] if len(same) == 1 else None
        if want is None or np.dtype(want) not in NARROW_TYPES or gpu_type_of(want) != out.gpu_type:
            return out
        # (Ops whose outputs only move, select or compare input values: a narrow input's need no rounding.)
        if spec_of(layer.op_type, layer.domain).preserves_values:
            return rec.retype(out, want)
        return rec.narrowed(out, want)

    # -- control flow (what the If, Loop and Scan programs call) ----------------------------------------------------
    def record_subgraph(self, rec: Any, graph: Graph, inputs: list[Any], scope: Any) -> list[Any]:
        """Record ``graph``'s layers into ``rec`` as part of the current layer, its inputs bound to ``inputs`` and
        the names it does not define looked up in ``scope`` (a function of a name): every layer a GPU program or
        a host computation; SubgraphDeclined where one would fall back (the enclosing layer then runs on the
        host as a whole). Returns the subgraph's outputs (device tensors or host values)."""
        env: dict[str, Any] = {info.name: value for info, value in zip(graph.inputs, inputs, strict=False)}

        def value(name: str) -> Any:
            if name in env:
                return env[name]
            if name in graph.constants:
                return graph.constants[name]
            return scope(name)

        outer_scope = getattr(rec, "scope", None)
        try:
            self._record_subgraph_layers(rec, graph, env, value, outer_scope)
        except RunInterruptedError as exc:
            exc.inside(rec.layer.name, rec.layer.op_type)  # name the path down to the layer, as the CPU does
            raise
        return [value(info.name) for info in graph.outputs]

    def _record_subgraph_layers(self, rec: Any, graph: Graph, env: dict[str, Any], value: Any,
                                outer_scope: Any) -> None:
        # The subgraph's own intermediates are freed after their last reader, as the top level's are: a Loop's
        # iterations then reuse one another's memory instead of holding every iteration's at once.
        dead_after = self._subgraph_deaths(graph)
        made: set[int] = set()  # allocations the subgraph's layers made and returned
        holders: dict[int, int] = {}  # such an allocation's id -> names bound to it (views share one)
        for index, layer in enumerate(graph.layers):
            self._tick += 1
            args = [value(n) if n else None for n in layer.inputs]
            scoped = [isinstance(a, GTensor) for a in args]
            if self.control is not None:
                self.control.before_layer(layer, args)
            outer_allocs = rec.layer_allocs
            rec.scope = value
            try:
                kind, reason, outputs = self._place(rec, layer, args)
            finally:
                rec.scope = outer_scope
            rec.layer_allocs = outer_allocs + rec.made_and_kept
            made.update(id(alloc) for alloc in rec.made_and_kept)
            if kind == "host":
                outputs = run_step(self.placer.subgraph_step(layer), [host_of(a) for a in args])
            elif kind != "gpu":
                raise SubgraphDeclined(f"{layer.op_type} '{layer.name}' would fall back ({reason})")
            # An input of the run that a layer of the subgraph read on the host is part of the plan's signature.
            for n, a, was_device in zip(layer.inputs, args, scoped, strict=False):
                if was_device and isinstance(a, np.ndarray) and n in self._plan.input_tensors and n not in env:
                    self._plan.host_read_inputs[n] = np.array(self._feeds[n], copy=True)
            for name, out in zip(layer.outputs, outputs, strict=False):
                if name:
                    env[name] = out
                    if isinstance(out, GTensor) and id(out.alloc) in made:
                        holders[id(out.alloc)] = holders.get(id(out.alloc), 0) + 1
            for name in dead_after[index]:
                out = env.get(name)
                if isinstance(out, GTensor) and id(out.alloc) in holders:
                    holders[id(out.alloc)] -= 1
                    if holders[id(out.alloc)] == 0:
                        self.free_temporaries([out.alloc])

    def _subgraph_deaths(self, graph: Graph) -> list[list[str]]:
        """Per layer of ``graph``: the names its layers make that are dead once it has run (read last by it, or
        never read), graph outputs excepted. Cached per graph: a Loop asks once per iteration."""
        cached = self._deaths.get(id(graph))
        if cached is not None and cached[0] is graph:
            return cached[1]
        last: dict[str, int] = {}
        for index, layer in enumerate(graph.layers):
            for name in set(layer.inputs) | captured_names(layer):
                if name:
                    last[name] = index
        kept = {info.name for info in graph.outputs}
        deaths: list[list[str]] = [[] for _ in graph.layers]
        for index, layer in enumerate(graph.layers):
            for name in layer.outputs:
                if name and name not in kept:
                    deaths[max(index, last.get(name, index))].append(name)
        self._deaths[id(graph)] = (graph, deaths)
        return deaths

    def advance_clock(self) -> None:
        """One more tick of the recording's clock inside the current layer: what a builder frees before it dies
        there, what it allocates after is born on the next tick (a composite stepping through time)."""
        self._tick += 1

    def release(self, rec: Any, values: list[Any], keep: set[int]) -> None:
        """Free the allocations of ``values`` that the current layer's builder made (itself or through
        record_subgraph: a Loop's carried values once the next iteration has read them), except those whose id
        is in ``keep``."""
        mine = {id(alloc) for alloc in rec.layer_allocs}
        self.free_temporaries([v.alloc for v in values if isinstance(v, GTensor) and id(v.alloc) in mine], keep)

    def free_temporaries(self, allocs: list[Allocation], keep: set[int] | frozenset[int] = frozenset()) -> None:
        """Free the allocations among ``allocs`` that no live tensor name holds (``refs``), that are not a
        constant's or the run's (``persistent``), and whose id is not in ``keep``."""
        for alloc in allocs:
            if id(alloc) not in keep and alloc.refs == 0 and not alloc.persistent:
                self.free_allocation(alloc)

    def read_scalar(self, rec: Any, value: Any, what: str) -> np.ndarray:
        """The host value of a small device tensor a control-flow program branches on (an If's condition, a Loop
        body's): one download, counted with the run's transfers, after the work recorded so far is submitted.
        Tracing cannot read the device (NeedsDeviceValues: the run is recorded as it runs instead), and a plan
        that read one is recorded anew on every run, since its steps depend on the value."""
        if not isinstance(value, GTensor):
            return np.asarray(value)
        if value.host is not None:
            for name, t in self._plan.input_tensors.items():
                if t is value:  # an input of the run: its value is part of the plan's signature
                    self._plan.host_read_inputs[name] = np.array(self._feeds[name], copy=True)
            return value.host
        if self._stream is None:
            raise NeedsDeviceValues(f"its {what} is computed on the device: recorded as it runs, with one read")
        pending = rec.steps[self._encoded:]
        self._encoded = len(rec.steps)
        self._emit_layer(self._stream, self._layer_index, pending)
        self._plan.steps.extend(pending)
        self._reads_device = True
        value.name = value.name or what
        return self.download([value], self._stream.take(), rec.layer.name)[0]

    def _value(self, name: str, env: dict[str, Any]) -> Any:
        if name in env:
            return env[name]
        if name in self.graph.constants:
            return self.graph.constants[name]
        raise WgSentisError(f"tensor '{name}' was never produced")

    def _emit_layer(self, stream: Any, layer_index: int, steps: list[Any], stamps: Stamps | None = None) -> None:
        """Encode one layer's steps, inside its debug group and between timestamps."""
        layer = self.graph.layers[layer_index]
        has_copy = any(isinstance(step, Copy) for step in steps)
        if stamps is not None:
            stamps.begin_layer(stream, layer_index)
        # A group that holds copies lives on the encoder (copies close the pass); else inside the pass.
        # Render streams push the group inside each pass the layer's draws use (streams.RenderStream).
        group_owner = None
        per_pass = self.debug_groups and stream.groups_per_pass and not has_copy
        on_encoder = has_copy or not stream.groups_in_pass
        if per_pass:
            stream.begin_group(f"{layer.name} ({layer.op_type})")
        elif self.debug_groups:
            group_owner = stream.encoder_for_copies() if on_encoder else stream.open_pass()
            group_owner.push_debug_group(f"{layer.name} ({layer.op_type})")
        for step in steps:
            stream.step(step)
        if per_pass:
            stream.end_group()
        elif group_owner is not None:
            if on_encoder:
                stream.end_pass()
            group_owner.pop_debug_group()
        if stamps is not None:
            stamps.end_layer(stream, layer_index)

    def _emit_steps(self, stream: Any, steps: list[Any], stamps: Stamps | None = None) -> None:
        """Encode a recorded plan's steps, running its fallback layers in between."""
        if stamps is None and not self.debug_groups:
            # The plain replay: no per-layer grouping to do, so none of its host cost.
            for step in steps:
                if isinstance(step, Fallback):
                    self._replay_fallback(step, stream.take())
                else:
                    stream.step(step)
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

    def _replay(self, plan: Plan, feeds: dict[str, Any]) -> PendingReadback:
        for name, t in plan.input_tensors.items():
            try:
                self._upload_input(name, feeds[name], t)
            except TooLargeForDevice:
                raise PlanInvalid(name) from None  # e.g. int64 values past int32: this run records anew
        started = time.perf_counter()  # the uploads are their own phase (their transfers' seconds)
        self.faults.start(plan.index_checks)
        stamps = None
        if self._timestamps and self.ctx.has_timestamps:
            inside = stamps_inside_passes(self.ctx) and not self._pass_per_layer
            if self._timestamps != "whole":
                stamps = Stamps(self.queries, inside=inside)
            elif inside:  # the run's two ends need stamps outside any layer's pass
                stamps = Stamps(self.queries, inside=True, whole=True)
        # The encoder (and its first pass) made while the previous run was on the GPU, if any.
        stream = self._next_stream or self.make_stream(False)
        self._next_stream = None
        self._emit_steps(stream, plan.steps, stamps)
        if stamps is not None:
            stamps.finish(stream)
        encoder = stream.take()
        extra = None
        if stamps is not None and stamps.count:
            # The resolved timestamps ride in the outputs' staging buffer: one map, no extra sync.
            extra = (stamps.resolve(encoder), 8 * stamps.count, self._layer_times(stamps, self.last_run))
        # Host time encoding this replay (fallback layers' own work included).
        self.last_run.encode = time.perf_counter() - started
        readback = self._finish(encoder, plan.outputs, extra, plan)
        # Creating an encoder and beginning a pass cost ~50 us each on wgpu-native: do it now, while the
        # GPU runs what was just submitted, rather than at the start of the next run.
        self._next_stream = self.make_stream(False)
        self._next_stream.open_pass()
        return readback

    @staticmethod
    def _layer_times(stamps: Stamps, report: RunReport) -> Any:
        def store(raw: np.ndarray) -> None:
            report.layer_gpu_ns = stamps.durations(raw.view(np.uint64).astype(np.int64))
            report.layer_spans = stamps.span_counts()

        return store

    def run_layer_by_layer(self, feeds: dict[str, Any]) -> tuple[dict[int, float], PendingReadback]:
        """Replay the last plan (recorded for ``feeds``' signature) one layer per submission, each waited for,
        timing each on the host: per-layer times where the adapter has no timestamp queries. Returns (layer
        index -> seconds, the outputs' readback)."""
        plan = self.last_plan
        if plan is None:
            raise DeviceError(f"run_layer_by_layer: graph '{self.graph.name}' has no recorded plan; run it first")
        self.last_run = RunReport()
        for name, t in plan.input_tensors.items():
            self._upload_input(name, feeds[name], t)
        self.faults.start(plan.index_checks)
        self.ctx.wait_idle("the inputs' upload")
        times: dict[int, float] = {}
        groups: list[tuple[int, list[Any]]] = []  # a layer's steps, or one fallback (-1)
        for step in plan.steps:
            if not isinstance(step, Fallback) and groups and groups[-1][0] == step.layer:
                groups[-1][1].append(step)
            else:
                groups.append((-1 if isinstance(step, Fallback) else step.layer, [step]))
        for layer_index, steps in groups:
            if layer_index < 0:
                self._replay_fallback(steps[0], self.ctx.device.create_command_encoder(label="layer by layer"))
                continue
            start = time.perf_counter()
            stream = self.make_stream(True)
            for step in steps:
                stream.step(step)
            self.ctx.queue.submit([stream.take().finish()])
            self.ctx.wait_idle(f"layer {self.graph.layers[layer_index].name}")
            times[layer_index] = times.get(layer_index, 0.0) + time.perf_counter() - start
        encoder = self.ctx.device.create_command_encoder(label="layer by layer: outputs")
        return times, self._finish(encoder, plan.outputs, None, plan)

    def _finish(self, encoder: Any, outputs: dict[str, Any], extra: tuple[Any, int, Any] | None = None,
                plan: Plan | None = None) -> PendingReadback:
        """Copy the outputs (and ``extra``, a (buffer, nbytes, callback) such as resolved timestamps) into
        one staging buffer, submit, and request its mapping: one map per run. A replay's staging buffer comes
        from its plan's pool (kept between runs); a recording's is its own."""
        layout, host_values, total = {}, {}, 0
        for name, value in outputs.items():
            if isinstance(value, GTensor) and value.host is None:
                layout[name] = (total, functools.partial(self.decode, value))
                total += self.readback_bytes(value)
            else:
                host_values[name] = host_of(value)
        extra_slice = None
        if extra is not None:
            extra_slice = (total, extra[1], extra[2])
            total += aligned(extra[1])
        fault_at, checks = total, None
        if self.faults.run_checks:  # the run's index fault words: one more small copy, the same map
            total += aligned(self.faults.nbytes())
        staging, pool = None, None
        if total:
            what = f"the staging buffer for the outputs {list(layout)}"
            if plan is not None:
                if plan.staging is None or plan.staging.nbytes < total:
                    plan.staging = StagingPool(self.ctx, total, "wgsentis outputs")
                pool = plan.staging
                staging = pool.acquire(what)
            else:
                usage = self.ctx.wgpu.BufferUsage
                staging = self.ctx.create_buffer(total, usage.MAP_READ | usage.COPY_DST, "wgsentis outputs", what)
            for name, (offset, _decode) in layout.items():
                t = outputs[name]
                self.copy_out(encoder, t, staging, offset)
                self.last_run.transfers.append(Transfer("download", name, t.nbytes, "output"))
            if extra is not None:
                encoder.copy_buffer_to_buffer(extra[0], 0, staging, extra_slice[0], extra[1])
            checks = self.faults.copy_into(encoder, staging, fault_at)
        self.faults.run_checks = []  # this run's are read back; a later _finish without a start checks none
        submitted = time.perf_counter()
        self.ctx.queue.submit([encoder.finish()])
        mapping = time.perf_counter()
        self.last_run.submit = mapping - submitted
        readback = PendingReadback(self.ctx, staging, layout, host_values, extra_slice, checks, pool,
                                   self.last_run.phases)
        self.last_run.phases["map_request"] = time.perf_counter() - mapping
        return readback
