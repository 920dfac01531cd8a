"""The recording of a plan in progress: the run's values bound to the graph's inputs, then every layer placed
and recorded in order (its GPU steps, a host computation, or a fallback with a sync), its tensors freed after
their last reader.

A ``Recording`` is what one pass over the graph shares with the control-flow builders that call back into it
(``read_scalar``; ``subgraphs.record_subgraph`` records a subgraph's layers into it): the plan being filled, the
run's feeds and values, the command stream (None while tracing: nothing runs on the device) and how many of the
recorder's steps are encoded already. The program (``program.GPUProgram``) owns the recording's memory (its pool,
clock and live bytes) and lays the finished plan out for its replays (``bind_steps``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from wgsentis.backends.gpu.device_tensors import DeviceValue
from wgsentis.backends.gpu.dtypes import TooLargeForDevice, gpu_type_of
from wgsentis.backends.gpu.layer_build import narrow_host_inputs
from wgsentis.backends.gpu.layer_reuse import WEIGHT_SHAPED_OPS, arguments_key
from wgsentis.backends.gpu.placement import host_of, host_read
from wgsentis.backends.gpu.replay import emit_layer
from wgsentis.backends.gpu.resize import KeptRun, LayerRecord, Resize, ResizeAbandoned, TraceRecord, keepable
from wgsentis.backends.gpu.steps import Copy, Dispatch, Draw, Placement, Plan
from wgsentis.backends.gpu.streams import CommandStream
from wgsentis.backends.gpu.tensors import GTensor, GTexture, NeedsDeviceValues
from wgsentis.errors import DeviceError
from wgsentis.ir import Layer
from wgsentis.ops.spec import spec_of


def bind_feeds(program: Any, feeds: dict[str, Any], plan: Plan) -> tuple[dict[str, Any], bool]:
    """The run's values for the graph's inputs: device tensors uploaded by ``program`` (a ``GPUProgram``) where
    the GPU can hold them, host values otherwise (those a replay must see again go into ``plan.host_read_inputs``).
    Returns (the values by name, whether the plan can still be replayed)."""
    cacheable = True
    env: dict[str, Any] = {}
    for name, value in feeds.items():
        if isinstance(value, DeviceValue) or (isinstance(value, np.ndarray) and gpu_type_of(value.dtype) is not None):
            try:
                t = program.upload_input(name, value, None)
            except TooLargeForDevice:
                value = np.asarray(value)  # (a device tensor this program cannot hold: read to the host)
                env[name] = value
                # Layers reading it run on the host with this value baked into the plan: replay only it.
                plan.host_read_inputs[name] = np.array(value, copy=True)
                continue
            plan.input_tensors[name] = t
            env[name] = t
            program.retain(t)
        else:
            env[name] = value
            # Values that stay on the host (strings, maps, sequences) are baked into what the plan ran on them:
            # a replay must see the same values, or the run is recorded anew.
            if isinstance(value, np.ndarray):
                plan.host_read_inputs[name] = np.array(value, copy=True)
            elif value is not None:
                cacheable = False
    for name in list(env):
        if program.placer.last_use.get(name, -1) < 0 and name not in program.output_names:
            program.drop(env[name])
    return env, cacheable


class Recording:
    """One recording of ``program``'s graph (a ``GPUProgram``) into ``plan``, its steps made by the recorder
    ``rec``: ``env`` holds the values by name (from ``bind_feeds``), ``stream`` is None while tracing."""

    def __init__(self, program: Any, rec: Any, plan: Plan, feeds: dict[str, Any], env: dict[str, Any],
                 stream: CommandStream | None) -> None:
        self.program = program
        self.rec = rec
        self.plan = plan
        self.feeds = feeds
        self.env = env
        self.stream = stream
        self.encoded = 0  # the recorder's steps already encoded (and added to the plan)
        self.reads_device = False  # a builder read a device value: the plan is recorded anew on every run
        self.layer_index = -1
        # A trace keeps its layers' record (resize.TraceRecord) for later sizes of its structure; a resize
        # (resize.Resize) keeps the base trace's clean layers as they were.
        self.record: TraceRecord | None = TraceRecord() if stream is None else None
        self.resize: Resize | None = None
        self.layer_reads: list[str] = []  # run inputs the current layer read on the host

    def value(self, name: str) -> Any:
        """The value named ``name`` in the recording so far (a graph constant otherwise)."""
        return self.program.value_of(name, self.env)

    def note_host_read(self, name: str) -> None:
        """An input of the run was read on the host: its value is part of the plan's signature."""
        self.plan.host_read_inputs[name] = np.array(self.feeds[name], copy=True)
        self.layer_reads.append(name)

    def record_layers(self, trace: bool, cacheable: bool) -> bool | None:
        """Record every layer of the graph, then the plan's outputs. Returns whether the plan can be replayed
        (``cacheable`` so far: what ``bind_feeds`` said), or None when a trace reached a fallback layer, whose
        inputs only a run can give."""
        program, rec, plan, env, stream = self.program, self.rec, self.plan, self.env, self.stream
        placer = program.placer
        shapes = program.shape_values
        shapes.start()
        record, resize = self.record, self.resize
        if record is not None:
            record.inputs = {n: env[n] for n in self.feeds if n in env}
        runs, predicted = None, frozenset()
        if resize is not None:
            resize.compare_inputs(env, self.feeds)
            prediction = resize.record.prediction
            if prediction is not None:
                runs, predicted = prediction.kept_runs(resize.record, resize.base, program.graph, placer,
                                                       shapes.kinds), prediction.dirty
        skip_to = 0
        for i, layer in enumerate(program.graph.layers):
            if i < skip_to:
                continue
            if runs is not None and i in runs:
                if resize.dirty <= predicted:  # (so far: the run's layers read none of what is dirty)
                    skip_to = runs[i].stop
                    self.keep_base_run(runs[i])
                    continue
                runs = None  # a tensor the prediction did not foresee is dirty: each layer is decided again
            self.layer_index = i
            program.advance_clock()
            rec.layer, rec.layer_index = layer, i
            if resize is not None:
                base = resize.record.layers[i]
                if program.clock != base.tick_start:
                    raise ResizeAbandoned(f"layer {i} starts at tick {program.clock}, not {base.tick_start}")
                if resize.clean(layer, base):
                    self.keep_base_layer(i, layer, base)
                    continue
            tick_start, checks_start, steps_start = program.clock, len(rec.index_checks), len(plan.steps)
            allocs_start = program.allocation_count
            self.layer_reads = []
            args = [self.value(n) if n else None for n in layer.inputs]
            # Shape arithmetic whose inputs' shapes (or values) are those of an earlier recording keeps its value:
            # a host layer again, neither placed nor run (a decoder's new past length re-runs only what reads it).
            kept = shapes.kept_value(i, layer, args) if shapes.kinds[i] else None
            if program.control is not None:
                if kept is None:
                    program.control.before_layer(layer, args)  # stop or refuse before anything is allocated
                else:  # a kept value allocates nothing (the cpu backend checks none at all)
                    program.control.check(layer)
            if kept is not None:
                kind, reason, outputs = "host", program.shape_reasons[i], kept
            else:
                # (A resize's layer the base trace ran on the host: no template to look for.)
                kind, reason, outputs = self.place(rec, layer, args, resize is None or base.kind != "host")
            if kept is None and kind != "fallback" and not spec_of(layer.op_type, layer.domain).shape_only:
                for n in layer.inputs:
                    if n in plan.input_tensors and (kind == "host" or n in host_read(layer, args, env)):
                        self.note_host_read(n)
            if kind == "gpu":
                new = rec.steps[self.encoded:]
                self.encoded = len(rec.steps)
                if stream is not None:
                    emit_layer(stream, program.graph.layers, i, new, program.debug_groups)
                plan.steps.extend(new)
            elif kind == "host":
                if kept is None:
                    outputs = program.run_host(i, [host_of(a) for a in args])
                    if shapes.kinds[i]:
                        outputs = shapes.store(i, layer, args, list(outputs))
                        program.shape_reasons[i] = reason
            elif trace:
                return None
            else:
                if narrow_host_inputs(args):
                    # Its device inputs are narrow-typed inputs of the run (float16, int8...), whose host copies
                    # serve: no sync, at record and at replay alike. Before such inputs lived on the device too,
                    # this layer ran on the host from them, a host layer; it still is.
                    kind, reason = "host", f"{reason}; its float16/8-bit inputs' host copies serve, no sync"
                outputs, step = program.record_fallback(i, layer, args, stream.take(), env)
                plan.steps.append(step)
                # Outputs kept on the host (sequences, types the GPU lacks) make later layers depend
                # on values a replay cannot check cheaply: such runs are recorded every time.
                cacheable = cacheable and all(t is not None and n not in placer.host_needed
                                              for t, n in zip(step.targets, layer.outputs, strict=False) if n)
            placement = Placement(layer.name, layer.op_type, kind, reason)
            plan.placements.append(placement)
            if record is not None:
                record.layers.append(LayerRecord(
                    kind, keepable(kind, layer, outputs), tick_start,
                    program.clock, plan.steps[steps_start:], tuple(outputs), placement,
                    rec.index_checks[checks_start:], tuple(self.layer_reads), (allocs_start, program.allocation_count)))
            elif resize is not None:
                if program.clock != base.tick_end or len(rec.index_checks) - checks_start != len(base.checks):
                    raise ResizeAbandoned(f"layer {i} took other ticks or fault slots than in the base trace")
                resize.compare(layer, outputs, base)
            self.bind_outputs(i, layer, outputs)
        shapes.finish()
        plan.outputs = {n: self.value(n) for n in program.output_names}  # (an output may be a constant)
        return cacheable and not self.reads_device

    def bind_outputs(self, i: int, layer: Layer, outputs: Any) -> None:
        """Layer ``i``'s outputs become the recording's values; the values whose last reader it was die."""
        program, env, placer = self.program, self.env, self.program.placer
        for name, value in zip(layer.outputs, outputs, strict=False):
            if name:
                env[name] = value
                program.retain(value)
        for n in placer.dies_after[i]:
            if n in env:
                program.drop(env[n])
        for k in placer.unread_outputs[i]:
            if k < len(outputs):
                program.drop(outputs[k])

    def keep_base_layer(self, i: int, layer: Layer, base: LayerRecord) -> None:
        """A resize's clean layer ``i``: the base trace's steps, fault slots, host reads, placement and outputs, and
        its ticks, as they were (nothing placed, run, built or bound)."""
        program = self.program
        if program.control is not None:
            program.control.check(layer)  # cancellation and timeouts between layers, as a trace checks them
        if base.steps:
            self.plan.steps.extend(base.steps)
        if base.checks:
            self.rec.index_checks.extend(base.checks)
        for name in base.host_reads:
            self.note_host_read(name)
        self.plan.placements.append(base.placement)
        program.skip_clock(base.tick_end)
        self.resize.keep(i, base)
        shapes = program.shape_values
        if shapes.kinds[i]:  # shape arithmetic: the values of the next runs follow from these
            source = self.value(layer.inputs[0]) if shapes.kinds[i] == 1 and layer.inputs else None
            shapes.adopt(i, layer, base.outputs, getattr(source, "shape", ()))
        # The outputs become the recording's values; references are counted only where they hold a rebuilt
        # layer's allocation (a view of one: resize.Resize.counted), and the values whose last reader this was die.
        env, counted = self.env, self.resize.counted_value
        for name, value in zip(layer.outputs, base.outputs, strict=False):
            if name:
                env[name] = value
                alloc = counted(value)
                if alloc is not None:
                    alloc.refs += 1
        placer = program.placer
        for n in placer.dies_after[i]:
            if n in env:
                program.drop(env[n])
        for k in placer.unread_outputs[i]:
            if k < len(base.outputs):
                program.drop(base.outputs[k])

    def keep_base_run(self, run: KeptRun) -> None:
        """A resize's run of clean layers (``resize.KeptRun``) kept at once: what ``keep_base_layer`` does for each,
        with cancellation and timeouts checked before the run's first layer."""
        program, resize, env = self.program, self.resize, self.env
        self.layer_index = run.stop - 1
        if program.control is not None:
            program.control.check(program.graph.layers[run.start])
        self.plan.steps.extend(run.steps)
        self.rec.index_checks.extend(run.checks)
        for name in run.host_reads:
            self.note_host_read(name)
        self.plan.placements.extend(run.placements)
        resize.kept_layers += run.gpu
        resize.kept_records.extend(run.records)
        resize.kept_indices.extend(range(run.start, run.stop))
        env.update(run.outputs)
        adopt = program.shape_values.adopt
        for i, layer, outputs, source in run.adopts:
            adopt(i, layer, outputs, getattr(self.value(source), "shape", ()) if source is not None else ())
        counted = resize.counted_value
        for tick, adds, dying, unread in run.events:  # (at each layer's last tick: when its frees happen)
            program.skip_clock(tick)
            for value in adds:
                alloc = counted(value)
                if alloc is not None:
                    alloc.refs += 1
            for name in dying:
                if name in env:
                    program.drop(env[name])
            for value in unread:
                program.drop(value)
        program.skip_clock(run.end_tick)

    def place(self, rec: Any, layer: Layer, args: list[Any], templates: bool = True) -> tuple[str, str, Any]:
        """Where a layer runs, why, and (on the GPU) the outputs its builder recorded into ``rec``
        (``LayerBuilder.place``); ``templates``: look for a template of the layer first (while tracing)."""
        start = len(rec.steps)
        program = self.program
        reuse = program.layer_reuse if self.stream is None and rec.layer is layer else None
        key = generic = None
        if reuse is not None:
            # (A layer whose weights only their shapes matter to: its key by those shapes too, layer_reuse.py.)
            weight_shaped = (layer.op_type, layer.domain) in WEIGHT_SHAPED_OPS
            if templates:
                # A layer whose arguments are those of an earlier trace: its template stands for its builder.
                key = arguments_key(args, reuse.constants)
                generic = arguments_key(args, reuse.constants, weights_by_shape=True) if weight_shaped else None
                stamped = reuse.stamp(program, rec, self.layer_index, key, args, generic)
                if stamped is not None:
                    return "gpu", "", stamped
            given, clock = list(args), program.clock
            program.constants.trail = [] if weight_shaped else None
        try:
            kind, reason, outputs = program.layer_builder.place(rec, layer, args, self.value)
        finally:
            trail, program.constants.trail = program.constants.trail, None
        if reuse is not None and kind == "gpu":
            if not templates:
                key = arguments_key(given, reuse.constants)
                generic = arguments_key(given, reuse.constants, weights_by_shape=True) if weight_shaped else None
            stepped = program.clock != clock  # a builder that stepped the clock: its frees are not replayed
            reuse.remember(self.layer_index, None if stepped else key, given, rec, rec.steps[start:], outputs,
                           generic, trail)
        if kind == "fallback":
            # Steps a control-flow program already encoded before it gave up (read_scalar) have run; what is
            # encoded next starts where the kept steps end.
            self.encoded = min(self.encoded, start)
        return kind, reason, outputs

    def read_scalar(self, rec: Any, value: Any, what: str) -> np.ndarray:
        """The host value of a small device tensor a control-flow program branches on (an If's condition, a Loop
        body's): one download, counted with the run's transfers, after the work recorded so far is submitted.
        Tracing cannot read the device (NeedsDeviceValues: the run is recorded as it runs instead), and a plan
        that read one is recorded anew on every run, since its steps depend on the value."""
        if not isinstance(value, GTensor):
            return np.asarray(value)
        if value.host is not None:
            for name, t in self.plan.input_tensors.items():
                if t is value:  # an input of the run: its value is part of the plan's signature
                    self.note_host_read(name)
            return value.host
        if self.stream is None:
            raise NeedsDeviceValues(f"its {what} is computed on the device: recorded as it runs, with one read")
        pending = rec.steps[self.encoded:]
        self.encoded = len(rec.steps)
        program = self.program
        emit_layer(self.stream, program.graph.layers, self.layer_index, pending, program.debug_groups)
        self.plan.steps.extend(pending)
        self.reads_device = True
        value.name = value.name or what
        return program.download([value], self.stream.take(), rec.layer.name)[0]


def bind_steps(device: Any, steps: list[Any], native: bool = True) -> None:
    """Bind every step of a plan where its tensors now live (after the planner laid them out); ``native``: through
    wgpu-native's call (the program's ``native_calls``)."""
    for step in steps:
        if isinstance(step, Dispatch | Draw):
            try:
                step.bind(device, native)
            except Exception as exc:
                raise DeviceError(f"{step.label}: bind group rejected: {exc}") from None
        elif isinstance(step, Copy):
            step.moved()


def rebind_textures(device: Any, steps: list[Any], grown: set[int] | None = None, native: bool = True) -> None:
    """Remake the bind groups (and native copy calls) of the steps that use textures (a scratch texture grew):
    ``grown``, the ids of the textures that did, limits it to the steps binding one of them."""
    for step in steps:
        if isinstance(step, Dispatch) and any(isinstance(r, GTexture) and (grown is None or id(r) in grown)
                                              for r in step.extra):
            step.bind(device, native)
        elif isinstance(step, Copy):
            step.moved()
