"""Benchmark: wgsentis against ONNX Runtime (CPU) on the reference models, in the same process.

Runs alternate between the two engines so that machine noise hits both alike; prints per model
the median latency of each, their ratio (wgsentis / ORT), and the geometric mean of the ratios.

    python tools/bench.py [--backend cpu] [--threads 2] [--runs 10] [--models a,b] [--shipped]
                          [--no-spin-wait] [--versus BACKEND] [--markdown BENCHMARKS.md]

``--backend gpu-pixel`` also runs gpu-compute (``--versus``), alternating with it and ORT in the same process,
and prints the latency ratio pixel / compute per model, their geometric mean, and MatMul 1024^3 GFLOP/s of both
(alternating too) with their ratio.

``--generate``: greedy generation with a GPT-2-style decoder, per token, every backend beside ORT CPU and beside a
same-shape replay, with the bytes that crossed per token (``tools/bench_generate.py``; its own options follow).

``--sizes``: the cost of a new input size against a replay of a size already seen, on both GPU backends, for
PP-OCRv4 rec at 20 widths and the PP-OCRv4 detector at 3 sizes, with the pipelines each size change compiled and a
check against ORT CPU (``tools/bench_sizes.py``; its own options follow).

``--ray``: batch scoring on a local Ray Data instance with 1 and 2 actors against one in-process Predictor, rows/s
and their ratios (``tools/bench_ray.py``; its own options follow).
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


# Idle time after each engine's run, so that neither runs beside the other's spinning threads. Measured
# here (CPU time of the threads after a run): ORT's intra-op pool spins for 40-50 ms after a run (its
# default), OpenBLAS's threads for ~0.11 s after their last job (2^28 TSC cycles). Up to the seventh
# session this was 20 ms after each: our runs began beside ORT's spinner, which cost the blocking pool
# little but costs BLAS's spinning threads a lot (PP-OCR cls 25 ms, against 7 ms after 0.2 s).
SETTLE_AFTER_ORT_S = 0.1
SETTLE_AFTER_BLAS_S = 0.15
SETTLE_S = 0.02  # after a run of ours that leaves no thread spinning (blocking pool, lavapipe)


def bench_model(name: str, backend: str, threads: int, runs: int, warmup: int, dense: bool,
                precision: str = "float32", spin_wait: bool = True, versus: str | None = None) -> dict:
    proto = zoo.load_proto(name, dense=dense)
    feeds = zoo.input_feeds(name, proto)
    sess = zoo.ort_session(proto, threads)
    out_names = [o.name for o in sess.get_outputs()]
    model = ws.load_model(proto, name=name)
    worker = ws.Worker(model, backend, threads=threads, precision=precision, spin_wait=spin_wait)
    other = ws.Worker(model, versus, threads=threads) if versus else None
    settle_after_ours = SETTLE_AFTER_BLAS_S if backend == "cpu" and spin_wait and threads > 1 else SETTLE_S
    gpu = backend.startswith("gpu-")
    try:
        ours_out = None
        for _ in range(warmup):
            sess.run(out_names, feeds)
            ours_out = worker.run(feeds)
            if other is not None:
                other.run(feeds)
        ort_ms, ours_ms, versus_ms, encode_s = [], [], [], []
        for _ in range(runs):  # ORT, ours and the other backend alternate: machine noise hits all alike
            t0 = time.perf_counter()
            ref = sess.run(out_names, feeds)
            ort_ms.append((time.perf_counter() - t0) * 1e3)
            time.sleep(SETTLE_AFTER_ORT_S)
            t1 = time.perf_counter()
            ours_out = worker.run(feeds)
            ours_ms.append((time.perf_counter() - t1) * 1e3)
            if gpu:
                encode_s.append(worker.program.last_run.encode)
            time.sleep(settle_after_ours)
            if other is not None:
                t2 = time.perf_counter()
                other.run(feeds)
                versus_ms.append((time.perf_counter() - t2) * 1e3)
                time.sleep(SETTLE_S)
        err = max(zoo.rel_l2(ours_out[n], r) for n, r in zip(out_names, ref, strict=True))
        stats = worker.stats()
        encode_us = None
        if gpu:  # the median run's host recording time, per GPU layer
            layers = len(stats["gpu_layers"]) or 1
            encode_us = statistics.median(encode_s) * 1e6 / layers
    finally:
        worker.close()
        if other is not None:
            other.close()
    ort_med, ours_med = statistics.median(ort_ms), statistics.median(ours_ms)
    versus_med = statistics.median(versus_ms) if versus_ms else None
    return {"model": name, "ort_ms": ort_med, "ours_ms": ours_med, "ratio": ours_med / ort_med,
            "versus_ms": versus_med, "versus_ratio": ours_med / versus_med if versus_med else None,
            "rel_l2": err, "layers": len(model.layers), "peak_device_bytes": stats.get("peak_device_bytes", 0),
            "intermediate_bytes": stats.get("intermediate_bytes", 0),
            "lower_bound_bytes": stats.get("intermediate_lower_bound_bytes", 0),
            "weight_bytes": stats.get("weight_bytes", 0), "fallback": len(stats.get("fallback_layers", [])),
            "encode_us_per_layer": encode_us}


def blas_description() -> str:
    """numpy's BLAS and the kernels it runs (OpenBLAS picks them per CPU unless OPENBLAS_CORETYPE pins
    them): products run at about twice the speed on AVX-512 kernels as on Haswell's (AVX2)."""
    try:
        from threadpoolctl import threadpool_info

        for info in threadpool_info():
            if info.get("user_api") == "blas":
                return f"{info.get('internal_api')} {info.get('version')} ({info.get('architecture')} kernels)"
    except Exception:  # threadpoolctl missing: say so rather than fail the benchmark
        pass
    return "BLAS unknown"


