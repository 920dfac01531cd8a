"""GPU debugging commands: ``wgsentis capture`` (a RenderDoc capture of a model run) and
``wgsentis view`` (a live window showing a layer's activations).

``add_parsers(subparsers)`` registers them on the main ``wgsentis`` parser; ``python -m
wgsentis.debug_cli`` runs them on their own.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from wgsentis.cli_common import (
    EXIT_OK,
    Progress,
    add_command,
    add_input_args,
    add_quiet_flag,
    check_output_file,
    epilog,
    inputs_for,
    load_model_arg,
    run_command,
)
from wgsentis.errors import InputError

PROFILE_RUNS = 3  # timestamped replays whose median per layer is stored with a capture


def _layer_names(model: Any, spec: str | None) -> list[str]:
    """The layers named in ``--layers A,B`` (checked against the model)."""
    if not spec:
        return []
    names = [n.strip() for n in spec.split(",") if n.strip()]
    known = [layer.name for layer in model.imported.layers]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InputError(f"--layers: model '{model.name}' has no layer(s) {unknown}; layers: {known}")
    return names


def timestamp_times(program: Any, feeds: dict[str, Any], runs: int = PROFILE_RUNS,
                    progress: Callable[[str, int, int], None] | None = None) -> dict[str, int]:
    """Median GPU time (ns) per layer over ``runs`` replays with one timestamped pass per layer,
    keyed ``"name (op_type)"`` like the capture's debug groups; {} without timestamp queries.
    ``progress(phase, done, total)`` after each replay."""
    if not program.ctx.has_timestamps:
        return {}
    program.set_timestamps(True)
    samples: dict[int, list[int]] = {}
    try:
        for k in range(runs):
            program.execute(feeds).wait()
            for index, ns in program.last_run.layer_gpu_ns.items():
                samples.setdefault(index, []).append(ns)
            if progress is not None:
                progress("timestamps", k + 1, runs)
    finally:
        program.set_timestamps(False)
    layers = program.graph.layers
    return {f"{layers[i].name} ({layers[i].op_type})": int(np.median(v)) for i, v in samples.items()}


def capture_model(model: Any, feeds: dict[str, np.ndarray], path: str | Path, *, backend: str = "gpu-compute",
                  layers: list[str] | None = None, overwrite: bool = False,
                  progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
    """Capture one steady-state run of ``model`` into ``path`` with a debug group per layer.

    RenderDoc is enabled first (before the GPU context exists). The run is recorded once outside
    the capture; then ``PROFILE_RUNS`` timestamped replays give the profiler's per-layer times;
    then one replay is captured. The capture's comments hold the model, the GPU layers and the
    timestamp times, which ``tools/rdc_report.py`` compares with RenderDoc's durations.
    ``progress(phase, done, total)`` as it goes (``total`` 0: a phase without steps).
    """
    def tick(phase: str, done: int = 0, total: int = 0) -> None:
        if progress is not None:
            progress(phase, done, total)

    from wgsentis import renderdoc
    from wgsentis.worker import Worker

    renderdoc.check_path(path, overwrite)
    rd = renderdoc.enable()
    for name in layers or []:
        model.add_output(name)
    with Worker(model, backend, debug_groups=True) as worker:
        tick("recording")
        worker.run(feeds)  # record the plan (uploads weights, builds pipelines)
        program = worker.program  # a GPU program: its public hooks give timestamps and the plan
        stamps = timestamp_times(program, feeds, progress=progress)
        stats = worker.stats()
        graph_layers = program.graph.layers
        dispatched = program.plan_summary()["dispatched_layers"]
        ops = {layer.name: layer.op_type for layer in graph_layers}
        notes = {
            "wgsentis": 1, "model": model.name, "backend": backend,
            # GPU layers with GPU work (views such as Flatten/Reshape have none and no debug group)
            "gpu_layers": [{"name": graph_layers[i].name, "op": graph_layers[i].op_type} for i in dispatched],
            "view_layers": [{"name": n, "op": ops.get(n, "?")} for n in stats["gpu_layers"]
                            if n not in {graph_layers[i].name for i in dispatched}],
            "fallback_layers": stats["fallback_layers"], "requested_layers": list(layers or []),
            "timestamp_ns": stamps, "device": stats.get("device", {}).get("name", ""),
        }
        tick("capturing")
        with renderdoc.capture(path, overwrite=overwrite, notes=notes) as cap:
            worker.run(feeds)
    return {"path": str(cap.path), "bytes": cap.bytes, "injected": rd.injected, "gpu_layers": len(notes["gpu_layers"]),
            "fallback_layers": len(stats["fallback_layers"]), "timestamps": bool(stamps)}


def cmd_capture(args: argparse.Namespace) -> int:
    from wgsentis import renderdoc

    renderdoc.check_path(args.output, args.overwrite)  # before loading anything
    model = load_model_arg(args.model)
    layers = _layer_names(model, args.layers)
    feeds = inputs_for(model, args)
    with Progress("capture", enabled=not args.quiet) as progress:
        out = capture_model(model, feeds, args.output, backend=args.backend, layers=layers,
                            overwrite=args.overwrite, progress=progress)
    how = "RenderDoc injected by its launcher" if out["injected"] else "RenderDoc loaded in-process"
    print(f"capture {out['path']} ({out['bytes']} bytes, mode 0600; {how})")
    print(f"layers  {out['gpu_layers']} on the GPU, each a debug group 'name (op_type)'; "
          f"{out['fallback_layers']} CPU fallback(s)")
    print(f"report  python tools/rdc_report.py {out['path']}")
    return EXIT_OK


def cmd_view(args: argparse.Namespace) -> int:
    from wgsentis.viewer import run_view

    check_output_file(args.screenshot, "--screenshot")
    if args.rdc_frame is not None:
        from wgsentis import renderdoc

        renderdoc.check_path(args.rdc_frame, args.overwrite)  # before loading anything
    model = load_model_arg(args.model)
    if args.layer is None:
        raise InputError(f"--layer is required; layers of '{model.name}': {[la.name for la in model.layers]}")
    feeds = inputs_for(model, args)
    summary = run_view(model, args.layer, feeds, frames=args.frames, screenshot=args.screenshot, scale=args.scale,
                       rdc_frame=args.rdc_frame, overwrite=args.overwrite, backend=args.backend)
    print(f"view    {summary['layer']} (tensor {summary['tensor']}): {summary['frames']} frame(s), "
          f"{summary['inferences']} inference(s), grid {summary['grid'][1]}x{summary['grid'][0]} px")
    if "screenshot" in summary:
        print(f"wrote   {summary['screenshot']}")
    if "rdc_frame" in summary:
        print(f"capture {summary['rdc_frame']} (RenderDoc frame capture of frame 2, mode 0600)")
    return EXIT_OK


def add_parsers(subparsers: Any) -> None:
    """Register ``capture`` and ``view`` on the ``wgsentis`` sub-command parsers."""
    cap = add_command(subparsers, "capture", "capture a GPU run with RenderDoc (one debug group per layer)",
                      cmd_capture,
                      "wgsentis capture -o captures/sample.rdc  # the built-in sample model",
                      "wgsentis capture model.onnx -o captures/model.rdc --layers conv1,conv2  # and read these back",
                      "wgsentis capture -o captures/pixel.rdc --backend gpu-pixel --overwrite")
    add_input_args(cap)
    cap.add_argument("-o", "--output", required=True, metavar="FILE.rdc", help="capture file (e.g. captures/x.rdc)")
    cap.add_argument("--backend", default="gpu-compute", choices=["gpu-compute", "gpu-pixel"], help="GPU backend")
    cap.add_argument("--layers", metavar="A,B", help="also read these layers' outputs back (added as outputs)")
    cap.add_argument("--overwrite", action="store_true", help="replace FILE.rdc if it exists")
    add_quiet_flag(cap)

    view = add_command(subparsers, "view", "show a layer's activation channels live in a window", cmd_view,
                       "wgsentis view --layer block_pwconv  # a layer of the built-in sample model",
                       "wgsentis view model.onnx --layer conv1 --frames 10 --screenshot conv1.png",
                       "wgsentis view --layer stem_conv --frames 4 --rdc-frame captures/frame.rdc")
    add_input_args(view)
    view.add_argument("--layer", help="layer (or tensor) to show")
    view.add_argument("--backend", default="gpu-compute", choices=["gpu-compute", "gpu-pixel"], help="GPU backend")
    view.add_argument("--frames", type=int, help="stop after N frames (default: until the window closes)")
    view.add_argument("--screenshot", metavar="FILE.png", help="write the last presented frame as a PNG")
    view.add_argument("--scale", type=int, default=0, help="window pixels per activation pixel (default: fit)")
    view.add_argument("--rdc-frame", metavar="FILE.rdc", help="RenderDoc frame capture of the second frame")
    view.add_argument("--overwrite", action="store_true", help="replace FILE.rdc if it exists")


def main(argv: list[str] | None = None) -> int:
    """``python -m wgsentis.debug_cli capture|view ...``: the same as the ``wgsentis`` command."""
    parser = argparse.ArgumentParser(prog="wgsentis", description="Capture and view ONNX models' GPU work.",
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=epilog("wgsentis capture -o captures/sample.rdc  # the built-in sample",
                                                   "wgsentis view --layer block_pwconv"))
    add_parsers(parser.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND"))
    return run_command(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
