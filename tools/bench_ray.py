"""Benchmark: batch scoring on Ray Data with ``wgsentis.batch`` (``python tools/bench.py --ray``).

Scores ``--rows`` inputs of a model (default: the document orientation classifier, PP-LCNet on 3x224x224
pages, the kind of model a document pipeline scores by the million) on a local Ray instance with 1 and with 2
actors, alternating over ``--rounds``, and, as the floor, with one Predictor in this process and no Ray. Prints
the median rows/s of each, the 2-actor / 1-actor speed-up and Ray's cost against the in-process Predictor;
outputs are checked equal to the in-process ones. Rates are over the scoring span (the first batch's start to
the last one's end, across actors); the whole run's, the actors' start (a model load each) included, is printed
beside them.

    python tools/bench.py --ray [--model orientation | ppocr_cls | sample | PATH] [--backend cpu] [--rows 2000]
                                [--batch-size 100] [--rounds 2] [--markdown BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import wgsentis as ws
from wgsentis.batch import Predictor

SAMPLE = Path(__file__).resolve().parent.parent / "wgsentis" / "data" / "sample.onnx"


def load(name: str) -> tuple[ws.Model, str, tuple[int, ...]]:
    """The model, its input name and one sample's shape (without the batch dim)."""
    if name == "sample":
        model = ws.load_model(SAMPLE)
    elif name.endswith(".onnx"):
        model = ws.load_model(name)
    else:
        import zoo

        model = ws.load_model(zoo.load_proto(name))
    info = model.inputs[0]
    shape = tuple(int(d) if isinstance(d, int) else 1 for d in info.shape[1:])
    return model, info.name, shape


class TimedPredictor(Predictor):
    """The Predictor with each batch's wall-clock start and end as columns: the scoring span across actors."""

    def __call__(self, batch):
        start = time.time()
        result = super().__call__(batch)
        rows = len(result["id"])
        result["started"], result["ended"] = np.full(rows, start), np.full(rows, time.time())
        return result


def score_with_ray(ray, model: ws.Model, column: str, samples: np.ndarray, actors: int, backend: str,
                   batch_size: int) -> tuple[float, float, np.ndarray]:
    """Seconds to score every sample with ``actors`` actors, actor start included and (first batch's start to
    last batch's end) not, and the outputs in row order."""
    rows = [{"id": i, column: samples[i]} for i in range(len(samples))]
    dataset = ray.data.from_items(rows, override_num_blocks=max(8, 4 * actors))
    start = time.perf_counter()
    scored = dataset.map_batches(TimedPredictor, fn_constructor_args=(model,),
                                 fn_constructor_kwargs={"backend": backend, "threads": 1, "keep_columns": ["id"]},
                                 batch_size=batch_size, batch_format="numpy",
                                 compute=ray.data.ActorPoolStrategy(size=actors), num_cpus=1).take_all()
    seconds = time.perf_counter() - start
    span = max(r["ended"] for r in scored) - min(r["started"] for r in scored)
    first = next(name for name in scored[0] if name not in ("id", "started", "ended"))
    ordered = sorted(scored, key=lambda r: r["id"])
    return seconds, span, np.stack([r[first] for r in ordered])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="orientation", help="a reference model's name, 'sample' or an .onnx path")
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--markdown", help="append the table to this Markdown file")
    args = parser.parse_args(argv)
    try:
        import ray
    except ImportError:
        parser.error("Ray Data is not installed: pip install 'wgsentis[ray]'")
    model, column, shape = load(args.model)
    samples = np.random.default_rng(0).random((args.rows, *shape), dtype=np.float32)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # TimedPredictor travels to the actors
    ray.data.DataContext.get_current().wait_for_min_actors_s = 600
    ray.data.DataContext.get_current().enable_progress_bars = False
    times: dict[str, list[float]] = {"in process": [], "1 actor": [], "2 actors": []}
    spans: dict[str, list[float]] = {"in process": [], "1 actor": [], "2 actors": []}
    try:
        for _ in range(args.rounds):
            start = time.perf_counter()
            predictor = Predictor(model, args.backend, threads=1)
            local = np.concatenate([next(iter(predictor({column: samples[i:i + args.batch_size]}).values()))
                                    for i in range(0, args.rows, args.batch_size)])
            predictor.close()
            times["in process"].append(time.perf_counter() - start)
            spans["in process"].append(times["in process"][-1])
            for actors in (1, 2):
                seconds, span, got = score_with_ray(ray, model, column, samples, actors, args.backend,
                                                    args.batch_size)
                np.testing.assert_allclose(got, local, rtol=1e-5, atol=1e-6, err_msg=f"{actors} actor(s)")
                key = f"{actors} actor" + ("s" if actors > 1 else "")
                times[key].append(seconds)
                spans[key].append(span)
    finally:
        ray.shutdown()
    rate = {k: args.rows / statistics.median(v) for k, v in spans.items()}
    wall = {k: args.rows / statistics.median(v) for k, v in times.items()}
    print(f"{args.model} on {args.backend}, {args.rows} rows, batch {args.batch_size}, {args.rounds} rounds "
          f"(median), {os.cpu_count()} cores, Ray {ray.__version__}, 1 thread per Predictor")
    print(f"{'run':<11} {'rows/s scoring':>15} {'rows/s with start':>18}")
    for key in rate:
        print(f"{key:<11} {rate[key]:>15.1f} {wall[key]:>18.1f}")
    speedup = rate["2 actors"] / rate["1 actor"]
    print(f"2 actors / 1 actor: {speedup:.2f}x; 1 actor / in process: {rate['1 actor'] / rate['in process']:.2f}x "
          "(scoring spans, the actors' start left out)")
    if args.markdown:
        lines = [f"\n## Ray Data batch scoring, {args.model} on {args.backend} ({time.strftime('%Y-%m-%d')})\n",
                 f"Command: `python tools/bench.py --ray --model {args.model} --backend {args.backend} --rows "
                 f"{args.rows} --batch-size {args.batch_size} --rounds {args.rounds}`; {os.cpu_count()} cores, "
                 f"Ray {ray.__version__}. Scoring: first batch's start to last batch's end; with start: the whole "
                 "map_batches, actors' start (a model load each) included.\n",
                 "| run | rows/s scoring | rows/s with start |", "|---|---:|---:|"]
        lines += [f"| {k} | {rate[k]:.1f} | {wall[k]:.1f} |" for k in rate]
        lines.append(f"\n2 actors / 1 actor: **{speedup:.2f}x**; 1 actor / in process: "
                     f"**{rate['1 actor'] / rate['in process']:.2f}x**.\n")
        with open(args.markdown, "a") as fh:
            fh.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
