"""Encoding a plan's steps into a command stream, and the submission that ends a run with its outputs' readback.

What a GPU program's replays (and its recordings) are made of: one layer's steps inside its debug group and
between its timestamps (``emit_layer``), a plan's steps with its fallback layers run in between
(``emit_steps``), the timestamps a replay takes (``replay_stamps``), and the last submission, which copies the
outputs, the resolved timestamps and the run's index fault words into one staging buffer (``submit_run``).
``program.GPUProgram`` drives them with its state (timestamp mode, the stream made ahead for the next run).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from wgsentis.backends.gpu.device import GPUContext
from wgsentis.backends.gpu.faults import FaultBuffer
from wgsentis.backends.gpu.placement import host_of
from wgsentis.backends.gpu.readback import PendingReadback, StagingPool
from wgsentis.backends.gpu.report import RunReport
from wgsentis.backends.gpu.steps import Copy, Fallback, Plan, Transfer
from wgsentis.backends.gpu.tensors import GTensor, aligned
from wgsentis.backends.gpu.timestamps import QuerySets, Stamps, stamps_inside_passes
from wgsentis.ir import Layer


class TensorStorage(Protocol):
    """Where a backend keeps its tensors, as a readback copies them out (``GPUProgram``'s storage hooks)."""

    def readback_bytes(self, t: GTensor) -> int:
        """Staging bytes ``copy_out`` writes for ``t``."""
        raise NotImplementedError

    def copy_out(self, encoder: Any, t: GTensor, staging: Any, offset: int) -> None:
        """Record the copy of ``t`` into ``staging`` at ``offset``."""
        raise NotImplementedError

    def decode(self, t: GTensor, raw: np.ndarray) -> np.ndarray:
        """``t``'s value from the staging bytes ``copy_out`` wrote."""
        raise NotImplementedError

    def detach(self, encoder: Any, t: GTensor) -> Any:
        """Record the copy of ``t`` into device memory of its own; its DeviceValue, or None where it cannot."""
        raise NotImplementedError


def emit_layer(stream: Any, layers: list[Layer], layer_index: int, steps: list[Any], debug_groups: bool,
               stamps: Stamps | None = None) -> None:
    """Encode the steps of layer ``layer_index`` (of ``layers``) into ``stream``, inside its debug group (where
    ``debug_groups``) and between timestamps.

    A group never wraps a pass from the encoder: two such groups in one encoder crash RenderDoc's Vulkan layer in
    wgpu's encoder finish on lavapipe (a GPT-2 decode step's attention Gemm, a copy and dispatches, did). A layer
    that mixes copies and passes gets one group per run of each, all of its name (the capture report merges
    them): its copies' on the encoder with no pass inside, its dispatches' inside their pass, its draws' inside
    each pass they use (``RenderStream.begin_group``)."""
    layer = layers[layer_index]
    if stamps is not None:
        stamps.begin_layer(stream, layer_index)
    if not debug_groups:
        for step in steps:
            stream.step(step)
    else:
        label = f"{layer.name} ({layer.op_type})"
        start = 0
        while start < len(steps):
            copies = isinstance(steps[start], Copy)
            stop = start + 1
            while stop < len(steps) and isinstance(steps[stop], Copy) == copies:
                stop += 1
            if copies:
                encoder = stream.encoder_for_copies()
                encoder.push_debug_group(label)
                for step in steps[start:stop]:
                    stream.step(step)
                encoder.pop_debug_group()
            elif stream.groups_per_pass:
                stream.begin_group(label)
                for step in steps[start:stop]:
                    stream.step(step)
                stream.end_group()
            else:
                owner = stream.open_pass()
                owner.push_debug_group(label)
                for step in steps[start:stop]:
                    stream.step(step)
                owner.pop_debug_group()
            start = stop
    if stamps is not None:
        stamps.end_layer(stream, layer_index)


def emit_steps(stream: Any, steps: list[Any], layers: list[Layer], debug_groups: bool,
               run_fallback: Callable[[Fallback, Any], None], stamps: Stamps | None = None) -> None:
    """Encode a recorded plan's steps into ``stream``, running its fallback layers in between
    (``run_fallback(step, encoder)``, given the encoder so far to submit first)."""
    if stamps is None and not debug_groups:
        # The plain replay: no per-layer grouping to do, so none of its host cost.
        for step in steps:
            if isinstance(step, Fallback):
                run_fallback(step, stream.take())
            else:
                stream.step(step)
        return
    start = 0
    while start < len(steps):
        step = steps[start]
        if isinstance(step, Fallback):
            run_fallback(step, stream.take())
            start += 1
            continue
        stop = start + 1
        while stop < len(steps) and not isinstance(steps[stop], Fallback) and steps[stop].layer == step.layer:
            stop += 1
        emit_layer(stream, layers, step.layer, steps[start:stop], debug_groups, stamps)
        start = stop


def layer_groups(steps: list[Any]) -> list[tuple[int, list[Any]]]:
    """A plan's steps as runs of one layer's steps, in order: (layer index, its steps), or (-1, [a fallback])."""
    groups: list[tuple[int, list[Any]]] = []
    for step in steps:
        if not isinstance(step, Fallback) and groups and groups[-1][0] == step.layer:
            groups[-1][1].append(step)
        else:
            groups.append((-1 if isinstance(step, Fallback) else step.layer, [step]))
    return groups


def replay_layer_by_layer(ctx: GPUContext, steps: list[Any], layers: list[Layer], make_stream: Callable[[bool], Any],
                          run_fallback: Callable[[Fallback, Any], None]) -> dict[int, float]:
    """Submit a plan's ``steps`` one layer at a time (``make_stream(True)`` for each), each waited for, its fallbacks
    run in between: per layer index, the host seconds it took, once the plan's inputs are on the device."""
    ctx.wait_idle("the inputs' upload")
    times: dict[int, float] = {}
    for layer_index, group in layer_groups(steps):  # a layer's steps, or one fallback (-1)
        if layer_index < 0:
            run_fallback(group[0], ctx.device.create_command_encoder(label="layer by layer"))
            continue
        start = time.perf_counter()
        stream = make_stream(True)
        for step in group:
            stream.step(step)
        ctx.queue.submit([stream.take().finish()])
        ctx.wait_idle(f"layer {layers[layer_index].name}")
        times[layer_index] = times.get(layer_index, 0.0) + time.perf_counter() - start
    return times


def replay_stamps(ctx: GPUContext, queries: QuerySets, mode: bool | str, pass_per_layer: bool) -> Stamps | None:
    """The timestamps a replay takes in timestamp ``mode`` (``GPUProgram.set_timestamps``), or None: per layer,
    or the run's two ends ("whole"), inside the open pass where the adapter can write them there."""
    if not (mode and ctx.has_timestamps):
        return None
    inside = stamps_inside_passes(ctx) and not pass_per_layer
    if mode != "whole":
        return Stamps(queries, inside=inside)
    if inside:  # the run's two ends need stamps outside any layer's pass
        return Stamps(queries, inside=True, whole=True)
    return None


def store_layer_times(stamps: Stamps, report: RunReport) -> Callable[[np.ndarray], None]:
    """What the readback calls with the resolved timestamps' bytes: per-layer GPU times into ``report``."""
    def store(raw: np.ndarray) -> None:
        report.layer_gpu_ns = stamps.durations(raw.view(np.uint64).astype(np.int64))
        report.layer_spans = stamps.span_counts()

    return store


def submit_run(ctx: GPUContext, storage: TensorStorage, faults: FaultBuffer, report: RunReport, encoder: Any,
               outputs: dict[str, Any], extra: tuple[Any, int, Any] | None = None,
               plan: Plan | None = None, on_device: bool = False) -> PendingReadback:
    """Copy the outputs (and ``extra``, a (buffer, nbytes, callback) such as resolved timestamps) into
    one staging buffer, submit ``encoder``, and request its mapping: one map per run. A replay's staging buffer
    comes from its ``plan``'s pool (kept between runs); a recording's is its own. The downloads and host times go
    into ``report``. ``on_device``: each output computed on the device is copied into device memory of its own
    (``storage.detach``) and handed out as that DeviceValue; only what cannot be held so is read back."""
    layout, host_values, total = {}, {}, 0
    for name, value in outputs.items():
        if on_device and isinstance(value, GTensor) and value.host is None:
            held = storage.detach(encoder, value)
            if held is not None:
                held.name = name
                host_values[name] = held
                continue
        if isinstance(value, GTensor) and value.host is None:
            layout[name] = (total, functools.partial(storage.decode, value))
            total += storage.readback_bytes(value)
        else:
            host_values[name] = host_of(value)
    extra_slice = None
    if extra is not None:
        extra_slice = (total, extra[1], extra[2])
        total += aligned(extra[1])
    fault_at, checks = total, None
    if faults.run_checks:  # the run's index fault words: one more small copy, the same map
        total += aligned(faults.nbytes())
    staging, pool = None, None
    if total:
        what = f"the staging buffer for the outputs {list(layout)}"
        if plan is not None:
            if plan.staging is None or plan.staging.nbytes < total:
                plan.staging = StagingPool(ctx, total, "wgsentis outputs")
            pool = plan.staging
            staging = pool.acquire(what)
        else:
            usage = ctx.wgpu.BufferUsage
            staging = ctx.create_buffer(total, usage.MAP_READ | usage.COPY_DST, "wgsentis outputs", what)
        for name, (offset, _decode) in layout.items():
            t = outputs[name]
            storage.copy_out(encoder, t, staging, offset)
            report.transfers.append(Transfer("download", name, t.nbytes, "output"))
        if extra is not None:
            encoder.copy_buffer_to_buffer(extra[0], 0, staging, extra_slice[0], extra[1])
        checks = faults.copy_into(encoder, staging, fault_at)
    faults.run_checks = []  # this run's are read back; a later submit_run without a start checks none
    submitted = time.perf_counter()
    ctx.queue.submit([encoder.finish()])
    mapping = time.perf_counter()
    report.submit = mapping - submitted
    readback = PendingReadback(ctx, staging, layout, host_values, extra_slice, checks, pool, report.phases)
    report.phases["map_request"] = time.perf_counter() - mapping
    return readback
