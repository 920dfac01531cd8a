"""The compare view's pruning lines: the speedup of a pruned model over its dense one, estimated from the dense
profile and the FLOPs pruning removed, beside the measured one."""

from __future__ import annotations

from typing import Any

import numpy as np


def _estimated_ms(entry: dict[str, Any], removed: float) -> float | None:
    """A dense layer's estimated time once ``removed`` of its FLOPs are gone: from the profile's own
    ``estimated_ms`` (level -> ms) where present, read at level = ``removed`` (linear between levels, as
    the rule is); else compute-bound layers take time * (1 - removed) and the others keep their time."""
    ms = entry.get("time_ms")
    if ms is None:
        return None
    given = entry.get("estimated_ms")
    if isinstance(given, dict):
        points = sorted((float(k), float(v)) for k, v in given.items() if v is not None)
        points = [(0.0, float(ms)), *[p for p in points if p[0] > 0]]
        if len(points) > 1:
            (x0, y0), (x1, y1) = points[-2], points[-1]
            if removed > x1:  # past the last level: the same straight line
                return max(0.0, y1 + (y1 - y0) / (x1 - x0) * (removed - x1))
            return float(np.interp(removed, [p[0] for p in points], [p[1] for p in points]))
    return ms * (1.0 - removed) if entry.get("bound") == "compute" else ms


def speedup_lines(dense: dict[str, Any], pruned: dict[str, Any]) -> list[str]:
    """Lines for ``compare``: per layer (matched by name) and in total, the speedup of ``pruned`` over
    ``dense`` as estimated from the dense profile and the FLOPs pruning removed, beside the measured one.
    Empty unless both profiles are timed on the same backend and share layer names."""
    if dense.get("ms_per_batch") is None or pruned.get("ms_per_batch") is None \
            or dense.get("backend") != pruned.get("backend"):
        return []
    after = {e["name"]: e for e in pruned.get("layers") or []}
    layers = dense.get("layers") or []
    if not any(e["name"] in after for e in layers):
        return []

    def ratio(a: float | None, b: float | None) -> str:
        return "-" if not a or not b else f"{a / b:.2f}x"

    head = (f"\nspeedup of {pruned['name']} vs {dense['name']} (estimated: from {dense['name']}'s profile and the "
            "FLOPs removed; measured: time ratio)")
    lines = [head, f"{'layer':<34}{'dense ms':>10}{'pruned ms':>10}{'FLOPs -%':>9}{'estimated':>10}{'measured':>10}"]
    saved = 0.0
    for e in layers:
        p = after.get(e["name"])
        removed = 0.0
        if p is not None and e.get("flops"):
            removed = min(max(1.0 - p["flops"] / e["flops"], 0.0), 1.0)
        est = _estimated_ms(e, removed)
        if est is not None:
            saved += (e["time_ms"] or 0.0) - est
        if p is None:
            continue
        lines.append(f"{e['name'][:33]:<34}{_fmt(e.get('time_ms')):>10}{_fmt(p.get('time_ms')):>10}"
                     f"{100 * removed:>9.1f}{ratio(e.get('time_ms'), est):>10}"
                     f"{ratio(e.get('time_ms'), p.get('time_ms')):>10}")
    ms = dense["ms_per_batch"]
    rows = dense.get("time_sum_ms") or sum(e.get("time_ms") or 0.0 for e in layers)
    # As the profile's pruned views do: the saved share of the rows comes off ms_per_batch.
    est_ms = ms * (1.0 - min(1.0, saved / rows)) if rows else ms
    flops_d, flops_p = dense["flops_profile"]["total_flops"], pruned["flops_profile"]["total_flops"]
    removed_total = 100 * (1 - flops_p / flops_d) if flops_d else 0.0
    lines.append(f"{'ms/batch (total)':<34}{ms:>10.3f}{pruned['ms_per_batch']:>10.3f}{removed_total:>9.1f}"
                 f"{ratio(ms, est_ms):>10}{ratio(ms, pruned['ms_per_batch']):>10}")
    return lines


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
