"""Command line: ``wgsentis run | inspect | profile | capture | view`` (the built-in sample model when MODEL is
omitted)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from wgsentis.cli_common import (
    EXIT_OK,
    Progress,
    add_command,
    add_input_args,
    add_quiet_flag,
    at_least_one,
    check_input_file,
    check_output_dir,
    check_output_file,
    epilog,
    inputs_for,
    load_array,
    load_model_arg,
    run_command,
)
from wgsentis.cli_common import sample_model_path as sample_model_path  # re-exported: tests and tools use it
from wgsentis.errors import InputError


def _summary(value: Any) -> str:
    if isinstance(value, list):
        return f"sequence of {len(value)}"
    arr = np.asarray(value)
    text = f"{arr.dtype.name}{list(arr.shape)}"
    if arr.size and arr.dtype.kind in "fiub":
        f = arr.astype(np.float64)
        text += f"  min {f.min():.6g}  max {f.max():.6g}  mean {f.mean():.6g}"
        if arr.ndim == 2 and arr.shape[0] == 1 and arr.shape[1] > 1 and arr.dtype.kind == "f":
            top = np.argsort(-f[0])[:5]
            text += "  top-5 " + ", ".join(f"{i}:{f[0, i]:.4f}" for i in top)
    return text


def cmd_run(args: argparse.Namespace) -> int:
    import wgsentis as ws

    check_output_dir(args.output_dir, "--output-dir")
    model = load_model_arg(args.model)
    feeds = inputs_for(model, args)
    with ws.Worker(model, args.backend, threads=args.threads, precision=args.precision,
                   spin_wait=not args.no_spin_wait) as worker, \
            Progress("run", enabled=args.repeat > 1 and not args.quiet) as progress:
        start = time.perf_counter()
        outputs = worker.run(feeds)
        first_ms = (time.perf_counter() - start) * 1e3
        progress("runs", 1, args.repeat)
        times = []
        for k in range(args.repeat - 1):
            start = time.perf_counter()
            outputs = worker.run(feeds)
            times.append((time.perf_counter() - start) * 1e3)
            progress("runs", k + 2, args.repeat)
        stats = worker.stats()
    print(f"model   {model.name} ({args.model or 'built-in sample'})")
    precision = f" ({worker.precision} weights)" if worker.precision != "float32" else ""
    spin = "" if worker.backend is not ws.BackendType.CPU else ("  (spin-wait)" if worker.spin_wait else "  (blocking)")
    print(f"backend {args.backend}{precision}  threads {worker.threads}{spin}  layers {len(model.layers)}")
    for name, value in feeds.items():
        print(f"input   {name}: {_summary(value)}")
    for name, value in outputs.items():
        print(f"output  {name}: {_summary(value)}")
    timing = f"first run {first_ms:.2f} ms"
    if times:
        timing += f", median of {len(times)} more {float(np.median(times)):.2f} ms"
    print(f"time    {timing}")
    print(f"layers  cpu {len(stats['cpu_layers'])}, gpu {len(stats['gpu_layers'])}, "
          f"fallback {len(stats['fallback_layers'])}; transfers: {stats['uploads']} uploads "
          f"({stats['upload_bytes']} B), {stats['downloads']} downloads ({stats['download_bytes']} B)")
    for placement in stats.get("placements", []):
        if placement["device"] == "fallback":  # why a layer left the device
            print(f"fallback {placement['layer']} ({placement['op']}): {placement['reason']}")
    if "intermediate_bytes" in stats:
        run = stats["run"]
        print(f"device  weights {stats['weight_bytes'] / 1e6:.2f} MB, intermediates "
              f"{stats['intermediate_bytes'] / 1e6:.2f} MB (largest live set "
              f"{stats['intermediate_lower_bound_bytes'] / 1e6:.2f} MB), {stats['cached_plans']} plan(s) cached")
        phases = ", ".join(f"{k.removesuffix('_ms').replace('_', ' ')} {v:.3f}" for k, v in run.items()
                           if isinstance(v, float))
        print(f"last run (ms) {phases}")
    if args.output_dir:
        out_dir = Path(args.output_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, value in outputs.items():
            safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
            np.save(out_dir / f"{safe}.npy", np.asarray(value))
        print(f"wrote   {len(outputs)} output(s) to {out_dir}/")
    return EXIT_OK


def cmd_inspect(args: argparse.Namespace) -> int:
    import wgsentis as ws
    from wgsentis.ops.registry import GPU_COMPUTE, GPU_PIXEL, flops_of, lookup
    from wgsentis.shapes import layer_shapes

    model = load_model_arg(args.model)
    feeds = inputs_for(model, args)
    with ws.Worker(model, "cpu", threads=1) as worker:  # the inputs checked as run, profile and capture check them
        feeds = worker.validate(feeds)
    print(f"model   {model.name} ({args.model or 'built-in sample'})")
    print("opsets  " + ", ".join(f"{d or 'ai.onnx'}:{v}" for d, v in sorted(model.opsets.items())))
    for info in model.inputs:
        print(f"input   {info!r}")
    for info in model.outputs:
        print(f"output  {info!r}")
    shapes = layer_shapes(model, feeds)
    consts = model.constants
    rows = []
    total_flops = total_params = 0
    for layer in model.layers:
        params = sum(int(consts[n].size) for n in layer.inputs if n in consts)
        flops = flops_of(layer, [shapes.get(n) for n in layer.inputs], [shapes.get(n) for n in layer.outputs])
        total_flops += flops
        total_params += params
        op = layer.op_type + (f"+{layer.fused_activation[0]}" if layer.fused_activation else "")
        out_shape = shapes.get(layer.outputs[0]) if layer.outputs else None
        gpu = "/".join("yes" if lookup(layer.op_type, layer.domain, layer.opset, backend=b) is not None else "-"
                       for b in (GPU_COMPUTE, GPU_PIXEL))
        rows.append((layer.name, op, str(list(out_shape)) if out_shape is not None else "?", params, flops, gpu))
    w = max([len(r[0]) for r in rows] + [5])
    print(f"\n{'layer':<{w}}  {'op':<22} {'output shape':<22} {'params':>10} {'FLOPs':>14}  compute/pixel program")
    for name, op, shape, params, flops, gpu in rows:
        print(f"{name:<{w}}  {op:<22} {shape:<22} {params:>10,} {flops:>14,}  {gpu}")
    print(f"\n{len(rows)} layers, {total_params:,} parameters, {total_flops:,} FLOPs "
          "(a multiply-add counts 2; shapes from one CPU run on sample inputs). 'compute/pixel program': whether "
          "gpu-compute / gpu-pixel has a program for the op (it may still fall back for a dtype or attribute it "
          "lacks)")
    return EXIT_OK


def cmd_profile(args: argparse.Namespace) -> int:
    import wgsentis as ws
    from wgsentis.profiler import Profile, compare

    targets = list(args.model or [])
    if targets and targets[0] == "compare":
        files = targets[1:]
        if len(files) < 2:
            raise InputError("compare: give at least two profile JSON files")
        paths = [check_input_file(f, f"compare {f}") for f in files]  # each exists before any is read
        print(compare([Profile.from_json(path).data for path in paths]))
        return EXIT_OK
    if len(targets) > 1:
        raise InputError(f"one MODEL expected, got {targets} (did you mean 'profile compare A.json B.json'?)")
    path = targets[0] if targets else None
    for flag, target in (("--json", args.json), ("--trace", args.trace), ("--html", args.html)):
        check_output_file(target, flag)
    model = load_model_arg(path)
    if args.loss:
        return _loss_profile(model, args)
    # Inputs from files or from --dim values; with neither, the profiler makes them at its batch size.
    feeds = inputs_for(model, args) if args.input or args.dim else None
    levels = _levels(args.pruning_levels, "--pruning-levels")
    with Progress("profile", enabled=not args.quiet) as progress:
        prof = ws.profile(model, backend=args.backend, batch_size=args.batch, threads=args.threads, runs=args.runs,
                          warmup=args.warmup, inputs=feeds, name=args.name or model.name, timing=not args.no_timing,
                          pruning_layers=args.pruning_layers, progress=progress, spin_wait=not args.no_spin_wait,
                          pruning_levels=levels)
    print(prof.table(top=args.top))
    for flag, method in ((args.json, prof.to_json), (args.trace, prof.to_chrome_trace), (args.html, prof.to_html)):
        if flag:
            print(f"wrote   {method(flag)}")
    return EXIT_OK


def _inputs_from_dir(model: Any, folder: str) -> dict[str, np.ndarray]:
    """The model's inputs from ``folder``/NAME.npy, one file per input (InputError naming what is missing)."""
    base = Path(folder).expanduser()
    if not base.is_dir():
        what = "is a file" if base.exists() else "does not exist"
        raise InputError(f"--inputs {folder}: {what}; give a folder of NAME.npy files, one per input")
    feeds, missing = {}, []
    for info in model.inputs:
        f = base / f"{info.name}.npy"
        if not f.exists():
            missing.append(f.name)
            continue
        feeds[info.name] = load_array(f, f"--inputs {folder}: '{f.name}' (input '{info.name}')")
    if missing:
        raise InputError(f"--inputs {folder}: missing {missing} for the inputs of '{model.name}'")
    return feeds


