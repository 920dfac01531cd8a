"""What a GPU program reports: the cost of each run (RunReport) and ``stats()`` (where layers ran, transfers,
device memory, cached plans, the last run's fixed costs)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wgsentis.backends.gpu.steps import Transfer


@dataclass
class RunReport:
    """What one run cost, as ``stats()`` and the profiler read it. Seconds on the host: the inputs' uploads (in
    ``transfers``), ``encode`` (recording or encoding the plan's commands, fallback layers included),
    ``submit`` (the final queue submission), and in ``phases``: "map_request" (asking for the outputs' map),
    "wait" (for the map), "copy_out" (mapped bytes into arrays; both filled when the outputs are read).
    ``layer_gpu_ns``: per layer index (-1: the whole run) from timestamps when the run was profiled."""

    recorded: bool = False
    encode: float = 0.0
    submit: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # "wait", "copy_out" (from the readback)
    transfers: list[Transfer] = field(default_factory=list)
    host_kernel_s: dict[int, float] = field(default_factory=dict)  # layer index -> its numpy kernel's seconds
    layer_gpu_ns: dict[int, int] = field(default_factory=dict)
    layer_spans: dict[int, int] = field(default_factory=dict)  # layer index -> timed intervals behind it
    ahead: float = 0.0  # host seconds after the submission tracing the next size's plan (lookahead.py)
    prepared_ahead: bool = False  # the run replayed a plan traced ahead of it

    def fixed_costs_ms(self) -> dict[str, float | None]:
        """The run's phases in milliseconds (None where not measured: the GPU span needs timestamps)."""
        gpu = self.layer_gpu_ns.get(-1)
        if gpu is None and self.layer_gpu_ns:
            gpu = sum(self.layer_gpu_ns.values())
        uploads = sum(t.seconds for t in self.transfers if t.kind == "upload" and not t.layer)
        return {"upload_ms": round(uploads * 1e3, 4), "encode_ms": round(self.encode * 1e3, 4),
                "submit_ms": round(self.submit * 1e3, 4), "map_request_ms": _ms(self.phases.get("map_request")),
                "gpu_ms": None if gpu is None else round(gpu / 1e6, 4),
                "wait_ms": _ms(self.phases.get("wait")), "copy_out_ms": _ms(self.phases.get("copy_out")),
                "ahead_ms": round(self.ahead * 1e3, 4)}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1e3, 4)


def program_stats(program: Any) -> dict[str, Any]:
    """``stats()`` of a GPU program (``program.GPUProgram``)."""
    plan = program.last_plan
    report = program.last_run
    transfers = [Transfer("upload", name, nbytes) for name, nbytes in program.constants.uploads] + \
        list(report.transfers) if plan is not None else []
    ups = [t for t in report.transfers if t.kind == "upload"]
    downs = [t for t in report.transfers if t.kind == "download"]
    summary = program.plan_summary()
    arena = plan.arena_bytes if plan is not None else 0
    return {
        "backend": program.backend,
        "device": program.ctx.info.as_dict(),
        "precision": program.precision,
        "gpu_layers": summary["gpu_layers"],
        "cpu_layers": summary["cpu_layers"],
        "fallback_layers": summary["fallback_layers"],
        "placements": summary["placements"],
        "uploads": len(ups),
        "downloads": len(downs),
        "upload_bytes": sum(t.nbytes for t in ups),
        "download_bytes": sum(t.nbytes for t in downs),
        "weight_uploads": program.weight_uploads,
        "weight_upload_bytes": program.weight_bytes,
        "transfers": [{"kind": t.kind, "tensor": t.name, "bytes": t.nbytes, "layer": t.layer,
                       "ms": round(t.seconds * 1e3, 3)} for t in transfers],
        "peak_device_bytes": arena + program.scratch.nbytes + program.weight_bytes + uniform_bytes(program),
        "intermediate_bytes": arena + program.scratch.nbytes,
        "intermediate_lower_bound_bytes": plan.peak_live_bytes if plan is not None else 0,
        "weight_bytes": program.weight_bytes,
        # Device tensors held by callers (outputs of runs with on_device=True) on this program's device.
        "held_device_bytes": program.ctx.held.nbytes,
        "held_device_tensors": program.ctx.held.count,
        "cached_plans": len(program.plans),
        "max_plans": program.plans.capacity,
        "cached_plan_bytes": cached_plan_bytes(program),
        "pipelines": program.ctx.cached_pipelines,
        "pipelines_created": program.ctx.pipelines_created_by(program),  # built for this program's recordings
        # Plans recorded (traced) in all, and those for a size-only change of a structure already planned.
        "plans_recorded": program.plans_recorded,
        # Shape arithmetic (backends.cpu.ShapeValues): its layers, and how many the last recording kept from an
        # earlier one instead of placing and running them (a replay runs none).
        "shape_layers": program.shape_values.count,
        "shape_layers_kept": program.shape_values.kept,
        "plans_recorded_for_new_sizes": program.plans_recorded_for_new_sizes,
        # Of those, the plans made from the structure's base trace (resize.py), and the GPU layers the last of them
        # kept from it as they were (neither placed, built nor bound).
        "plans_resized": program.plans_resized,
        "gpu_layers_kept": program.gpu_layers_kept,
        # GPU layers of the last recording stamped from an earlier trace's template (backends/gpu/layer_reuse.py),
        # and those whose builders ran.
        "gpu_layers_reused": program.layer_reuse.reused,
        "gpu_layers_built": program.layer_reuse.built,
        # Plans traced ahead of the run of their size while the GPU ran the one before (lookahead.py), the runs
        # that replayed one, and the traces of a predicted size that failed (each stops its structure's lookahead).
        "plans_prepared_ahead": program.lookahead.prepared,
        "prepared_plans_replayed": program.lookahead.used,
        "plans_prepared_ahead_failed": program.lookahead.failed,
        "run": {"recorded": report.recorded, "prepared_ahead": report.prepared_ahead, **report.fixed_costs_ms()},
    }



def _written_bytes(plan: Any) -> int:
    """Bytes of a plan's uniform buffers and host values (memory.PlanValues): what its recording wrote once."""
    return ((plan.uniforms.total_bytes if plan.uniforms is not None else 0)
            + (plan.host_values.nbytes if plan.host_values is not None else 0))


def uniform_bytes(program: Any) -> int:
    """Bytes of the uniform buffers and host values the cached plans hold."""
    return sum(_written_bytes(p) for p in program.plans.values())


def cached_plan_bytes(program: Any) -> int:
    """Device bytes the cached plans hold: their arenas, uniforms, host values and free staging buffers."""
    total = 0
    plans = {id(p): p for p in program.plans.values()}
    plans.update({id(p.base): p.base for p in program.plans.values() if p.base is not None})  # (shared, once)
    for plan in plans.values():
        own = plan.arena_bytes - (plan.base.arena_bytes if plan.base is not None else 0)
        total += own + _written_bytes(plan)
        if plan.staging is not None:
            total += plan.staging.nbytes * len(plan.staging.free)
    return total
