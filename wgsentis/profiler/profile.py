"""``profile()``: measure a model on a backend and build a ``Profile`` (what the JSON holds).

A profile joins five things: the theoretical profile (FLOPs, params, bytes per layer, always
present, with the totals of the model as imported beside the executed layers'), the timed runs
(``collect``), the device's measured ceilings (``ceilings``), which say whether each layer is
compute- or memory-bound, the pruned views (``add_pruned_estimates``: each layer's, op type's and
the model's estimated time at each pruning level), and the pruning sensitivity of the slowest
weighted layers (``pruning``).
"""

from __future__ import annotations

import copy
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from wgsentis.errors import InputError
from wgsentis.model import Model, TensorInfo
from wgsentis.profiler import ceilings as ceilings_mod
from wgsentis.profiler import collect, pruning
from wgsentis.profiler.flops import (
    LayerCost,
    flops_profile,
    model_totals,
    layer_costs,
    prunable_weight,
    tensor_facts,
)
from wgsentis.profiler.summary import op_type_summary
from wgsentis.worker import BackendType, Worker, backend_of

FORMAT = "wgsentis-profile/1"
# The pruning levels (fractions of a prunable layer's weights set to zero) of the pruned views, as Sparsify's.
PRUNING_LEVELS = (0.4, 0.6, 0.8, 0.9, 0.95)
PRUNED_RULE = ("estimate, not measured: a compute-bound layer with a prunable weight (Conv, ConvTranspose, Gemm, "
               "MatMul with a constant weight) takes time_ms * (1 - level), the FLOPs pruning removes skipped "
               "perfectly; every other layer (memory-bound, no prunable weight, or no measured ceilings to say "
               "which) keeps its time; ms_per_batch scales by the share of the rows' time saved")


class Profile:
    """A model's profile on one backend; ``data`` is the JSON document (see ``docs/profiler.md``)."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __repr__(self) -> str:
        ms = self.data.get("ms_per_batch")
        timing = f"{ms:.3f} ms/batch" if ms is not None else "no timing"
        return f"Profile({self.data['name']!r}, {self.data['backend']}, {timing}, {len(self.data['layers'])} layers)"

    @property
    def layers(self) -> list[dict[str, Any]]:
        return self.data["layers"]

    @property
    def ms_per_batch(self) -> float | None:
        return self.data.get("ms_per_batch")

    def to_dict(self) -> dict[str, Any]:
        """The profile as plain JSON-able data."""
        return self.data

    def to_json(self, path: str | os.PathLike) -> Path:
        """Write the profile as JSON; returns the path."""
        path = Path(path)
        path.write_text(json.dumps(self.data, indent=1))
        return path

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> Profile:
        """Read a profile written by ``to_json``."""
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise InputError(f"profile '{path}' cannot be read as JSON: {exc}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise InputError(f"profile '{path}' is not a wgsentis profile (format {FORMAT})")
        return cls(data)

    def to_chrome_trace(self, path: str | os.PathLike) -> Path:
        """Write a Chrome trace (Perfetto, chrome://tracing); returns the path."""
        from wgsentis.profiler.export import chrome_trace

        path = Path(path)
        path.write_text(json.dumps(chrome_trace(self.data)))
        return path

    def to_html(self, path: str | os.PathLike) -> Path:
        """Write a self-contained HTML report; returns the path."""
        from wgsentis.profiler.html import render_html

        path = Path(path)
        path.write_text(render_html(self.data))
        return path

    def table(self, top: int = 15) -> str:
        """A terminal table: the summary, the top layers by time, op types and transfers."""
        from wgsentis.profiler.summary import render_table

        return render_table(self.data, top=top)


# -- preparing the model and its inputs ------------------------------------------------------------------
def model_of(source: Any, name: str | None) -> Model:
    import wgsentis as ws

    if isinstance(source, Model):
        return source
    return ws.load_model(source, name=name)


def _with_batch(model: Model, batch_size: int) -> tuple[Model, dict[str, int]]:
    """The model with each input's batch dimension (symbolic, or 1) set up for ``batch_size``;
    returns it and the symbolic dims to fill (name -> batch_size)."""
    dims: dict[str, int] = {}
    new_inputs: list[TensorInfo] = []
    changed = False
    for info in model.inputs:
        shape = info.shape
        if info.kind != "tensor" or not shape:
            new_inputs.append(info)
            continue
        first = shape[0]
        if isinstance(first, str):
            dims[first] = batch_size
        elif first is None or (first == 1 and batch_size != 1):
            symbol = "batch"
            new_inputs.append(TensorInfo(info.name, info.dtype, (symbol, *shape[1:]), info.kind))
            dims[symbol] = batch_size
            changed = True
            continue
        elif isinstance(first, int) and first != batch_size:
            raise InputError(f"profile(batch_size={batch_size}): input '{info.name}' of model '{model.name}' has a "
                             f"fixed batch dimension of {first}; use batch_size={first}")
        new_inputs.append(info)
    if not changed:
        return model, dims
    clone = copy.copy(model)
    clone.graph = copy.copy(model.graph)
    clone.graph.inputs = new_inputs
    return clone, dims


def _check_levels(levels: Any) -> tuple[float, ...]:
    items = list(levels) if isinstance(levels, list | tuple | np.ndarray) else None
    if items is None or any(isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating)
                            or not 0.0 <= v < 1.0 for v in items):
        raise InputError(f"profile(pruning_levels={levels!r}): pruning levels must be a tuple of numbers in [0, 1)")
    return tuple(sorted({float(v) for v in items}))


