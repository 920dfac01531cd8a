#!/usr/bin/env python3
"""Report on a RenderDoc capture of a wgsentis run: per layer, its GPU actions and their GPU time.

    python tools/rdc_report.py captures/sample.rdc [--json report.json]

It opens the capture with RenderDoc's Python replay module (Debian ``python3-renderdoc``; the
module is a CPython extension built for the *system* python3). Run under another interpreter,
it imports the module directly when the Python versions match, and otherwise re-runs itself
under the system python3, so ``.venv/bin/python tools/rdc_report.py`` always works. It needs
only the standard library.

Layers are the debug groups named ``name (op_type)`` that ``GPUProgram(debug_groups=True)``
pushes; each GPU action (dispatch, draw, copy, clear) belongs to its innermost such group, and
its duration is RenderDoc's ``EventGPUDuration`` counter, measured while replaying. When the
capture was made by ``wgsentis capture``, its comments (JSON) list the layers the run placed on
the GPU and their profiler timestamp times: layers missing from the capture are flagged (exit
status 1) and both timings are shown side by side.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

LAYER_GROUP = re.compile(r"^(?P<name>.+) \((?P<op>[A-Za-z_][A-Za-z0-9_.]*)\)$")
MODULE_DIRS = ("/usr/lib/python3/dist-packages", "/usr/lib/renderdoc", "/usr/local/lib/renderdoc",
               "/usr/share/renderdoc")
SYSTEM_PYTHONS = ("/usr/bin/python3", "/bin/python3")
_REEXEC_FLAG = "--_no-reexec"


class ReportError(Exception):
    """The capture or RenderDoc's Python module could not be used."""


# -- finding RenderDoc's module -------------------------------------------------------------------------
def module_dirs() -> list[str]:
    """Folders that may hold RenderDoc's ``renderdoc`` Python module (the package's listing first)."""
    dirs: list[str] = []
    if shutil.which("dpkg"):
        try:
            listing = subprocess.run(["dpkg", "-L", "python3-renderdoc"], capture_output=True, text=True,
                                     timeout=20, check=False).stdout
        except (OSError, subprocess.SubprocessError):
            listing = ""
        dirs += [os.path.dirname(p) for p in listing.splitlines() if re.search(r"/renderdoc[^/]*\.so$", p)]
    dirs += [d for d in MODULE_DIRS if glob.glob(os.path.join(d, "renderdoc*.so"))]
    return list(dict.fromkeys(dirs))


def import_renderdoc() -> Any:
    """Import RenderDoc's module in this interpreter; ReportError saying why not."""
    for d in module_dirs():
        if d not in sys.path:
            sys.path.append(d)
    try:
        import renderdoc  # type: ignore[import-not-found]
    except ImportError as exc:
        raise ReportError(f"RenderDoc's Python module cannot be imported by {sys.executable} "
                          f"(Python {sys.version.split()[0]}): {exc}") from None
    return renderdoc


def system_python() -> str | None:
    """The system python3 that python3-renderdoc was built for, if it is not this interpreter."""
    for cand in SYSTEM_PYTHONS:
        if os.path.exists(cand) and os.path.realpath(cand) != os.path.realpath(sys.executable):
            return cand
    return None


# -- reading the capture ----------------------------------------------------------------------------------
def _notes(rd: Any, cap: Any) -> dict[str, Any]:
    idx = cap.FindSectionByType(rd.SectionType.Notes)
    if idx < 0:
        return {}
    try:
        outer = json.loads(bytes(cap.GetSectionContents(idx)).decode())
        inner = json.loads(outer.get("comments", "") or "{}")
    except (ValueError, UnicodeDecodeError):
        return {}
    return inner if isinstance(inner, dict) else {}


def read_capture(path: str) -> dict[str, Any]:
    """Replay ``path`` and collect per-layer actions and GPU durations (as a JSON-able dict)."""
    rd = import_renderdoc()
    if not Path(path).is_file():
        raise ReportError(f"capture '{path}' does not exist")
    rd.InitialiseReplay(rd.GlobalEnvironment(), [])
    cap = rd.OpenCaptureFile()
    ctl = None
    try:
        status = cap.OpenFile(path, "", None)
        if status != rd.ResultCode.Succeeded:
            raise ReportError(f"RenderDoc cannot open '{path}': {status}")
        if not cap.LocalReplaySupport():
            raise ReportError(f"'{path}' cannot be replayed on this machine (driver: {cap.DriverName()})")
        notes = _notes(rd, cap)
        status, ctl = cap.OpenCapture(rd.ReplayOptions(), None)
        if status != rd.ResultCode.Succeeded:
            raise ReportError(f"RenderDoc cannot replay '{path}': {status}")
        return _collect(rd, ctl, notes, path, cap.DriverName())
    finally:
        if ctl is not None:
            ctl.Shutdown()
        cap.Shutdown()
        rd.ShutdownReplay()


