"""Benchmark: wgsentis against ONNX Runtime (CPU) on the reference models, in the same process.

Runs alternate between the two engines so that machine noise hits both alike; prints per model
the median latency of each, their ratio (wgsentis / ORT), and the geometric mean of the ratios.

    python tools/bench.py [--backend cpu] [--threads 2] [--runs 10] [--models a,b] [--shipped]
                          [--markdown BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import zoo

import wgsentis as ws


def bench_model(name: str, backend: str, threads: int, runs: int, warmup: int, dense: bool) -> dict:
    proto = zoo.load_proto(name, dense=dense)
    feeds = zoo.input_feeds(name, proto)
    sess = zoo.ort_session(proto, threads)
    out_names = [o.name for o in sess.get_outputs()]
    model = ws.load_model(proto, name=name)
    worker = ws.Worker(model, backend, threads=threads)
    try:
        ours_out = None
        for _ in range(warmup):
            sess.run(out_names, feeds)
            ours_out = worker.run(feeds)
        ort_ms, ours_ms = [], []
        for _ in range(runs):
            t0 = time.perf_counter()
            ref = sess.run(out_names, feeds)
            t1 = time.perf_counter()
            ours_out = worker.run(feeds)
            t2 = time.perf_counter()
            ort_ms.append((t1 - t0) * 1e3)
            ours_ms.append((t2 - t1) * 1e3)
        err = max(zoo.rel_l2(ours_out[n], r) for n, r in zip(out_names, ref, strict=True))
        stats = worker.stats()
    finally:
        worker.close()
    ort_med, ours_med = statistics.median(ort_ms), statistics.median(ours_ms)
    return {"model": name, "ort_ms": ort_med, "ours_ms": ours_med, "ratio": ours_med / ort_med,
            "rel_l2": err, "layers": len(model.layers), "peak_device_bytes": stats.get("peak_device_bytes", 0)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--models", help="comma-separated subset of: " + ",".join(zoo.ALL_MODELS))
    parser.add_argument("--shipped", action="store_true", help="zoo light models as shipped (default: densified)")
    parser.add_argument("--markdown", help="append the table to this Markdown file")
    args = parser.parse_args(argv)
    names = args.models.split(",") if args.models else zoo.ALL_MODELS
    unknown = [n for n in names if n not in zoo.ALL_MODELS]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {zoo.ALL_MODELS}")
    rows = []
    header = f"{'model':<14} {'ORT ms':>9} {'wgsentis ms':>12} {'ratio':>7} {'rel L2':>9}"
    print(f"backend {args.backend}, threads {args.threads}, {args.runs} runs (median), "
          f"{'shipped' if args.shipped else 'densified'} light models")
    print(header)
    for name in names:
        row = bench_model(name, args.backend, args.threads, args.runs, args.warmup, dense=not args.shipped)
        rows.append(row)
        print(f"{name:<14} {row['ort_ms']:>9.2f} {row['ours_ms']:>12.2f} {row['ratio']:>7.2f} {row['rel_l2']:>9.1e}",
              flush=True)
    geomean = float(np.exp(np.mean(np.log([r["ratio"] for r in rows]))))
    print(f"geometric mean ratio (wgsentis / ORT): {geomean:.2f}")
    if args.markdown:
        import onnxruntime

        lines = [
            f"\n## {args.backend}, threads={args.threads} ({time.strftime('%Y-%m-%d')})\n",
            f"Machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}, "
            f"onnxruntime {onnxruntime.__version__}, {args.runs} runs (median ms), "
            f"{'shipped' if args.shipped else 'densified'} light models. "
            f"Command: `python tools/bench.py --backend {args.backend} --threads {args.threads} --runs {args.runs}`\n",
            "| model | ORT ms | wgsentis ms | ratio | rel L2 |", "|---|---:|---:|---:|---:|",
        ]
        lines += [f"| {r['model']} | {r['ort_ms']:.2f} | {r['ours_ms']:.2f} | {r['ratio']:.2f} | {r['rel_l2']:.1e} |"
                  for r in rows]
        lines.append(f"| **geometric mean** | | | **{geomean:.2f}** | |\n")
        with open(args.markdown, "a") as fh:
            fh.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