def _levels(text: str | None, flag: str) -> tuple[float, ...]:
    """Sparsity levels from ``S,S,...`` (the default levels when None; an empty string: none)."""
    from wgsentis.profiler.loss import DEFAULT_LEVELS

    if text is None:
        return DEFAULT_LEVELS
    try:
        return tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise InputError(f"{flag} {text!r}: give sparsities like 0.5,0.9") from None


def _loss_profile(model: Any, args: argparse.Namespace) -> int:
    """``wgsentis profile MODEL --loss``: Sparsify's loss profile (``ws.loss_profile``)."""
    import wgsentis as ws

    if args.inputs:
        feeds = _inputs_from_dir(model, args.inputs)
    elif args.input or args.dim:
        feeds = inputs_for(model, args)
    else:
        feeds = None  # seeded random inputs: the profile says so
    levels = _levels(args.levels, "--levels")
    layers = [n for n in args.layers.split(",") if n] if args.layers else None
    with Progress("loss profile", enabled=not args.quiet) as progress:
        lp = ws.loss_profile(model, inputs=feeds, levels=levels, backend=args.backend, threads=args.threads,
                             layers=layers, time_budget=args.time_budget, name=args.name or model.name,
                             timing=not args.no_timing, progress=progress)
    print(lp.table(top=args.top))
    if args.json:
        print(f"wrote   {lp.to_json(args.json)}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wgsentis", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run, inspect, profile and debug ONNX models with wgsentis. Without MODEL a command uses the "
                    "built-in sample model\n(" + str(sample_model_path()) + ").",
        epilog=epilog("wgsentis run  # the built-in sample model",
                      "wgsentis profile model.onnx --json p.json  # per-layer times, kept as JSON",
                      "wgsentis inspect --help  # a command's flags and examples"))
    sub = parser.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")

    def spin_wait_flag(p: argparse.ArgumentParser) -> None:
        p.add_argument("--no-spin-wait", action="store_true",
                       help="CPU threads that block when idle, for cores shared with other busy processes "
                            "(default: BLAS threads that spin-wait, the fastest on cores of its own)")

    run = add_command(sub, "run", "run a model and summarise its outputs", cmd_run,
                      "wgsentis run  # the built-in sample model on the CPU",
                      "wgsentis run --backend gpu-compute --repeat 20  # the sample: median of 20 runs on the GPU",
                      "wgsentis run model.onnx --input image=x.npy --output-dir out  # outputs as out/NAME.npy",
                      "wgsentis run model.onnx --dim batch=8 --threads 4  # a batch of 8 on 4 CPU threads")
    add_input_args(run)
    run.add_argument("--backend", default="cpu", help="cpu | gpu-compute | gpu-pixel")
    run.add_argument("--threads", type=int, default=None, help="CPU threads (pool and BLAS)")
    spin_wait_flag(run)
    run.add_argument("--precision", default="float32",
                     help="gpu-compute weights: float32 | float16 (needs the adapter feature shader-f16)")
    run.add_argument("--repeat", type=at_least_one, default=1, metavar="N",
                     help="run this many times and report the median (a progress bar on a terminal)")
    run.add_argument("--output-dir", metavar="DIR", help="write each output as NAME.npy here")
    add_quiet_flag(run)

    inspect = add_command(sub, "inspect", "list inputs, outputs and layers with params and FLOPs", cmd_inspect,
                          "wgsentis inspect  # the built-in sample model",
                          "wgsentis inspect model.onnx --input image=x.npy  # shapes for these inputs",
                          "wgsentis inspect model.onnx --dim height=224 --dim width=224  # sizes of symbolic dims")
    add_input_args(inspect)

    prof = add_command(sub, "profile", "time each layer: FLOPs, ceilings, pruning; or compare profiles",
                       cmd_profile,
                       "wgsentis profile --backend cpu  # the built-in sample model",
                       "wgsentis profile model.onnx --runs 50 --json a.json --html a.html  # 50 timed runs; the "
                       "profile as JSON and as an HTML report",
                       "wgsentis profile model.onnx --loss --inputs inputs/ --json loss.json  # how pruning each layer "
                       "moves the outputs, on inputs/NAME.npy",
                       "wgsentis profile compare a.json b.json  # two saved profiles side by side")
    prof.add_argument("model", nargs="*", metavar="MODEL",
                      help="ONNX model file (default: the built-in sample), or: compare A.json B.json ...")
    add_input_args(prof, model=False)
    prof.add_argument("--backend", default="gpu-compute", help="cpu | gpu-compute | gpu-pixel")
    prof.add_argument("--batch", type=int, default=1, help="batch size (the inputs' batch dimension)")
    prof.add_argument("--threads", type=int, default=None, help="CPU threads (pool and kernels)")
    spin_wait_flag(prof)
    prof.add_argument("--runs", type=int, default=10, help="timed runs (median reported)")
    prof.add_argument("--warmup", type=int, default=2, help="untimed runs first")
    prof.add_argument("--no-timing", action="store_true", help="only the theoretical FLOPs profile")
    prof.add_argument("--pruning-layers", type=int, default=5,
                      help="estimate pruning sensitivity for this many slowest weighted layers (0: none)")
    prof.add_argument("--top", type=int, default=15, help="layers shown in the table")
    prof.add_argument("--json", metavar="F", help="write the profile as JSON")
    prof.add_argument("--trace", metavar="F", help="write a Chrome trace (Perfetto, chrome://tracing)")
    prof.add_argument("--html", metavar="F", help="write a self-contained HTML report")
    prof.add_argument("--name", metavar="S", help="name of this profile (default: the model's)")
    add_quiet_flag(prof)
    prof.add_argument("--loss", action="store_true",
                      help="the loss profile instead: each prunable layer pruned alone at each level, and how the "
                           "outputs move (rel L2, KL and top-1 agreement for classifiers)")
    prof.add_argument("--inputs", metavar="DIR", help="--loss: the model's inputs as DIR/NAME.npy (default: seeded "
                      "random inputs, which the profile says)")
    prof.add_argument("--levels", metavar="S,S", help="--loss: sparsity levels (default 0.4,0.6,0.8,0.9,0.95)")
    prof.add_argument("--pruning-levels", metavar="S,S", help="levels of the pruned views' estimates (default "
                      "0.4,0.6,0.8,0.9,0.95; '' for none)")
    prof.add_argument("--layers", metavar="A,B", help="--loss: only these layers")
    prof.add_argument("--time-budget", type=float, metavar="S", help="--loss: stop profiling layers after S seconds")

    from wgsentis import debug_cli  # capture and view: RenderDoc and the live window

    debug_cli.add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """``wgsentis ...``: the exit code (see EXIT_CODES; argparse exits with 2 itself on a usage error)."""
    return run_command(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
