"""The GPU program every GPU backend shares: a graph run on the device through planned, replayed plans.

A new input signature (shapes, dtypes and the host-read values) is first *traced*, before any GPU work: each
layer is placed (``placement.Placer``: on the GPU, planned on the host, or a fallback with a sync) and the GPU
layers' builders record their steps on virtual allocations. The planner lays the tensors out in arenas by
lifetime (``planner``), the steps are bound there, and the run replays the plan: upload inputs, encode its
steps (running fallback layers in between), one submission, the outputs copied into a staging buffer kept
with the plan. A plan whose fallback layer needs values computed on the device cannot be traced past it: it
is recorded while it runs on a transient buffer pool, then laid out the same way for its replays.

``GPUProgram`` coordinates the run and owns the recording's memory (its pool, uniforms, clock and live bytes:
what recorders call) and the tensor storage hooks a backend overrides. Its parts live beside it: one layer
placed and built (``layer_build``), the layer loop of a recording (``recording``), control-flow subgraphs
(``subgraphs``), encoding and submitting a plan (``replay``), downloads and fallback layers (``fallback``).

A backend subclasses ``GPUProgram`` with its recorder (``make_recorder``) and its command stream
(``make_stream``); ``wgsentis.backends.gpu_compute`` is the compute one.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np

from wgsentis.backends.shape_values import ShapeValues
from wgsentis.backends.gpu.buffer_storage import BufferStorage
from wgsentis.backends.gpu.collector import COLLECTOR
from wgsentis.backends.gpu.device import GPUContext, allocation_error, get_context
from wgsentis.backends.gpu.device_tensors import DeviceValue
from wgsentis.backends.gpu.dtypes import PRECISIONS, TooLargeForDevice
from wgsentis.backends.gpu.fallback import HostSync
from wgsentis.backends.gpu.faults import FaultBuffer
from wgsentis.backends.gpu.layer_build import LayerBuilder
from wgsentis.backends.gpu.layer_reuse import LayerReuse
from wgsentis.backends.gpu.lookahead import SizeLookahead
from wgsentis.backends.gpu.memory import BufferPool, ConstantStore, PlanValues, ScratchTextures, UniformArena
from wgsentis.backends.gpu.placement import Placer, input_bound, value_bound
from wgsentis.backends.gpu.planner import DEFAULT_MAX_PLANS, ORDERS, PlanCache, live_peak, plan_arenas
from wgsentis.backends.gpu.readback import PendingReadback, StagingPool
from wgsentis.backends.gpu.recording import Recording, bind_feeds, bind_steps, rebind_textures
from wgsentis.backends.gpu.replay import (emit_steps, replay_layer_by_layer, replay_stamps, store_layer_times,
                                         submit_run)
from wgsentis.backends.gpu.report import RunReport, program_stats
from wgsentis.backends.gpu.resize import Resize, ResizeAbandoned, finish_resize
from wgsentis.backends.gpu.steps import Plan, PlanInvalid, Transfer
from wgsentis.backends.gpu.streams import CommandStream
from wgsentis.backends.gpu.subgraphs import SubgraphDeaths, record_subgraph
from wgsentis.backends.gpu.tensors import Allocation, GTensor, reserved_bytes
from wgsentis.backends.gpu.timestamps import QuerySets
from wgsentis.backends.host_memory import release_freed_memory
from wgsentis.budget import check_device_bytes
from wgsentis.errors import DeviceError, WgSentisError
from wgsentis.ir import Graph, Layer, constant_array_ids
from wgsentis.ops.kernel_options import DEFAULT_KERNEL_OPTIONS, KernelOptions


# Structures (input names, ranks, dtypes) whose last full trace a program keeps to plan their other sizes from.
MAX_BASES = 4


class GPUProgram(BufferStorage, HostSync):
    """A graph compiled for a GPU backend: plans per input signature (an LRU of ``max_plans``), shared weights.

    The program protocol (what ``Worker`` uses): ``output_names``, ``execute(feeds, control)`` -> a readback
    with ``wait()``/``done()``, ``stats()``, ``close()``. Public hooks for tools: ``set_timestamps``,
    ``last_run``, ``plan_summary``, ``run_layer_by_layer``."""

    backend = ""  # the registry's backend name of this program's builders
    runs_on_any_thread = False  # (the program protocol) its runs stay on the worker's runner thread

    # Whether a layer past the storage binding limit is built again in tiles (outer_tiles.tiled_build):
    # gpu-compute binds windows of buffers; gpu-pixel's tensors are textures.
    tiles_past_binding = False

    def __init__(self, graph: Graph, threads: int = 1, debug_groups: bool = False,
                 precision: str = "float32", ctx: GPUContext | None = None, max_plans: int = DEFAULT_MAX_PLANS,
                 native_calls: bool = True, fast_winograd: bool = False,
                 kernels: KernelOptions = DEFAULT_KERNEL_OPTIONS, prepare_ahead: bool = True) -> None:
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
        self._model_arrays = constant_array_ids(graph)
        self._plan_values: PlanValues | None = None  # the recording's host values (host_values_for)
        self.scratch = ScratchTextures(self.ctx)
        self.faults = FaultBuffer(self.ctx)
        self.queries = QuerySets(self.ctx)
        self.plans = PlanCache(max_plans)
        self.placer = Placer(graph, self.backend, lambda: self.control, kernels)
        self.layer_builder = LayerBuilder(self.placer, graph, self.free_temporaries, self.tiles_past_binding)
        self._recording: Recording | None = None  # the recording in progress (what control-flow builders call into)
        self._subgraph_deaths = SubgraphDeaths()
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
        # The recording's clock: one tick per layer placed, a subgraph's layers included (a Loop's iterations
        # each take their body's ticks). Allocation lifetimes and scratch requests are in ticks, so the
        # intermediates of one iteration share memory with the next's.
        self._tick = -1
        self.scratch_requests: dict[int, int] = {}
        self._download_pools: dict[int, StagingPool] = {}  # fallbacks' staging buffers by size
        self.tracing = False  # a plan is being traced: allocations are virtual, nothing runs on the device
        self._on_device = False  # the run in progress keeps its outputs on the device
        self._input_copies: Any = None  # the encoder of the run's device-to-device input copies, until submitted
        # The graph's shape arithmetic kept from one recording to the next (ShapeValues), with each one's placement.
        self.shape_values = ShapeValues(graph)
        self.shape_reasons: dict[int, str] = {}
        # Plans recorded, and those of a structure (input names, ranks, dtypes) seen before: a size-only change.
        self.plans_recorded = self.plans_recorded_for_new_sizes = 0
        # GPU layers a trace records from an earlier trace's template instead of running their builders.
        self.layer_reuse = LayerReuse(self._model_arrays, graph.value_info)
        self._arena_order: str | None = None  # the order of planner.ORDERS that laid out this program's first plan
        self._structures: set[tuple] = set()
        # Per structure, the plan of its last full trace, from which later sizes are planned (resize.py).
        self._bases: dict[tuple, Plan] = {}
        self._resize: Resize | None = None  # the resize in progress
        self.plans_resized = 0
        self.gpu_layers_kept = 0
        # The next size of inputs growing by a steady step, traced while the GPU runs the current size.
        self.lookahead = SizeLookahead(prepare_ahead)
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
        self.lookahead.paused = bool(mode)  # (a profiled run's host time is its own)

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
        plans = {id(p): p for p in [*self.plans.values(), *self._bases.values()]}
        if self.last_plan is not None:
            plans[id(self.last_plan)] = self.last_plan
        for plan in plans.values():
            self._free_plan(plan)
        self.plans.clear()
        self._bases.clear()
        self.last_plan = None
        self._next_stream = None
        self.shape_values.clear()
        self.layer_reuse.clear()
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
        if plan.host_values is not None:
            plan.host_values.close()
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
            if self._resize is not None:
                self._resize.inherit(self, alloc)
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

    def host_values_for(self, value: np.ndarray) -> PlanValues | None:
        """Where a host array a builder uploads is kept: None (the program's constant store, uploaded once and kept
        until close) for the model's constants and the arrays derived from them, else the recording's plan
        (memory.PlanValues: a value computed for this signature lives as long as its plan)."""
        if self._plan_values is None or id(value) in self._model_arrays or self.constants.is_derived(value):
            return None
        return self._plan_values

    def host_value_copy(self, alloc: Any, what: str) -> Any:
        """Another plan's host value (a template binds it) uploaded into the recording's plan."""
        if self._plan_values is None:  # (a template is stamped only while tracing, into a recording)
            raise DeviceError(f"{what}: a host value outside a recording")
        return self._plan_values.copy_of(alloc, what)

    def note_scratch(self, nbytes: int) -> None:
        """The current layer asked for ``nbytes`` of scratch textures (counted in the plan's live-set bound)."""
        self.scratch_requests[self._tick] = self.scratch_requests.get(self._tick, 0) + nbytes

    def inherit_allocation(self, alloc: Allocation, old: Allocation) -> bool:
        """Put a resize's new ``alloc`` where the base plan's ``old`` lies, where it fits (resize.Resize)."""
        if old.persistent or old.buffer is None or alloc.reserved > old.reserved:
            return False
        # (Its own reserved bytes stay: the bindings its steps make, which templates repeat, cover no more.)
        alloc.move(old.buffer, old.offset)
        return True

    @staticmethod
    def one_resource(a: Allocation, b: Allocation) -> bool:
        """Whether two laid-out allocations lie in one buffer (which one step may not both read and write)."""
        return a.buffer is b.buffer

    def _counted(self, value: Any) -> Allocation | None:
        """The allocation whose references ``value`` counts (a resize's: resize.Resize.counted), or None."""
        if not isinstance(value, GTensor) or value.alloc is None or value.alloc.persistent:
            return None
        return value.alloc if self._resize is None else self._resize.counted(value.alloc)

    def retain(self, value: Any) -> None:
        """One more live tensor name holds ``value``'s allocation (the recording's reference count)."""
        alloc = self._counted(value)
        if alloc is not None:
            alloc.refs += 1

    def drop(self, value: Any) -> None:
        """A tensor name that held ``value``'s allocation is dead: the allocation is freed with its last one."""
        alloc = self._counted(value)
        if alloc is not None:
            alloc.refs -= 1
            if alloc.refs == 0:
                self.free_allocation(alloc)

    @property
    def clock(self) -> int:
        """The recording's clock: the tick of the layer being recorded (``advance_clock``)."""
        return self._tick

    def skip_clock(self, tick: int) -> None:
        """Set the clock to ``tick``: a resize's kept layer took the base trace's ticks."""
        self._tick = tick

    @property
    def allocation_count(self) -> int:
        """Allocations the recording in progress has made."""
        return len(self._allocations)

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

    # -- running ---------------------------------------------------------------------------------------
    def execute(self, feeds: dict[str, Any], control: Any = None, on_device: bool = False) -> PendingReadback:
        """The program protocol's run: ``run`` with the host's BLAS kept to one thread (host layers run beside
        the device, where BLAS threads would only spin)."""
        from wgsentis.ops.parallel import set_blas_threads

        set_blas_threads(1)
        return self.run(feeds, control, on_device)

    def run(self, feeds: dict[str, Any], control: Any = None, on_device: bool = False) -> PendingReadback:
        """Run on ``feeds``: replay the plan for this signature, or record one. Returns the readback.

        ``control`` (a RunControl) is checked before every layer while recording, and before every host
        layer of a replay (cancellation, timeout, memory budget): a replay's GPU work is one submission.
        Errors from wgpu itself (validation, out of memory, a lost device) become a DeviceError that
        names the graph; our own typed errors pass through unchanged.

        ``on_device``: the outputs computed on the device stay there, each copied into device memory of its own
        (``device_tensors.DeviceValue``) instead of being read back. Feeds may be DeviceValues of this device:
        they are copied device to device into the plan's inputs."""
        if self._closed:
            raise DeviceError(f"the GPU program of graph '{self.graph.name}' is closed")
        self.control = control
        self._on_device = on_device
        try:
            return self._run(feeds)
        except WgSentisError:
            raise
        except Exception as exc:
            raise DeviceError(f"graph '{self.graph.name}' on {self.ctx.info.name}: the GPU run failed: "
                              f"{type(exc).__name__}: {str(exc).strip()[:500]}") from exc

    def _run(self, feeds: dict[str, Any]) -> PendingReadback:
        self.last_run = RunReport()
        signature = tuple((n, v.shape, v.dtype.str) if isinstance(v, np.ndarray | DeviceValue)
                          else (n, type(v).__name__) for n, v in sorted(feeds.items()))
        structure = tuple((entry[0], len(entry[1]), entry[2]) if len(entry) == 3 else entry for entry in signature)
        ahead = self.lookahead.observe(structure, signature)  # the next run's signature, where it can be told
        plan = self.plans.get(signature)
        if plan is not None and any(not np.array_equal(feeds[n], v) for n, v in plan.host_read_inputs.items()):
            self.lookahead.rejected(structure, plan)
            plan = None  # it baked in other values of inputs read on the host (e.g. a shape input)
        if plan is not None:
            held = self.ctx.held.nbytes
            if held and self.control is not None:
                # A replay allocates nothing, but the tensors users hold count against the budget with its arenas.
                check_device_bytes(self.control, f"the recorded plan of graph '{self.graph.name}'", plan.arena_bytes,
                                   held, "its intermediates (device tensors held by the caller count as live)")
            try:
                readback = self._replay(plan, feeds)
            except PlanInvalid:
                self.plans.discard(signature)
                self.last_run = RunReport()
            else:
                self.lookahead.replayed(structure, plan, self.last_run)
                self.lookahead.prepare(self, ahead, structure, feeds, plan)  # while the GPU runs this one
                return readback
        with COLLECTOR.paused():  # (what a trace makes is collected after its run is submitted: collector.py)
            started = time.perf_counter()
            plan = self.trace_signature(structure, feeds)
            if plan is not None:
                # Planned before any GPU work: its first run is a replay on the arenas laid out for it.
                self.plans.put(signature, plan)
                traced = time.perf_counter() - started
                readback = self._replay(plan, feeds)
                self.last_run.recorded = True
                self.last_run.encode += traced
                self.lookahead.prepare(self, ahead, structure, feeds, plan)
                return readback
            # A fallback layer needs values computed on the device: the run is recorded while it runs.
            self.last_run = RunReport()
            plan, readback = self._record(feeds)
            if plan is not None:
                self.plans.put(signature, plan)
            return readback

    def trace_signature(self, structure: tuple, feeds: dict[str, Any]) -> Plan | None:
        """The plan of ``feeds``' signature traced (nothing run on the device): from the base trace of its
        ``structure`` where one exists (resize.py), else in full, which becomes the structure's base. None where
        a fallback layer needs values only a run gives."""
        self.plans_recorded += 1
        if structure in self._structures:
            self.plans_recorded_for_new_sizes += 1
        self._structures.add(structure)
        plan = None
        base = self._bases.get(structure)
        if base is not None:
            try:  # a size of a structure traced before: planned from its base trace
                plan, _ = self._record(feeds, trace=True, resize=Resize(base, feeds))
                self.plans_resized += plan is not None
                if plan is not None and 4 * self.gpu_layers_kept < len(plan.gpu_layers):
                    # Nearly all of it changed against the base (a prompt's trace, and now one token a step): the
                    # next size is traced in full, and later ones planned from that.
                    self._bases.pop(structure)
            except ResizeAbandoned:
                self.last_run = RunReport()
        if plan is None:
            plan, _ = self._record(feeds, trace=True)
            if plan is not None and plan.trace is not None:
                self._bases.pop(structure, None)
                self._bases[structure] = plan
                while len(self._bases) > MAX_BASES:  # the least recently traced structure's goes
                    self._bases.pop(next(iter(self._bases)))
        return plan

    def upload_input(self, name: str, value: np.ndarray, target: GTensor | None, layer: str = "") -> GTensor:
        """Upload ``value`` (an input of the run, or the output of fallback ``layer``) into ``target``, or into a
        new device tensor where it is None; returns that tensor, its host copy set. Raises TooLargeForDevice
        where the value cannot live on the device, or passes the int64 bound ``target``'s plan was made for.
        While tracing nothing is written: the plan's first replay uploads it."""
        started = time.perf_counter()
        if isinstance(value, DeviceValue):
            return self._bind_device_input(name, value, target)
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

    def _bind_device_input(self, name: str, value: DeviceValue, target: GTensor | None) -> GTensor:
        """Device tensor ``value`` as the input ``name``: copied device to device into ``target`` (or a new input
        tensor) where this program keeps tensors as ``value`` is kept; otherwise read to the host and uploaded
        (both copies counted with the run's transfers)."""
        if target is not None and target.bound is not None and (value.bound is None or value.bound > target.bound):
            raise TooLargeForDevice(f"input '{name}': a device tensor with no bound under the {target.bound} its "
                                    "plan was made for")
        t = target if target is not None else self.input_tensor(name, value)
        if target is None and value.dtype == np.int64:
            t.bound = value.bound
        if not self.binds_device_value(value, t):
            started = time.perf_counter()
            host = value.read()
            self.last_run.transfers.append(Transfer("download", name, value.nbytes, "device input",
                                                    time.perf_counter() - started))
            return self.upload_input(name, host, t)
        t.host = None  # its value is on the device only: a layer reading it on the host downloads it
        if not self.tracing:
            if self._input_copies is None:
                self._input_copies = self.ctx.device.create_command_encoder(label="wgsentis device inputs")
            self.copy_device_value(self._input_copies, value, t)
        return t

    def flush_input_copies(self) -> None:
        """Submit the device-to-device copies of the run's device inputs, ahead of the work that reads them."""
        if self._input_copies is not None:
            encoder, self._input_copies = self._input_copies, None
            self.ctx.queue.submit([encoder.finish()])

    def layout_memory(self, plan: Plan, end: int) -> None:
        """Lay ``plan``'s intermediates out for its replays (``end``: one past the recording's last tick): arenas of
        storage buffers by lifetime (``planner.plan_arenas``); the caller then binds every step."""
        # The program's first plan tries every order; later ones (a new input size: a decoder's every step) only
        # the one that won, as gpu-pixel's texture packing does (half the planner's time on a GPT-2 step).
        orders = ORDERS if self._arena_order is None else (self._arena_order,)
        plan.arenas, plan.arena_bytes, self._arena_order = plan_arenas(self.ctx, plan.allocations, plan.steps, end,
                                                                       f"'{self.graph.name}'", orders)

    def run_host(self, index: int, args: list[Any]) -> tuple[Any, ...]:
        """Layer ``index``'s numpy kernel on ``args`` (host values), timed into the run's report."""
        started = time.perf_counter()
        try:
            return self.placer.run_host(index, args)
        finally:
            kernel_s = self.last_run.host_kernel_s
            kernel_s[index] = kernel_s.get(index, 0.0) + time.perf_counter() - started

    def _record(self, feeds: dict[str, Any], trace: bool = False,
                resize: Resize | None = None) -> tuple[Plan | None, PendingReadback | None]:
        """Record a plan for ``feeds``' signature. ``trace``: plan it without running anything on the device
        (tensors are virtual allocations until the planner lays them out); returns (None, None) at the first
        fallback layer, whose inputs only a run can give. Otherwise the run is recorded while it runs on a
        transient pool, then laid out for its replays. Returns (the plan, or None when it cannot be replayed;
        the recording run's readback, or None for a trace)."""
        started = time.perf_counter()
        self.last_run.recorded = True
        self.tracing = trace
        self._resize = resize
        try:
            return self._record_layers(feeds, trace, started)
        finally:
            self.tracing = False
            self.gpu_layers_kept = resize.kept_layers if resize is not None else 0
            self._resize = None
            self._recording = None  # (it holds the run's feeds: a device tensor fed in is the caller's to drop)
            self._pool = None
            self._uniforms = None
            self._plan_values = None
            self._allocations = []

    def _record_layers(self, feeds: dict[str, Any], trace: bool,
                       started: float) -> tuple[Plan | None, PendingReadback | None]:
        # Each recording has its own pool: an earlier plan's tensors live in that plan's arenas.
        self._pool = None if trace else BufferPool(self.ctx)
        self._uniforms = UniformArena(self.ctx, deferred=trace)
        self._allocations = []
        # The budget counts the device tensors users hold (outputs of runs with on_device=True) as live.
        self._live_bytes = self.ctx.held.nbytes
        self._tick = -1
        self.layer_reuse.start()
        self.scratch_requests = {}
        self._plan_values = PlanValues(self.ctx, deferred=trace)
        plan = Plan(uniforms=self._uniforms, host_values=self._plan_values)
        self._input_copies = None
        env, cacheable = bind_feeds(self, feeds, plan)
        self.flush_input_copies()  # (nothing while tracing: the first replay copies them)
        rec = self.make_recorder()
        plan.index_checks = rec.index_checks  # filled as checking layers are recorded
        self.faults.start(rec.index_checks)
        stream = None if trace else self.make_stream(True)
        self._recording = Recording(self, rec, plan, feeds, env, stream)
        if self._resize is not None:
            self._recording.resize, self._recording.record = self._resize, None
        replayable = self._recording.record_layers(trace, cacheable)
        if replayable is None:
            return None, None
        self._uniforms.flush()  # (a traced plan's parameter blocks, gathered on the host)
        self._plan_values.flush()  # (and its host values)
        self.last_run.transfers.extend(Transfer("upload", name, nbytes, "a host value of the plan")
                                       for name, nbytes in self._plan_values.uploads)
        end = self._tick + 1  # one past the last tick: when the outputs die
        plan.allocations = self._allocations
        plan.peak_live_bytes = live_peak(plan.allocations, end, self.scratch_requests)
        readback = None
        if stream is not None:
            self.last_run.encode = time.perf_counter() - started
            readback = self._submit(stream.take(), plan.outputs, on_device=self._on_device)
        self.scratch.realize()
        if replayable and self._resize is not None:
            finish_resize(self, plan, self._resize, rec.steps, end)
            bind_steps(self.ctx.device, rec.steps, self.native_calls)  # (the kept layers' steps are bound)
        elif replayable:
            if self._recording.record is not None:
                plan.trace = self._recording.record.finished(end, self.scratch_requests)
            # Replays run on memory laid out from the lifetimes the recording showed (a recorded run ran on
            # the transient pool), every step bound where its tensors now live.
            self.layout_memory(plan, end)
            bind_steps(self.ctx.device, plan.steps, self.native_calls)
        else:
            plan.arena_bytes = self._pool.total_bytes
        if self.scratch.grown:
            # A scratch slot got a taller texture: the cached plans' steps bind it from now on (the old one is
            # released with their old bind groups once the work in flight is done), and so do the structures' base
            # plans, whose steps later sizes keep (each step once: resized plans share theirs).
            steps = {id(step): step for cached in [*self.plans.values(), *self._bases.values()]
                     for step in cached.steps}
            rebind_textures(self.ctx.device, list(steps.values()), self.scratch.replaced, self.native_calls)
            self.scratch.grown = False
            self.scratch.replaced = set()
        self.last_plan = plan
        return (plan if replayable else None), readback

    def value_of(self, name: str, env: dict[str, Any]) -> Any:
        """The value named ``name`` in a recording's values ``env``, or the graph's constant of that name."""
        if name in env:
            return env[name]
        if name in self.graph.constants:
            return self.graph.constants[name]
        raise WgSentisError(f"tensor '{name}' was never produced")

    # -- control flow (what the If, Loop and Scan programs call) ----------------------------------------------------
    def record_subgraph(self, rec: Any, graph: Graph, inputs: list[Any], scope: Any) -> list[Any]:
        """Record ``graph``'s layers into ``rec`` as part of the current layer, its inputs bound to ``inputs`` and
        the names it does not define looked up in ``scope`` (a function of a name): every layer a GPU program or
        a host computation; SubgraphDeclined where one would fall back (the enclosing layer then runs on the
        host as a whole). Returns the subgraph's outputs (device tensors or host values): ``subgraphs``."""
        return record_subgraph(self._recording, self._subgraph_deaths, rec, graph, inputs, scope)

    def read_scalar(self, rec: Any, value: Any, what: str) -> np.ndarray:
        """The host value of a small device tensor a control-flow program branches on (an If's condition, a Loop
        body's), read after the work recorded so far is submitted (``Recording.read_scalar``)."""
        return self._recording.read_scalar(rec, value, what)

    # -- replaying -------------------------------------------------------------------------------------------
    def _replay(self, plan: Plan, feeds: dict[str, Any]) -> PendingReadback:
        for name, t in plan.input_tensors.items():
            try:
                self.upload_input(name, feeds[name], t)
            except TooLargeForDevice:
                self._input_copies = None  # copies into this plan's inputs: the run records anew instead
                raise PlanInvalid(name) from None  # e.g. int64 values past int32: this run records anew
        self.flush_input_copies()
        started = time.perf_counter()  # the uploads are their own phase (their transfers' seconds)
        self.faults.start(plan.index_checks)
        stamps = replay_stamps(self.ctx, self.queries, self._timestamps, self._pass_per_layer)
        # The encoder (and its first pass) made while the previous run was on the GPU, if any.
        stream = self._next_stream or self.make_stream(False)
        self._next_stream = None
        emit_steps(stream, plan.steps, self.graph.layers, self.debug_groups, self._replay_fallback, stamps)
        if stamps is not None:
            stamps.finish(stream)
        encoder = stream.take()
        extra = None
        if stamps is not None and stamps.count:
            # The resolved timestamps ride in the outputs' staging buffer: one map, no extra sync.
            extra = (stamps.resolve(encoder), 8 * stamps.count, store_layer_times(stamps, self.last_run))
        # Host time encoding this replay (fallback layers' own work included).
        self.last_run.encode = time.perf_counter() - started
        readback = self._submit(encoder, plan.outputs, extra, plan, self._on_device)
        # Creating an encoder and beginning a pass cost ~50 us each on wgpu-native: do it now, while the
        # GPU runs what was just submitted, rather than at the start of the next run.
        self._next_stream = self.make_stream(False)
        self._next_stream.open_pass()
        return readback

    def run_layer_by_layer(self, feeds: dict[str, Any]) -> tuple[dict[int, float], PendingReadback]:
        """Replay the last plan (recorded for ``feeds``' signature) one layer per submission, each waited for,
        timing each on the host: per-layer times where the adapter has no timestamp queries. Returns (layer
        index -> seconds, the outputs' readback)."""
        plan = self.last_plan
        if plan is None:
            raise DeviceError(f"run_layer_by_layer: graph '{self.graph.name}' has no recorded plan; run it first")
        self.last_run = RunReport()
        for name, t in plan.input_tensors.items():
            self.upload_input(name, feeds[name], t)
        self.flush_input_copies()
        self.faults.start(plan.index_checks)
        times = replay_layer_by_layer(self.ctx, plan.steps, self.graph.layers, self.make_stream, self._replay_fallback)
        encoder = self.ctx.device.create_command_encoder(label="layer by layer: outputs")
        return times, self._submit(encoder, plan.outputs, None, plan)

    def _submit(self, encoder: Any, outputs: dict[str, Any], extra: tuple[Any, int, Any] | None = None,
                plan: Plan | None = None, on_device: bool = False) -> PendingReadback:
        """The run's last submission, with its outputs' copies into one staging buffer (``replay.submit_run``), or
        ``on_device``, into device memory of their own."""
        return submit_run(self.ctx, self, self.faults, self.last_run, encoder, outputs, extra, plan,
                          on_device=on_device)
