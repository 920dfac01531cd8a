"""Developer tool: soak a worker with many runs of varying input shapes and check that memory stays flat.

Runs a model with symbolic dims (the built-in sample, batch symbolic; or ``--model convnet``, a small conv net
made here with batch, height and width symbolic) ``--runs`` times on each ``--backend``, cycling through the
``--shapes``. After a warm-up that runs every shape a few times (plans are recorded once per input signature,
pipelines once per process, so the first runs of each shape allocate for good), it samples the process RSS
(VmRSS in /proc/self/status) and the GPU objects alive (wgpu-py's ``diagnostics.object_counts``: buffers,
textures, bind groups ... and their bytes; plus the program's own plans, pooled buffers and constants), then
again every ``--every`` runs and at the end. Exit status 1 when the RSS or any GPU count grew more than
``--tolerance`` (5%) past the warm-up sample; a summary is printed either way.

    python tools/soak.py [--backend cpu,gpu-compute] [--runs 10000] [--model sample|convnet]
                         [--shapes 1,2,3,4 | --shapes 1x32x32,2x24x40] [--warmup 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import wgsentis as ws  # noqa: E402


def rss_bytes() -> int:
    """This process's resident set size (VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status (soak needs Linux)")


def convnet() -> ws.Model:
    """Conv-BN-Relu, a depthwise conv, max pool, global pool, Gemm, Softmax; batch, height and width symbolic."""
    rng = np.random.default_rng(0)
    inits = {"w1": rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.2,
             "s": np.ones(8, np.float32), "b": np.zeros(8, np.float32), "m": np.zeros(8, np.float32),
             "v": np.ones(8, np.float32), "w2": rng.standard_normal((8, 1, 3, 3)).astype(np.float32) * 0.2,
             "fc": rng.standard_normal((5, 8)).astype(np.float32), "fcb": np.zeros(5, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("BatchNormalization", ["c1", "s", "b", "m", "v"], ["n1"], name="bn"),
             helper.make_node("Relu", ["n1"], ["r1"], name="relu"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], group=8, name="dwconv"),
             helper.make_node("MaxPool", ["c2"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
             helper.make_node("GlobalAveragePool", ["p"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc", "fcb"], ["logits"], transB=1, name="fc"),
             helper.make_node("Softmax", ["logits"], ["y"], axis=1, name="softmax")]
    graph = helper.make_graph(nodes, "convnet",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "height", "width"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 5])],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return ws.load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), name="convnet")


def model_and_shapes(name: str, spec: str | None) -> tuple[ws.Model, list[tuple[int, ...]]]:
    """The model to soak and its input shapes: ``spec`` lists batch sizes (sample) or BxHxW (convnet)."""
    if name == "sample":
        model = ws.load_model(ROOT / "wgsentis" / "data" / "sample.onnx")
        batches = [int(b) for b in (spec or "1,2,3,4").split(",")]
        return model, [(b, 3, 32, 32) for b in batches]
    if name == "convnet":
        shapes = []
        for item in (spec or "1x16x16,2x24x20,1x32x32,3x8x12").split(","):
            b, h, w = (int(v) for v in item.split("x"))
            shapes.append((b, 3, h, w))
        return convnet(), shapes
    raise SystemExit(f"unknown --model '{name}': sample or convnet")


def gpu_counts(worker: ws.Worker) -> dict[str, int]:
    """GPU objects alive: wgpu-py's counts per type and their bytes, and the program's plans, pool and constants."""
    counts: dict[str, int] = {}
    try:
        import wgpu

        for kind, entry in wgpu.diagnostics.object_counts.get_dict().items():
            if kind != "total" and entry.get("count"):
                counts[f"wgpu {kind}"] = int(entry["count"])
            if entry.get("resource_mem"):
                counts[f"wgpu {kind} bytes"] = int(entry["resource_mem"])
    except Exception:  # a wgpu without diagnostics: the program's own sizes still tell
        pass
    program = worker.program
    stats = program.stats()
    counts["plans"] = stats["cached_plans"]
    counts["plan bytes"] = stats["cached_plan_bytes"]
    counts["weight bytes"] = stats["weight_bytes"]
    counts["intermediate bytes"] = stats["intermediate_bytes"]
    return counts


@dataclass
class Sample:
    run: int
    seconds: float
    rss: int
    gpu: dict[str, int] = field(default_factory=dict)