def _check_args(backend: Any, batch_size: Any, threads: Any, runs: Any, warmup: Any,
                pruning_layers: Any) -> BackendType:
    kind = backend_of(backend)
    for arg, value, low in (("batch_size", batch_size, 1), ("runs", runs, 1), ("warmup", warmup, 0),
                            ("pruning_layers", pruning_layers, 0)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
            raise InputError(f"profile({arg}={value!r}): {arg} must be an integer >= {low}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise InputError(f"profile(threads={threads!r}): threads must be a positive integer or None")
    return kind


# -- the profile ----------------------------------------------------------------------------------------
def profile(model_or_path: Any, backend: BackendType | str = "gpu-compute", batch_size: int = 1,
            threads: int | None = None, runs: int = 10, warmup: int = 2, inputs: dict[str, Any] | None = None,
            name: str | None = None, *, timing: bool = True, pruning_layers: int = 5,
            progress: collect.Progress | None = None, measure_ceilings: bool = True,
            use_timestamps: bool = True, spin_wait: bool = True,
            pruning_levels: tuple[float, ...] = PRUNING_LEVELS) -> Profile:
    """Profile a model (a Model, path, bytes or ModelProto) on ``backend``; returns a ``Profile``.

    ``runs`` plain runs give ``ms_per_batch`` (median); as many instrumented runs give the layer
    times. ``timing=False`` skips both (only the FLOPs profile). ``pruning_layers`` is how many of
    the slowest weighted layers get a pruning-sensitivity estimate (0: none). ``progress(phase,
    done, total)`` is called as runs complete. ``use_timestamps=False`` forces host timers on GPUs.
    ``spin_wait`` (cpu): the Worker setting of that name, so the profile times the mode that will run.
    ``pruning_levels``: the levels of the pruned views (estimated time per layer, op type and batch;
    ``add_pruned_estimates``); () for none.
    """
    kind = _check_args(backend, batch_size, threads, runs, warmup, pruning_layers)
    levels = _check_levels(pruning_levels)
    model = model_of(model_or_path, name)
    model, dims = _with_batch(model, int(batch_size))
    if inputs is None:
        from wgsentis.shapes import sample_inputs

        feeds = sample_inputs(model, dims)
    else:
        feeds = dict(inputs)
    worker = Worker(model, kind, threads=threads, spin_wait=spin_wait)  # validates backend, threads, spin_wait
    try:
        feeds = worker.validate(feeds)
        for info in model.inputs:
            value = feeds.get(info.name)
            if info.shape and isinstance(value, np.ndarray) and value.ndim and isinstance(info.shape[0], str) \
                    and info.shape[0] in dims and value.shape[0] != batch_size:
                raise InputError(f"profile(batch_size={batch_size}): input '{info.name}' has batch "
                                 f"{value.shape[0]}; give inputs with batch {batch_size} or change batch_size")
        used_threads = worker.threads
        _tick_phase(progress, "shapes")
        shapes, sizes = tensor_facts(model, feeds, used_threads)
        costs = layer_costs(model, shapes, sizes)
        before = model_totals(model, feeds, used_threads)
        data: dict[str, Any] = {
            "format": FORMAT, "model": model.source or model.name, "name": name or model.name,
            "backend": kind.value, "batch_size": int(batch_size), "threads": used_threads,
            "spin_wait": spin_wait if kind is BackendType.CPU else None,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "inputs": {n: list(np.asarray(v).shape) for n, v in feeds.items() if not isinstance(v, list)},
            "flops_profile": flops_profile(costs, model.constants, before),
        }
        if not timing:
            data.update(device=collect.cpu_info(used_threads) if kind is BackendType.CPU else
                        {**worker.program.ctx.info.as_dict(), "host": collect.cpu_info(used_threads)},
                        runs=0, timer=None, ms_per_batch=None, ms_min=None, ms_max=None, items_per_second=None,
                        layers=[_layer_entry(c, None, "cpu" if kind is BackendType.CPU else "gpu", False, None)
                                for c in costs], transfers=[], host=[], op_types=op_type_summary([], costs),
                        ceilings=None)
            add_pruned_estimates(data, levels)
            return Profile(data)
        if kind is BackendType.CPU:
            measured = collect.time_cpu(model, feeds, used_threads, runs, warmup, progress, spin_wait=spin_wait)
        else:
            measured = collect.time_gpu(worker, feeds, runs, warmup, progress, use_timestamps=use_timestamps)
    finally:
        worker.close()
    ceil = None
    if measure_ceilings:
        _tick_phase(progress, "ceilings")
        ceil = ceilings_mod.ceilings(kind.value, measured.device, used_threads, spin_wait=spin_wait)
    data.update(_timed_sections(measured, costs, ceil, runs, warmup, int(batch_size)))
    add_pruned_estimates(data, levels)
    if pruning_layers:
        _tick_phase(progress, "pruning")
        _add_pruning(data, model, feeds, costs, pruning_layers, used_threads)
    return Profile(data)


def _tick_phase(progress: collect.Progress | None, phase: str) -> None:
    if progress is not None:
        progress(phase, 0, 0)


def _layer_entry(cost: LayerCost, seconds: float | None, device: str, fallback: bool,
                 ceil: dict[str, Any] | None) -> dict[str, Any]:
    ms = None if seconds is None else seconds * 1e3
    entry: dict[str, Any] = {
        "index": cost.index, "name": cost.name, "op_type": cost.op_type, "fused_activation": cost.fused,
        "weight_names": cost.weight_names, "prunable_weight": cost.prunable_weight, "device": device,
        "fallback": fallback,
        "time_ms": None if ms is None else round(ms, 5),
        "flops": cost.flops, "bytes": cost.bytes, "params": cost.params,
        "gflops_per_s": round(cost.flops / seconds / 1e9, 4) if seconds else None,
        "gb_per_s": round(cost.bytes / seconds / 1e9, 4) if seconds else None,
        "arithmetic_intensity": round(cost.flops / cost.bytes, 4) if cost.bytes else None,
        "bound": None, "percent": None,
    }
    if ceil is not None:
        ridge = ceil["peak_gflops_per_s"] / max(ceil["peak_gb_per_s"], 1e-9)  # FLOPs per byte
        ai = cost.flops / cost.bytes if cost.bytes else 0.0
        entry["bound"] = "compute" if ai >= ridge else "memory"
        attainable = min(ceil["peak_gflops_per_s"], ai * ceil["peak_gb_per_s"]) if cost.flops else None
        entry["attainable_gflops_per_s"] = round(attainable, 4) if attainable else None
        if seconds and attainable:
            entry["roofline_efficiency"] = round(cost.flops / seconds / 1e9 / attainable, 4)
    return entry


def _timed_sections(m: collect.Timing, costs: list[LayerCost], ceil: dict[str, Any] | None, runs: int,
                    warmup: int, batch: int) -> dict[str, Any]:
    med = collect.median
    mean = collect.mean_of
    typical = collect.typical_runs(m.walls)

    def row_time(values: list[float]) -> float:
        """A row's time: its mean over the typical runs where it has a value per run (layers, host rows), else its
        interquartile mean; either way the rows add up to a typical run, as ms_per_batch is."""
        if typical and len(values) == len(m.walls):
            return float(statistics.fmean(values[i] for i in typical))
        return collect.row_mean(values)

    layers = []
    for c in costs:
        if c.index not in m.layers:
            continue  # planned on the host once (shape arithmetic): not executed per run
        layers.append(_layer_entry(c, row_time(m.layers[c.index]), m.layer_device.get(c.index, "cpu"),
                                   c.index in m.fallback, ceil))
    host = [{"name": label, "time_ms": round(row_time(v) * 1e3, 5)} for label, v in m.host_rows.items()]
    transfers = [{"kind": t["kind"], "tensor": t["name"], "layer": t["layer"], "bytes": t["bytes"],
                  "time_ms": round(t["seconds"] * 1e3, 5), "timing": t["timing"]} for t in m.transfers]
    total = sum(e["time_ms"] for e in layers) + sum(r["time_ms"] for r in host) + sum(t["time_ms"] for t in transfers)
    for r in host:
        if r["name"] == collect.RESIDUAL_ROW:  # the rest of the median plain run, never negative
            r["time_ms"] = round(max(0.0, med(m.plain) * 1e3 - total), 5)
            total += r["time_ms"]
    for row in [*layers, *host, *transfers]:
        row["percent"] = round(100.0 * row["time_ms"] / total, 3) if total else 0.0
    if ceil is not None:  # a layer faster than the matmul ceiling: the roofline's peak is a floor, say so
        ceil = {**ceil, "layers_above_peak": [e["name"] for e in layers
                                              if (e["gflops_per_s"] or 0) > ceil["peak_gflops_per_s"]]}
    ms = med(m.plain) * 1e3
    planned = [c.name for c in costs if c.index not in m.layers]
    return {
        "device": m.device, "timer": m.timer, "runs": runs, "warmup": warmup,
        "ms_per_batch": round(ms, 4), "ms_min": round(min(m.plain) * 1e3, 4), "ms_max": round(max(m.plain) * 1e3, 4),
        "items_per_second": round(batch * 1e3 / ms, 3) if ms else None,
        "ms_per_batch_instrumented": round(mean(m.walls) * 1e3, 4), "ms_mean": round(mean(m.plain) * 1e3, 4),
        "time_sum_ms": round(total, 4), "time_sum_ratio": round(total / ms, 4) if ms else None,
        "timestamp_cost_us": round(m.timestamp_cost_us, 3),
        "timestamp_overhead_ms": round(mean(m.stamp_overhead) * 1e3, 4) if m.stamp_overhead else 0.0,
        "timestamp_excess_ms": round(mean(m.stamp_excess) * 1e3, 4) if m.stamp_excess else 0.0,
        "ceilings": ceil, "layers": layers, "transfers": transfers, "host": host,
        "host_planned_layers": planned, "fallback_layers": [e["name"] for e in layers if e["fallback"]],
        "weight_upload_bytes": m.weight_upload_bytes,
        # A GPU run's fixed costs (medians of the plain runs): upload, encode, submit, map request, map wait and
        # copy out on the host (Worker.stats()["run"]); empty on the CPU.
        "run_phases_ms": {phase: round(med(v), 4) for phase, v in m.run_phases.items()},
        "op_types": op_type_summary(layers, costs),
    }


def level_key(level: float) -> str:
    """The JSON key of a pruning level in ``estimated_ms``: '0.4', '0.95', '0'."""
    return f"{level:g}"


def estimated_layer_ms(entry: dict[str, Any], level: float) -> float | None:
    """A layer's estimated time at ``level`` (``PRUNED_RULE``): compute-bound layers with a prunable weight
    shrink with the FLOPs pruning removes; the others keep their time (None where not timed)."""
    ms = entry.get("time_ms")
    if ms is None:
        return None
    # A memory-bound layer's time goes to moving activations, which pruning the weight does not reduce;
    # a compute-bound one without a prunable weight (Softmax, a MatMul of two activations) has nothing to prune.
    if entry.get("bound") == "compute" and entry.get("prunable_weight"):
        return round(ms * (1.0 - level), 5)
    return ms


def add_pruned_estimates(data: dict[str, Any], levels: tuple[float, ...] = PRUNING_LEVELS) -> dict[str, Any]:
    """The pruned views of a profile (Sparsify's pruned performance profile), in place: ``pruning_levels``,
    each layer's and op type's ``estimated_ms`` (level key -> ms) and ``pruned_estimates`` (per level: the
    estimated ms per batch and the speedup over the measured one). Returns ``data``."""
    levels = tuple(levels)
    layers = data.get("layers") or []
    data["pruning_levels"] = list(levels)
    data["pruned_estimate_rule"] = PRUNED_RULE
    for e in layers:
        e["estimated_ms"] = {level_key(v): estimated_layer_ms(e, v) for v in levels}
    by_op: dict[str, dict[str, float | None]] = {}
    for e in layers:
        row = by_op.setdefault(e["op_type"], {level_key(v): 0.0 for v in levels})
        for k, ms in e["estimated_ms"].items():
            row[k] = None if ms is None or row[k] is None else row[k] + ms
    for r in data.get("op_types") or []:
        est = by_op.get(r["op_type"], {})
        r["estimated_ms"] = {level_key(v): None if est.get(level_key(v)) is None or r.get("time_ms") is None
                             else round(est[level_key(v)], 5) for v in levels}
    ms = data.get("ms_per_batch")
    rows = data.get("time_sum_ms") or sum(e["time_ms"] or 0.0 for e in layers)
    estimates = []
    for v in levels:
        if ms is None:
            estimates.append({"level": v, "ms_per_batch": None, "speedup": None, "saved_ms": None})
            continue
        saved = sum((e["time_ms"] or 0.0) - (e["estimated_ms"][level_key(v)] or 0.0) for e in layers)
        # The rows (layers, host, transfers) make up a typical run but need not add up to the median plain
        # run exactly: the saved share of the rows is taken off ms_per_batch, never more than all of it.
        share = min(1.0, saved / rows) if rows else 0.0
        est = ms * (1.0 - share)
        estimates.append({"level": v, "ms_per_batch": round(est, 4), "saved_ms": round(ms * share, 4),
                          "speedup": round(ms / est, 4) if est > 0 else None})
    data["pruned_estimates"] = estimates
    return data


def _add_pruning(data: dict[str, Any], model: Model, feeds: dict[str, Any], costs: list[LayerCost],
                 top: int, threads: int) -> None:
    layers = data.get("layers") or []
    weighted = [e for e in layers if prunable_weight(model.layers[e["index"]], model.constants) is not None]
    weighted.sort(key=lambda e: -(e["time_ms"] or 0.0) if e["time_ms"] is not None else -e["flops"])
    chosen = weighted[:top]
    found = pruning.sensitivity(model, feeds, [e["index"] for e in chosen], threads)
    for e in chosen:
        if e["index"] in found:
            e["pruning"] = pruning.add_speedups(found[e["index"]], e["time_ms"] or 0.0, e["bound"] or "memory")
    data["pruning"] = {"layers_considered": top, "sparsities": list(pruning.SPARSITIES),
                       "measured_on": "cpu", "method": "magnitude pruning of the layer's weight tensor; "
                       "relative L2 change of the model outputs", "speedup": "estimate: time_ms * sparsity for "
                       "compute-bound layers, 0 for memory-bound ones"}