def _collect(rd: Any, ctl: Any, notes: dict[str, Any], path: str, driver: str) -> dict[str, Any]:
    sfile = ctl.GetStructuredFile()
    gpu_flags = rd.ActionFlags.Dispatch | rd.ActionFlags.Drawcall | rd.ActionFlags.Copy | rd.ActionFlags.Clear \
        | rd.ActionFlags.Resolve | rd.ActionFlags.GenMips
    actions: list[dict[str, Any]] = []

    def walk(items: Any, groups: list[str]) -> None:
        for a in items:
            name = a.GetName(sfile)
            if a.children:
                walk(a.children, [*groups, name] if a.flags & rd.ActionFlags.PushMarker or a.customName else groups)
            elif a.flags & gpu_flags:
                layer = next((g for g in reversed(groups) if LAYER_GROUP.match(g)), None)
                actions.append({"event": a.eventId, "name": name, "layer": layer,
                                "kind": "dispatch" if a.flags & rd.ActionFlags.Dispatch else
                                "draw" if a.flags & rd.ActionFlags.Drawcall else "other",
                                "dims": list(a.dispatchDimension) if a.flags & rd.ActionFlags.Dispatch else None})

    walk(ctl.GetRootActions(), [])
    durations: dict[int, float] = {}
    counter = rd.GPUCounter.EventGPUDuration
    if counter in ctl.EnumerateCounters():
        unit = ctl.DescribeCounter(counter).unit
        scale = 1e6 if unit == rd.CounterUnit.Seconds else 1.0
        for r in ctl.FetchCounters([counter]):
            durations[r.eventId] = r.value.d * scale  # microseconds
    for a in actions:
        a["gpu_us"] = durations.get(a["event"])
    labels = sorted({r.name for r in ctl.GetResources() if not r.autogeneratedName})
    return build_report(actions, notes, path, driver, labels, bool(durations))


def build_report(actions: list[dict[str, Any]], notes: dict[str, Any], path: str, driver: str,
                 labels: list[str], have_durations: bool) -> dict[str, Any]:
    """Group ``actions`` by layer, total per op type, compare with the notes' timestamp times."""
    layers: dict[str, dict[str, Any]] = {}
    outside: list[dict[str, Any]] = []
    for a in actions:
        if a["layer"] is None:
            outside.append(a)
            continue
        m = LAYER_GROUP.match(a["layer"])
        entry = layers.setdefault(a["layer"], {"layer": m["name"], "op": m["op"], "actions": 0, "dispatches": 0,
                                               "draws": 0, "gpu_us": 0.0, "timestamp_us": None})
        entry["actions"] += 1
        entry["dispatches"] += a["kind"] == "dispatch"
        entry["draws"] += a["kind"] == "draw"
        entry["gpu_us"] += a["gpu_us"] or 0.0
    stamps = notes.get("timestamp_ns") or {}
    for key, entry in layers.items():
        if key in stamps:
            entry["timestamp_us"] = stamps[key] / 1e3
    expected = [f"{e['name']} ({e['op']})" for e in notes.get("gpu_layers", [])]
    missing = [k for k in expected if k not in layers]
    per_op: dict[str, dict[str, Any]] = {}
    for entry in layers.values():
        tot = per_op.setdefault(entry["op"], {"op": entry["op"], "layers": 0, "actions": 0, "gpu_us": 0.0,
                                              "timestamp_us": 0.0})
        tot["layers"] += 1
        tot["actions"] += entry["actions"]
        tot["gpu_us"] += entry["gpu_us"]
        tot["timestamp_us"] += entry["timestamp_us"] or 0.0
    return {
        "capture": path, "driver": driver, "durations": "EventGPUDuration" if have_durations else None,
        "model": notes.get("model"), "backend": notes.get("backend"),
        "layers": list(layers.values()), "per_op": sorted(per_op.values(), key=lambda t: -t["gpu_us"]),
        "expected_layers": expected, "missing_layers": missing,
        "view_layers": [f"{e['name']} ({e['op']})" for e in notes.get("view_layers", [])],
        "outside_layers": [{"event": a["event"], "name": a["name"], "gpu_us": a["gpu_us"]} for a in outside],
        "total_gpu_us": sum(e["gpu_us"] for e in layers.values()),
        "total_timestamp_us": sum(e["timestamp_us"] or 0.0 for e in layers.values()) if stamps else None,
        "labels": labels,
    }


