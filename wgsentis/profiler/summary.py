"""Summaries: time, FLOPs and share per op type (Sparsify's layer summaries), the terminal table
(with the pruned views' estimated ms per batch and speedup per level), and side-by-side comparison
of several profiles."""

from __future__ import annotations

from typing import Any


def op_type_summary(layers: list[dict[str, Any]], costs: list[Any]) -> list[dict[str, Any]]:
    """One row per op type, slowest first: count, time_ms, flops, params, percent, gflops_per_s.
    Without timed layers (``--no-timing``) rows come from ``costs`` and are ordered by FLOPs."""
    rows: dict[str, dict[str, Any]] = {}
    timed = bool(layers)
    source = layers if timed else [{"op_type": c.op_type, "flops": c.flops, "params": c.params, "time_ms": None}
                                   for c in costs]
    for e in source:
        row = rows.setdefault(e["op_type"], {"op_type": e["op_type"], "count": 0, "time_ms": 0.0 if timed else None,
                                             "flops": 0, "params": 0})
        row["count"] += 1
        row["flops"] += e["flops"]
        row["params"] += e["params"]
        if timed:
            row["time_ms"] += e["time_ms"] or 0.0
    total_t = sum(r["time_ms"] for r in rows.values()) if timed else 0.0
    total_f = sum(r["flops"] for r in rows.values())
    for r in rows.values():
        r["flops_percent"] = round(100.0 * r["flops"] / total_f, 3) if total_f else 0.0
        if timed:
            r["time_ms"] = round(r["time_ms"], 5)
            r["percent"] = round(100.0 * r["time_ms"] / total_t, 3) if total_t else 0.0
            r["gflops_per_s"] = round(r["flops"] / r["time_ms"] / 1e6, 4) if r["time_ms"] else None
        else:
            r["percent"] = None
    key = (lambda r: -r["time_ms"]) if timed else (lambda r: -r["flops"])
    return sorted(rows.values(), key=key)


def _num(value: float | None, fmt: str = ".3f") -> str:
    return "-" if value is None else format(value, fmt)


def _si(value: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.2f}{unit}"
    return f"{value:.0f}"


def _pruned_lines(data: dict[str, Any]) -> list[str]:
    """The pruned views' summary: estimated ms per batch and speedup at each pruning level."""
    estimates = [r for r in data.get("pruned_estimates") or [] if r.get("ms_per_batch") is not None]
    if not estimates:
        return []
    head = "pruned   level    " + "".join(f"{100 * r['level']:>9.0f}%" for r in estimates)
    ms = "  (est.) ms/batch " + "".join(f"{r['ms_per_batch']:>10.3f}" for r in estimates)
    speed = "         speedup  " + "".join(f"{_num(r['speedup'], '.2f') + 'x':>10}" for r in estimates)
    return [head, ms, speed, "         (compute-bound prunable layers: time x (1 - level); others keep theirs)"]


