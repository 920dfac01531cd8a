"""Timing collection: runs a model repeatedly and splits each run's wall time into rows.

Every backend gives two kinds of runs, alternating: *plain* runs (no instrumentation) whose median is
``ms_per_batch``, and *instrumented* runs whose per-layer times, averaged, are the layer rows (interquartile means, so
the rows add up to a typical run and one disturbed run does not lift them all).

- cpu: layers run one after another (``GraphProgram(branch_parallel=False)``; kernels still use
  ``threads``); a host timer between consecutive layer callbacks gives each layer's time.
- gpu-compute: with timestamp queries, each instrumented run writes a timestamp between layers
  (``GPUProgram.set_timestamps``); a third run per iteration stamps only the run's ends, and the
  excess per interior stamp (the stamps' own GPU cost: ~60 us each on lavapipe) is taken out of every
  layer interval and reported (``timestamp_cost_us``, ``timestamp_overhead_ms``); what a run's stamps cost
  beyond that (``timestamp_excess_ms``: its whole excess) comes out of its layers in proportion. Without timestamp
  queries, each layer is submitted on its own and fenced with a tiny mapped read, timed on the host
  (the profile's ``timer`` says which).
  Host rows come from the plain run beside each instrumented one: input uploads, command encoding,
  CPU-fallback kernels and their downloads (less the GPU time of the layers that ran during the
  wait), and ``submit + readback wait``, the rest of the plain run's wall (submission, the output copy
  and waiting for its mapping) once layers and transfers are accounted for; it is never negative,
  so layers measured longer than the plain run show as a time sum above ``ms_per_batch``.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from wgsentis.backends.cpu import GraphProgram
from wgsentis.model import Model

Progress = Callable[[str, int, int], None]  # (phase, done, total)
# The host row that is the rest of ms_per_batch once the other rows are accounted for (gpu-compute).
RESIDUAL_ROW = "host: submit + readback wait"
CPU_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
             "avx512_bf16", "amx_tile", "neon", "asimd", "sve")


def cpu_info(threads: int) -> dict[str, Any]:
    """The host CPU: model name, logical cores, the threads used and its notable instruction sets."""
    name, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and name in ("", platform.machine(), platform.processor()):
                    name = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    blas = ""
    try:
        from threadpoolctl import threadpool_info

        blas = ", ".join(sorted({f"{i.get('internal_api')} {i.get('version')}" for i in threadpool_info()
                                 if i.get("user_api") == "blas"}))
    except Exception:
        pass
    return {"cpu": name, "machine": platform.machine(), "logical_cores": os.cpu_count() or 1, "threads": threads,
            "instruction_sets": [f for f in CPU_FLAGS if f in flags], "blas": blas,
            "numpy": np.__version__}


@dataclass
class Timing:
    """What the timed runs measured (seconds)."""

    plain: list[float] = field(default_factory=list)  # wall of each plain run
    walls: list[float] = field(default_factory=list)  # wall of each instrumented run
    layers: dict[int, list[float]] = field(default_factory=dict)  # layer index -> seconds per run
    layer_device: dict[int, str] = field(default_factory=dict)  # "gpu" | "cpu"
    fallback: set[int] = field(default_factory=set)
    transfers: list[dict[str, Any]] = field(default_factory=list)  # one per transfer, interquartile-mean seconds
    host_rows: dict[str, list[float]] = field(default_factory=dict)  # label -> seconds per run
    timer: str = "host"
    timestamp_cost_us: float = 0.0  # GPU time one timestamp write adds (taken out of layer times)
    stamp_overhead: list[float] = field(default_factory=list)  # per instrumented run: what was taken out
    stamp_excess: list[float] = field(default_factory=list)  # per instrumented run: its time over the ends-only run
    device: dict[str, Any] = field(default_factory=dict)
    plan: dict[str, list[str]] = field(default_factory=dict)
    weight_upload_bytes: int = 0
    run_phases: dict[str, list[float]] = field(default_factory=dict)  # GPU: each plain run's fixed costs, ms


def median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def mean_of(values: list[float]) -> float:
    return float(statistics.fmean(values)) if values else 0.0


def row_mean(values: list[float]) -> float:
    """What a row reports: the interquartile mean of its per-run values (the mean once the fastest and
    slowest quarter are left out; the median under four runs, which for three leaves out the extremes
    too). A plain mean lets one run slowed by the machine (a neighbour, a page fault: 7 ms beside 1.3 ms
    runs on lavapipe, 480 ms beside 300 ms for VGG-19 on the cpu) lift every row above the median
    ``ms_per_batch``; rows trimmed alike still add up to a typical run."""
    if len(values) < 4:
        return median(values)
    ordered = sorted(values)
    cut = len(ordered) // 4
    return float(statistics.fmean(ordered[cut:len(ordered) - cut]))


# The most of a run's shortest layer interval a timestamp's estimated cost may take (``_stamp_cost``).
STAMP_COST_CAP = 0.9


def typical_runs(walls: list[float]) -> list[int]:
    """The instrumented runs a row averages over: those whose wall is in the interquartile band (the fastest and
    slowest quarter left out; the middle one or two under four runs), as ``row_mean`` trims. Trimming each row on
    its own keeps every layer's typical time, but on a busy machine each run is disturbed in some layers, so the
    rows trimmed apart add up to less than any run took (0.4-0.7 of ms_per_batch, seen with four other processes
    on two cores); rows taken from the same typical runs add up to a typical run."""
    order = sorted(range(len(walls)), key=walls.__getitem__)
    if len(order) < 4:
        middle = (len(order) - 1) // 2
        return sorted(order[middle:len(order) - middle])
    cut = len(order) // 4
    return sorted(order[cut:len(order) - cut])


def _stamp_cost(per_run: list[float], shortest: list[float]) -> float:
    """The GPU cost of one timestamp write: the median of the per-run estimates, but never more than
    ``STAMP_COST_CAP`` of the shortest layer interval (per stamp) seen in any run, and never negative.

    Each estimate is the difference of two whole runs divided by the interior stamps, so a run's noise
    is divided by the stamp count. On a small model (PP-OCR cls: 75 stamps, 52-63 us apart on
    lavapipe) that resolves the cost well. On a model of few long layers (AlexNet: 13 stamps in 67 ms
    runs) the estimates scatter from -2 ms to +0.7 ms; a median of five once read 0.7 ms, and taking
    13 x 0.7 ms out of the layers left them explaining 80% of the run. The bound catches that: the
    classifiers' final Softmax takes 80-150 us stamp included, ~52 us of it the stamp. The bound is a
    share of the shortest interval, not all of it, because every interval holds some work besides its
    stamp: capped at the whole interval, the shortest layer of a run read 0 ms (the sample's smallest
    layer on gpu-pixel, on a CI machine busy enough to push the estimate past the cap)."""
    if not per_run:
        return 0.0
    cost = float(statistics.median(per_run))
    if shortest:
        cost = min(cost, STAMP_COST_CAP * min(shortest))
    return max(0.0, cost)


def _tick(progress: Progress | None, phase: str, done: int, total: int) -> None:
    if progress is not None:
        progress(phase, done, total)


# -- cpu ---------------------------------------------------------------------------------------------
def time_cpu(model: Model, feeds: dict[str, Any], threads: int, runs: int, warmup: int,
             progress: Progress | None = None, spin_wait: bool = True) -> Timing:
    """Plain and instrumented runs on the CPU backend, layers one after another."""
    program = GraphProgram(model.graph, threads, branch_parallel=False, spin_wait=spin_wait)
    program.bind_blas()
    index = {id(layer): i for i, layer in enumerate(model.graph.layers)}
    timing = Timing(timer="host", device=cpu_info(threads))
    timing.layer_device = {i: "cpu" for i in index.values()}
    try:
        for k in range(warmup):
            program.run(feeds)
            _tick(progress, "warmup", k + 1, warmup)
        for k in range(runs):  # plain and instrumented runs alternate: both see the same machine state
            start = time.perf_counter()
            program.run(feeds)
            timing.plain.append(time.perf_counter() - start)
            seen: dict[int, float] = {}
            last = [0.0]

            def on_layer(layer: Any, _values: list[Any], seen: dict[int, float] = seen,
                         last: list[float] = last) -> None:
                now = time.perf_counter()
                i = index[id(layer)]
                seen[i] = seen.get(i, 0.0) + now - last[0]
                last[0] = now

            start = time.perf_counter()
            last[0] = start
            program.run(feeds, on_layer=on_layer)
            wall = time.perf_counter() - start
            timing.walls.append(wall)
            for i, s in seen.items():
                timing.layers.setdefault(i, []).append(s)
            timing.host_rows.setdefault("host: feeds and outputs", []).append(max(0.0, wall - sum(seen.values())))
            _tick(progress, "runs", k + 1, runs)
    finally:
        program.close()
    return timing


# -- gpu-compute ---------------------------------------------------------------------------------------
def time_gpu(worker: Any, feeds: dict[str, Any], runs: int, warmup: int, progress: Progress | None = None,
             use_timestamps: bool = True) -> Timing:
    """Plain and instrumented runs on a GPU backend, through the program's public hooks (``worker.program``:
    ``set_timestamps``, ``last_run``, ``plan_summary``, ``run_layer_by_layer``)."""
    from wgsentis.backends.gpu.timestamps import stamps_inside_passes

    program = worker.program
    ctx = program.ctx
    program.execute(feeds).wait()  # records the plan (and uploads the weights once)
    plan = program.plan_summary()
    timestamps = bool(use_timestamps and ctx.has_timestamps)
    timing = Timing(timer="gpu-timestamps" if timestamps else "host (one fenced submission per layer)")
    timing.device = {**ctx.info.as_dict(), "timestamp_query": ctx.has_timestamps, "host": cpu_info(worker.threads)}
    timing.plan = {"gpu_layers": plan["gpu_layers"], "cpu_layers": plan["cpu_layers"],
                   "fallback_layers": plan["fallback_layers"]}
    timing.weight_upload_bytes = int(program.stats()["weight_bytes"])
    by_name = {layer.name: i for i, layer in enumerate(program.graph.layers)}
    for name in plan["gpu_layers"]:
        timing.layer_device[by_name[name]] = "gpu"
    for name in plan["fallback_layers"]:
        timing.layer_device[by_name[name]] = "cpu"
        timing.fallback.add(by_name[name])
    for k in range(warmup):
        program.execute(feeds).wait()
        _tick(progress, "warmup", k + 1, warmup)
    # Timestamps between layers cost GPU time of their own (~60 us each on lavapipe, which drains its
    # queue at every write; well under a microsecond on real GPUs). Where they can be written anywhere,
    # a third run per iteration stamps only the start and end of the run, and the per-layer run's excess
    # over it, per interior stamp, is taken out of every layer interval (``_stamp_cost``).
    calibrate = timestamps and stamps_inside_passes(ctx)
    if timestamps:
        # One discarded instrumented run: the first timestamped replay pays one-time costs (query sets,
        # the driver's first timestamp writes: ~13 ms on lavapipe) that are no part of any layer.
        program.set_timestamps(True)
        program.execute(feeds).wait()
        program.set_timestamps(False)
    # Which GPU layers run during each fallback's download wait (they were submitted with it).
    pending_before: dict[int, list[int]] = {}
    pending: list[int] = []
    for kind, layer_index in plan["segments"]:
        if kind == "gpu":
            if layer_index not in pending:
                pending.append(layer_index)
        else:
            pending_before[layer_index] = pending
            pending = []
    measured: list[dict[str, Any]] = []
    try:
        for k in range(runs):  # plain and instrumented runs alternate: both see the same machine state
            program.set_timestamps(False)
            start = time.perf_counter()
            program.execute(feeds).wait()
            run = {"plain_wall": time.perf_counter() - start, "plain_encode": program.last_run.encode,
                   "stamp_cost": None}
            for phase, ms in program.stats()["run"].items():
                if isinstance(ms, float):
                    timing.run_phases.setdefault(phase, []).append(ms)
            timing.plain.append(run["plain_wall"])
            if calibrate:
                program.set_timestamps("whole")
                program.execute(feeds).wait()
                whole = program.last_run.layer_gpu_ns.get(-1)
            program.set_timestamps(timestamps)
            start = time.perf_counter()
            if timestamps:
                program.execute(feeds).wait()
                run["layer_s"] = {i: ns / 1e9 for i, ns in program.last_run.layer_gpu_ns.items()}
                run["spans"] = dict(program.last_run.layer_spans)
                interior = sum(run["spans"].values()) - 1
                if calibrate and whole is not None and interior > 0:
                    run["whole_s"] = whole / 1e9
                    run["stamp_cost"] = max(0.0, (sum(run["layer_s"].values()) - run["whole_s"]) / interior)
            else:
                run["layer_s"], readback = program.run_layer_by_layer(feeds)
                readback.wait()
            run["wall"] = time.perf_counter() - start
            run["kernel_s"] = dict(program.last_run.host_kernel_s)
            run["transfers"] = list(program.last_run.transfers)
            measured.append(run)
            _tick(progress, "runs", k + 1, runs)
    finally:
        program.set_timestamps(False)
    calibrated = [run for run in measured if run["stamp_cost"] is not None]
    stamp_s = _stamp_cost([run["stamp_cost"] for run in calibrated],
                          [min(s / run["spans"].get(i, 1) for i, s in run["layer_s"].items())
                           for run in calibrated if run["layer_s"]])
    timing.timestamp_cost_us = stamp_s * 1e6
    per_transfer: dict[tuple[int, str, str, str], list[float]] = {}
    transfer_bytes: dict[tuple[int, str, str, str], int] = {}
    for run in measured:
        timing.walls.append(run["wall"])
        layer_s = run["layer_s"]
        if stamp_s:
            raw = sum(layer_s.values())
            layer_s = {i: max(0.0, s - stamp_s * run["spans"].get(i, 1)) for i, s in layer_s.items()}
            whole_s = run.get("whole_s")
            left = sum(layer_s.values())
            if whole_s and left > whole_s:
                # The stamps cost this run more than the capped per-stamp cost took out (on a loaded machine
                # a stamp's cost grows with the work it interrupts, so the surplus sits in the long layers
                # and no uniform cost can remove it without emptying the short ones): the rest of the run's
                # own measured excess comes out in proportion to each layer's time, so the rows add up to
                # the run stamped only at its ends.
                layer_s = {i: s * whole_s / left for i, s in layer_s.items()}
            timing.stamp_overhead.append(raw - sum(layer_s.values()))
            timing.stamp_excess.append(max(0.0, raw - whole_s) if whole_s else 0.0)
        for i, s in layer_s.items():
            timing.layers.setdefault(i, []).append(s)
        fallback_total = 0.0
        for i, s in run["kernel_s"].items():
            if i in timing.fallback:
                timing.layers.setdefault(i, []).append(s)
                fallback_total += s
        inside_encode = fallback_total
        seen: dict[tuple[str, str, str], int] = {}
        for t in run["transfers"]:
            seconds = t.seconds
            if t.kind == "download" and t.layer in by_name and by_name[t.layer] in pending_before:
                inside_encode += seconds
                gpu_wait = sum(layer_s.get(j, 0.0) for j in pending_before[by_name[t.layer]])
                n_same = sum(1 for u in run["transfers"] if u.kind == "download" and u.layer == t.layer)
                seconds = max(0.0, seconds - gpu_wait / max(1, n_same))
            elif t.kind == "upload" and t.layer:
                inside_encode += seconds
            base = (t.kind, t.name, t.layer)
            occurrence = seen.get(base, 0)
            seen[base] = occurrence + 1
            key = (occurrence, *base)
            per_transfer.setdefault(key, []).append(seconds)
            transfer_bytes[key] = t.nbytes
        # Host rows come from the plain run beside this one: its encoding time here, and the rest of the
        # plain runs' median wall once every other row is accounted for (submission and the readback
        # wait: ``RESIDUAL_ROW``, filled in by the profile). Taking that rest per run and clipping it at
        # zero would bias it upwards: the layer times come from a different run than the plain wall, and
        # on a noisy machine the clip keeps every positive difference and drops every negative one.
        encode = max(0.0, run["plain_encode"] - inside_encode) if timestamps else 0.0
        timing.host_rows.setdefault("host: encode commands", []).append(encode)
    timing.host_rows[RESIDUAL_ROW] = []  # no per-run values: filled in from the other rows
    for key, values in per_transfer.items():
        _occ, kind, name, layer = key
        timing.transfers.append({"kind": kind, "name": name, "layer": layer or ("input" if kind == "upload" else ""),
                                 "bytes": transfer_bytes[key], "seconds": row_mean(values),
                                 "timing": ("in 'host: submit + readback wait'" if layer == "output" else
                                            "host time of write_buffer" if kind == "upload" else
                                            "host wait, less the GPU time of layers finishing in it")})
    return timing