def format_report(rep: dict[str, Any]) -> str:
    """The report as a text table."""
    out = [f"capture {rep['capture']}  driver {rep['driver']}"
           + (f"  model {rep['model']} ({rep['backend']})" if rep.get("model") else "")]
    if not rep["durations"]:
        out.append("note: this driver gives no EventGPUDuration counter; durations are 0")
    w = max([len(e["layer"]) for e in rep["layers"]] + [5])
    out.append(f"\n{'layer':<{w}}  {'op':<20} {'actions':>7} {'GPU us (rdc)':>13} {'timestamp us':>13} {'ratio':>6}")
    for e in rep["layers"]:
        ts = e["timestamp_us"]
        ratio = f"{e['gpu_us'] / ts:6.2f}" if ts else "     -"
        ts_text = f"{ts:13.1f}" if ts is not None else f"{'-':>13}"
        out.append(f"{e['layer']:<{w}}  {e['op']:<20} {e['actions']:>7} {e['gpu_us']:>13.1f} {ts_text} {ratio}")
    tts = rep["total_timestamp_us"]
    out.append(f"{'total':<{w}}  {'':<20} {sum(e['actions'] for e in rep['layers']):>7} {rep['total_gpu_us']:>13.1f} "
               + (f"{tts:13.1f}" if tts is not None else f"{'-':>13}"))
    out.append(f"\n{'op type':<20} {'layers':>6} {'actions':>7} {'GPU us (rdc)':>13} {'share':>6}")
    total = rep["total_gpu_us"] or 1.0
    for t in rep["per_op"]:
        out.append(f"{t['op']:<20} {t['layers']:>6} {t['actions']:>7} {t['gpu_us']:>13.1f} "
                   f"{100 * t['gpu_us'] / total:5.1f}%")
    if rep["outside_layers"]:
        us = sum(a["gpu_us"] or 0.0 for a in rep["outside_layers"])
        out.append(f"\n{len(rep['outside_layers'])} GPU action(s) outside any layer group (uploads, readback "
                   f"copies): {us:.1f} us")
    if rep.get("view_layers"):
        out.append(f"{len(rep['view_layers'])} GPU layer(s) with no GPU work (views of their input): "
                   + ", ".join(rep["view_layers"]))
    if rep["expected_layers"]:
        if rep["missing_layers"]:
            out.append(f"\nMISSING from the capture: {len(rep['missing_layers'])} of {len(rep['expected_layers'])} "
                       f"GPU layers: {', '.join(rep['missing_layers'])}")
        else:
            out.append(f"\nall {len(rep['expected_layers'])} GPU layers of the run are in the capture")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    reexeced = _REEXEC_FLAG in argv
    argv = [a for a in argv if a != _REEXEC_FLAG]
    parser = argparse.ArgumentParser(prog="rdc_report", description=__doc__.split("\n\n")[0])
    parser.add_argument("capture", help="a .rdc file written by RenderDoc (e.g. by `wgsentis capture`)")
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON to FILE")
    args = parser.parse_args(argv)
    try:
        import_renderdoc()
    except ReportError as exc:
        other = None if reexeced else system_python()
        if other is None:
            print(f"rdc_report: error: {exc}. Install python3-renderdoc (./setup.sh) and run this with the "
                  "system python3 it was built for", file=sys.stderr)
            return 2
        # python3-renderdoc is built for the system interpreter: run this script there.
        return subprocess.run([other, os.path.abspath(__file__), *argv, _REEXEC_FLAG], check=False).returncode
    try:
        rep = read_capture(args.capture)
    except ReportError as exc:
        print(f"rdc_report: error: {exc}", file=sys.stderr)
        return 2
    print(format_report(rep))
    if args.json:
        Path(args.json).write_text(json.dumps(rep, indent=2) + "\n")
    return 1 if rep["missing_layers"] else 0


if __name__ == "__main__":
    sys.exit(main())