@dataclass
class SoakResult:
    backend: str
    runs: int
    shapes: list[tuple[int, ...]]
    samples: list[Sample]
    tolerance: float
    growth: dict[str, float] = field(default_factory=dict)  # what grew past the tolerance: name -> ratio

    @property
    def ok(self) -> bool:
        return not self.growth


def sample(worker: ws.Worker, run: int, started: float, gpu: bool) -> Sample:
    gc.collect()
    return Sample(run, time.perf_counter() - started, rss_bytes(), gpu_counts(worker) if gpu else {})


def soak(model: ws.Model, shapes: list[tuple[int, ...]], backend: str, runs: int, warmup: int = 3,
         every: int = 1000, tolerance: float = 0.05, seed: int = 0) -> SoakResult:
    """Warm up (every shape ``warmup`` times), sample, run ``runs`` times cycling the shapes, sampling every
    ``every`` runs and at the end; a value counts as grown when its last sample exceeds the warm-up one by
    more than ``tolerance``."""
    rng = np.random.default_rng(seed)
    name = model.inputs[0].name
    feeds = [{name: rng.standard_normal(shape).astype(np.float32)} for shape in shapes]
    gpu = backend != "cpu"
    started = time.perf_counter()
    with ws.Worker(model, backend) as worker:
        for _ in range(warmup):
            for feed in feeds:
                worker.run(feed)
        samples = [sample(worker, 0, started, gpu)]
        for k in range(1, runs + 1):
            out = worker.run(feeds[k % len(feeds)])
            if k % every == 0 or k == runs:
                del out
                samples.append(sample(worker, k, started, gpu))
    return SoakResult(backend, runs, list(shapes), samples, tolerance, grown(samples[0], samples[-1], tolerance))


def grown(first: Sample, last: Sample, tolerance: float) -> dict[str, float]:
    """What grew more than ``tolerance`` from ``first`` to ``last``: name -> last / first (inf from zero)."""
    growth: dict[str, float] = {}
    values = [("rss", first.rss, last.rss), *((key, first.gpu.get(key, 0), value) for key, value in last.gpu.items())]
    for key, before, after in values:
        if after > before * (1 + tolerance):
            growth[key] = after / before if before else float("inf")
    return growth


def summary(result: SoakResult) -> str:
    """A few lines: time per run, RSS at the warm-up sample and after, GPU counts, and what grew."""
    first, last = result.samples[0], result.samples[-1]
    per_run = (last.seconds - first.seconds) / max(1, result.runs) * 1e3
    lines = [f"{result.backend}: {result.runs} runs over shapes {[list(s) for s in result.shapes]}, "
             f"{per_run:.2f} ms per run",
             f"  RSS after warm-up {first.rss / 2**20:.1f} MiB, at the end {last.rss / 2**20:.1f} MiB "
             f"({(last.rss / first.rss - 1) * 100:+.1f}%), peak sample "
             f"{max(s.rss for s in result.samples) / 2**20:.1f} MiB"]
    if last.gpu:
        changed = {k: (first.gpu.get(k, 0), v) for k, v in last.gpu.items() if first.gpu.get(k, 0) != v}
        alive = sum(v for k, v in last.gpu.items() if k.startswith("wgpu") and "bytes" not in k)
        lines.append(f"  GPU objects: {alive} alive; changed since warm-up: {changed or 'none'}")
    lines.append("  flat" if result.ok else
                 "  GREW past {:.0%}: {}".format(result.tolerance, ", ".join(f"{k} x{v:.3f}" for k, v in
                                                                            result.growth.items())))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="cpu,gpu-compute", help="comma-separated backends")
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--model", default="sample", choices=["sample", "convnet"])
    parser.add_argument("--shapes", default=None, help="batch sizes (sample: 1,2,3,4) or BxHxW (convnet)")
    parser.add_argument("--warmup", type=int, default=3, help="warm-up rounds over every shape")
    parser.add_argument("--every", type=int, default=1000, help="sample every N runs")
    parser.add_argument("--tolerance", type=float, default=0.05, help="allowed growth after warm-up")
    parser.add_argument("--json", type=Path, default=None, help="write the samples here")
    args = parser.parse_args(argv)
    if args.warmup < 2:
        parser.error("--warmup must be at least 2: the first run of a shape records its plan, the second replays it")
    model, shapes = model_and_shapes(args.model, args.shapes)
    results = []
    for backend in args.backend.split(","):
        result = soak(model, shapes, backend, args.runs, args.warmup, args.every, args.tolerance)
        print(summary(result), flush=True)
        results.append(result)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