def render_table(data: dict[str, Any], top: int = 15) -> str:
    """The terminal view of a profile: summary lines, then the top layers, op types and transfers."""
    fp = data["flops_profile"]
    dev = data.get("device") or {}
    lines = [f"model    {data['name']} ({data['model']})",
             f"backend  {data['backend']}  batch {data['batch_size']}  threads {data['threads']}  "
             f"device {dev.get('name') or dev.get('cpu', '?')}",
             f"totals   {_si(fp['total_flops'])}FLOPs  {_si(fp['total_params'])} params  "
             f"{len(data['layers'])} layers (executed, after the graph passes)"]
    if fp.get("model_total_flops") is not None:
        lines.append(f"model    {_si(fp['model_total_flops'])}FLOPs  {_si(fp['model_total_params'])} params  "
                     f"{fp['model_layers']} layers (as imported, before the graph passes)")
    if data.get("ms_per_batch") is None:
        lines.append("timing   skipped (theoretical profile only)")
        rows = sorted(fp["layers"], key=lambda r: -r["flops"])[:top]
        lines.append(f"\n{'layer':<32} {'op':<18} {'FLOPs':>10} {'params':>10}")
        lines += [f"{r['name'][:32]:<32} {r['op_type'][:18]:<18} {_si(r['flops']):>10} {_si(r['params']):>10}"
                  for r in rows]
        return "\n".join(lines)
    ceil = data.get("ceilings") or {}
    lines.append(f"time     {data['ms_per_batch']:.3f} ms/batch (median of {data['runs']}; min {data['ms_min']:.3f}, "
                 f"max {data['ms_max']:.3f})  {data['items_per_second']:.1f} items/s  timer: {data['timer']}")
    lines.append(f"rows     sum {data['time_sum_ms']:.3f} ms = {100 * data['time_sum_ratio']:.1f}% of ms/batch "
                 f"(instrumented runs: {data['ms_per_batch_instrumented']:.3f} ms)")
    if ceil:
        lines.append(f"ceilings {ceil['peak_gflops_per_s']:.1f} GFLOP/s, {ceil['peak_gb_per_s']:.1f} GB/s (measured)")
    if data.get("fallback_layers"):
        lines.append(f"fallback {len(data['fallback_layers'])} layer(s) ran on the CPU: "
                     + ", ".join(data["fallback_layers"][:8]))
    lines += _pruned_lines(data)
    layers = sorted(data["layers"], key=lambda e: -(e["time_ms"] or 0))[:top]
    lines.append(f"\n{'top layers':<32} {'op':<18} {'dev':<4} {'ms':>9} {'%':>6} {'GFLOP/s':>9} {'GB/s':>8} "
                 f"{'bound':<7} {'prune 90%: dL2':>14}")
    for e in layers:
        op = e["op_type"] + (f"+{e['fused_activation']}" if e.get("fused_activation") else "")
        dev_text = e["device"] + ("*" if e["fallback"] else "")
        prune = e.get("pruning")
        prune_text = f"{prune['relative_l2_change'][-1]:.3g}" if prune else ""
        lines.append(f"{e['name'][:32]:<32} {op[:18]:<18} {dev_text:<4} {_num(e['time_ms']):>9} "
                     f"{_num(e['percent'], '.1f'):>6} {_num(e['gflops_per_s'], '.2f'):>9} "
                     f"{_num(e['gb_per_s'], '.2f'):>8} "
                     f"{(e['bound'] or '-'):<7} {prune_text:>14}")
    lines.append("(* = CPU fallback)" if any(e["fallback"] for e in layers) else "")
    lines.append(f"{'op type':<24} {'count':>5} {'ms':>9} {'%':>6} {'FLOPs %':>8}")
    for r in data["op_types"]:
        lines.append(f"{r['op_type'][:24]:<24} {r['count']:>5} {_num(r['time_ms']):>9} {_num(r['percent'], '.1f'):>6} "
                     f"{r['flops_percent']:>8.1f}")
    extra = [*data.get("host", []), *data.get("transfers", [])]
    if extra:
        lines.append(f"\n{'host and transfers':<44} {'bytes':>10} {'ms':>9} {'%':>6}")
        for r in extra:
            label = r.get("name") or f"{r['kind']} {r['tensor']}" + (f" [{r['layer']}]" if r.get("layer") else "")
            lines.append(f"{label[:44]:<44} {_si(r.get('bytes', 0)) if 'bytes' in r else '':>10} "
                         f"{r['time_ms']:>9.3f} {r['percent']:>6.1f}")
    return "\n".join(lines)


def compare(profiles: list[dict[str, Any]]) -> str:
    """Side-by-side text comparison of profiles: totals, per op type and per layer (by layer name)."""
    heads = [f"{p['name']}/{p['backend']}"[:18] for p in profiles]
    width = 12
    lines = [f"{'':<34}" + "".join(f"{h:>{max(width, len(h) + 1)}}" for h in heads)]

    def row(label: str, values: list[float | None], fmt: str = ".3f") -> str:
        return f"{label[:34]:<34}" + "".join(
            f"{_num(v, fmt):>{max(width, len(h) + 1)}}" for v, h in zip(values, heads, strict=True))

    lines.append(row("ms/batch", [p.get("ms_per_batch") for p in profiles]))
    lines.append(row("items/s", [p.get("items_per_second") for p in profiles], ".1f"))
    lines.append(row("MFLOPs", [p["flops_profile"]["total_flops"] / 1e6 for p in profiles]))
    lines.append("\nper op type (ms)")
    ops: list[str] = []
    for p in profiles:
        ops += [r["op_type"] for r in p["op_types"] if r["op_type"] not in ops]
    for op in ops:
        lines.append(row(op, [next((r["time_ms"] for r in p["op_types"] if r["op_type"] == op), None)
                              for p in profiles]))
    lines.append("\nper layer (ms)")
    names: list[str] = []
    for p in profiles:
        names += [e["name"] for e in p["layers"] if e["name"] not in names]
    by_name = [{e["name"]: e for e in p["layers"]} for p in profiles]
    for n in names:
        lines.append(row(n, [m[n]["time_ms"] if n in m else None for m in by_name]))
    from wgsentis.profiler.prune_speedup import speedup_lines  # the first profile as the dense one: ws.prune's view

    for p in profiles[1:]:
        lines += speedup_lines(profiles[0], p)
    return "\n".join(lines)