def matmul_gflops(backend: str, size: int = 1024, chain: int = 8, runs: int = 5) -> float:
    """GFLOP/s of the MatMul kernel: a chain of ``chain`` (size x size) products per run, so the one
    upload and download per run are small next to the arithmetic."""
    return matmul_gflops_alternating([backend], size, chain, runs)[backend]


def matmul_gflops_alternating(backends: list[str], size: int = 1024, chain: int = 8, runs: int = 5) -> dict:
    """``matmul_gflops`` of several backends, their runs alternating in this process."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((size, size)) / np.sqrt(size)).astype(np.float32)
    nodes = [helper.make_node("MatMul", [f"t{i}", "w"], [f"t{i + 1}"], name=f"mm{i}") for i in range(chain)]
    graph = helper.make_graph(nodes, "matmul_chain",
                              [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [size, size])],
                              [helper.make_tensor_value_info(f"t{chain}", TensorProto.FLOAT, [size, size])],
                              [numpy_helper.from_array(w, "w")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    onnx.checker.check_model(proto)
    x = rng.standard_normal((size, size)).astype(np.float32)
    workers = {b: ws.Worker(ws.load_model(proto), b, threads=2) for b in backends}
    times: dict[str, list[float]] = {b: [] for b in backends}
    try:
        for worker in workers.values():
            worker.run({"t0": x})
        for _ in range(runs):
            for b, worker in workers.items():
                t0 = time.perf_counter()
                worker.run({"t0": x})
                times[b].append(time.perf_counter() - t0)
    finally:
        for worker in workers.values():
            worker.close()
    return {b: 2 * size**3 * chain / statistics.median(t) / 1e9 for b, t in times.items()}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--generate" in argv:
        import bench_generate

        return bench_generate.main([a for a in argv if a != "--generate"])
    if "--sizes" in argv:
        import bench_sizes

        return bench_sizes.main([a for a in argv if a != "--sizes"])
    if "--ray" in argv:
        import bench_ray

        return bench_ray.main([a for a in argv if a != "--ray"])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--models", help="comma-separated subset of: " + ",".join(zoo.ALL_MODELS))
    parser.add_argument("--shipped", action="store_true", help="zoo light models as shipped (default: densified)")
    parser.add_argument("--precision", default="float32", help="gpu-compute weights: float32 | float16")
    parser.add_argument("--no-spin-wait", action="store_true",
                        help="cpu: wgsentis's own blocking threads instead of BLAS's spin-waiting ones")
    parser.add_argument("--markdown", help="append the table to this Markdown file")
    parser.add_argument("--matmul", action="store_true", help="also measure MatMul 1024^3 GFLOP/s (always on GPU)")
    parser.add_argument("--versus", help="another backend run alternately, with ratios against it (default: "
                        "gpu-compute for --backend gpu-pixel)")
    args = parser.parse_args(argv)
    versus = args.versus or ("gpu-compute" if args.backend == "gpu-pixel" else None)
    names = args.models.split(",") if args.models else zoo.ALL_MODELS
    unknown = [n for n in names if n not in zoo.ALL_MODELS]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {zoo.ALL_MODELS}")
    rows = []
    gpu = args.backend.startswith("gpu-")
    header = f"{'model':<14} {'ORT ms':>9} {'wgsentis ms':>12} {'ratio':>7} {'rel L2':>9}"
    if versus:
        header += f" {versus + ' ms':>16} {'vs ' + versus:>15}"
    if gpu:
        header += f" {'fallbk':>6} {'us/layer':>8} {'interm. MB':>10} {'bound MB':>9} {'weights MB':>10}"
    mode = "blocking threads" if args.no_spin_wait else "spin-wait"
    print(f"backend {args.backend} ({args.precision}), threads {args.threads} ({mode}), {args.runs} runs (median), "
          f"{'shipped' if args.shipped else 'densified'} light models, numpy BLAS: {blas_description()}")
    print(header)
    for name in names:
        row = bench_model(name, args.backend, args.threads, args.runs, args.warmup, dense=not args.shipped,
                          precision=args.precision, spin_wait=not args.no_spin_wait, versus=versus)
        rows.append(row)
        line = (f"{name:<14} {row['ort_ms']:>9.2f} {row['ours_ms']:>12.2f} {row['ratio']:>7.2f} "
                f"{row['rel_l2']:>9.1e}")
        if versus:
            line += f" {row['versus_ms']:>16.2f} {row['versus_ratio']:>15.2f}"
        if gpu:
            line += (f" {row['fallback']:>6} {row['encode_us_per_layer']:>8.1f}"
                     f" {row['intermediate_bytes'] / 2**20:>10.1f} {row['lower_bound_bytes'] / 2**20:>9.1f}"
                     f" {row['weight_bytes'] / 2**20:>10.1f}")
        print(line, flush=True)
    geomean = float(np.exp(np.mean(np.log([r["ratio"] for r in rows]))))
    print(f"geometric mean ratio (wgsentis / ORT): {geomean:.2f}")
    versus_geomean = None
    if versus:
        versus_geomean = float(np.exp(np.mean(np.log([r["versus_ratio"] for r in rows]))))
        print(f"geometric mean latency ratio ({args.backend} / {versus}): {versus_geomean:.2f}")
    gflops = versus_gflops = None
    if gpu or args.matmul:
        measured = matmul_gflops_alternating([args.backend, versus] if versus else [args.backend])
        gflops = measured[args.backend]
        print(f"MatMul 1024^3 on {args.backend}: {gflops:.1f} GFLOP/s")
        if versus:
            versus_gflops = measured[versus]
            print(f"MatMul 1024^3 on {versus}: {versus_gflops:.1f} GFLOP/s; {args.backend} / {versus}: "
                  f"{gflops / versus_gflops:.2f}x")
    if args.markdown:
        import onnxruntime

        lines = [
            f"\n## {args.backend}, {args.precision}, threads={args.threads} ({time.strftime('%Y-%m-%d')})\n",
            f"Machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}, "
            f"onnxruntime {onnxruntime.__version__}, numpy BLAS {blas_description()}, {args.runs} runs (median ms), "
            f"{'shipped' if args.shipped else 'densified'} light models. "
            f"Command: `python tools/bench.py --backend {args.backend} --precision {args.precision} "
            f"--threads {args.threads} --runs {args.runs}{' --no-spin-wait' if args.no_spin_wait else ''}`\n",
            "| model | ORT ms | wgsentis ms | ratio | rel L2 |", "|---|---:|---:|---:|---:|",
        ]
        if gpu:
            lines[-2] = ("| model | ORT ms | wgsentis ms | ratio | rel L2 | fallback layers | host us/layer "
                         "| intermediates MB | lower bound MB | weights MB |")
            lines[-1] = "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
            lines += [f"| {r['model']} | {r['ort_ms']:.2f} | {r['ours_ms']:.2f} | {r['ratio']:.2f} "
                      f"| {r['rel_l2']:.1e} | {r['fallback']} | {r['encode_us_per_layer']:.1f} "
                      f"| {r['intermediate_bytes'] / 2**20:.1f} "
                      f"| {r['lower_bound_bytes'] / 2**20:.1f} | {r['weight_bytes'] / 2**20:.1f} |" for r in rows]
            lines.append(f"| **geometric mean** | | | **{geomean:.2f}** | | | | | | |\n")
        else:
            lines += [f"| {r['model']} | {r['ort_ms']:.2f} | {r['ours_ms']:.2f} | {r['ratio']:.2f} "
                      f"| {r['rel_l2']:.1e} |" for r in rows]
            lines.append(f"| **geometric mean** | | | **{geomean:.2f}** | |\n")
        if versus_geomean is not None:
            lines.append(f"Per model {args.backend} / {versus} latency (alternating runs): "
                         + ", ".join(f"{r['model']} {r['versus_ratio']:.2f}" for r in rows)
                         + f"; geometric mean **{versus_geomean:.2f}**.\n")
        if gflops is not None:
            lines.append(f"MatMul 1024^3 on {args.backend}: **{gflops:.1f} GFLOP/s**.\n")
        if versus_gflops is not None:
            lines.append(f"MatMul 1024^3 on {versus}: **{versus_gflops:.1f} GFLOP/s** (alternating); "
                         f"{args.backend} / {versus}: **{gflops / versus_gflops:.2f}x**.\n")
        with open(args.markdown, "a") as fh:
            fh.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
