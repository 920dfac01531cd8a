"""Benchmark: what a new input size costs on the GPU backends, against a replay of a size already seen
(``python tools/bench.py --sizes``; issue 31).

A real OCR pipeline feeds its recognizer text lines of ever new widths and its detector pages of a few sizes: each
new size records a new plan (shapes re-derived, buffers laid out, maybe pipelines compiled for size-dependent
variants), where a size seen before only replays its plan. Per model and GPU backend the sweep

- runs one other size first (``seen``), so that the pipelines of the model's structure exist: what follows measures
  a size-only change, not the model's first compile (that cold run's time is printed beside);
- then, per size: times the first run at that size (``new``), counts the pipelines it built
  (``stats()["pipelines_created"]`` before and after: the program's own, the process-wide cache's hits apart), times
  ``--sizes-runs`` replays (their median: ``replay``) and checks every output against ONNX Runtime (CPU), relative
  L2 <= 1e-3 as shared/MODELS.md asks (a Sigmoid output against the exact sigmoid of ORT's logits, as the reference
  model tests do), printing the largest absolute error, and the host side of the new-size run and of a replay
  (``stats()["run"]["encode_ms"]``: recording, pipeline builds) beside their wall time.

Two caches outlive one sweep and shape what it sees. The pipeline cache is the process's (one per device): a
sweep's cold run builds only what an earlier sweep of the process left unbuilt. And lavapipe (Mesa) keeps compiled
shaders in its on-disk cache across processes, as GPU drivers commonly do: a pipeline ``pipelines_created`` counts is
a build for wgsentis every time, but after an earlier run of the bench it is cheap for the driver, so the first run
on a machine shows the full compile cost of a new size and later runs much less of it.

Models: a BERT-style encoder (``bert_encoder``: tools/decoders.py's ``export_bert``, 4 layers 256 wide, ids and a
mask 1xS at ``--sizes-widths`` lengths from 9 to 128, the last fifth padding: a batch padded to its longest sentence,
the attention stack a new length each call), PP-OCRv4 rec (catalog ``ppocrv4_rec``, input 1x3x48xW at
``--sizes-widths`` widths from 160 to 800, multiples of 8) and the PP-OCRv4 detector (catalog ``ppocrv4_det``, the
reference model ``ppocr_det``'s file, at 320x320, 480x640 and 640x640). ``--quick``: 4 widths and lengths and the
two smaller detector sizes.

    python tools/bench.py --sizes [--sizes-models bert_encoder,ppocrv4_rec,ppocrv4_det]
                                  [--backends gpu-compute,gpu-pixel]
                                  [--sizes-widths 20] [--sizes-runs 3] [--quick] [--threads 2]
                                  [--markdown BENCHMARKS.md]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import decoders
import onnx
import zoo

import wgsentis as ws

REL_L2_TOLERANCE = 1e-3  # shared/MODELS.md's bar per output
REC_WIDTH_RANGE = (160, 800)
REC_SEEN = (1, 3, 48, 128)  # outside the swept range: no swept size is a replay of it
DET_SEEN = (1, 3, 256, 256)
DET_SIZES = [(1, 3, 320, 320), (1, 3, 480, 640), (1, 3, 640, 640)]
ENCODER_LENGTH_RANGE = (9, 128)  # the BERT-style encoder's sequence lengths (tools/decoders.py export_bert)
ENCODER_SEEN = (1, 7)
QUICK_WIDTHS = 4
QUICK_DET_SIZES = 2


@dataclass(frozen=True)
class Sweep:
    """One model's sizes: ``seen`` is run first (the structure compiled), then each of ``sizes`` is new."""

    model: str  # catalog name (tools/fetch_models.CATALOG), or "bert_encoder" (tools/decoders.py)
    seen: tuple[int, ...]
    sizes: list[tuple[int, ...]]

    @property
    def tokens(self) -> bool:
        """Whether the model takes token ids and a mask (batch, seq) instead of one image."""
        return self.model == "bert_encoder"


@dataclass
class SizeResult:
    shape: tuple[int, ...]
    new_ms: float = float("nan")
    replay_ms: float = float("nan")
    pipelines_created: int = 0  # by the new-size run
    new_encode_ms: float = float("nan")  # its host side (stats()["run"]["encode_ms"]): recording and compiling
    replay_encode_ms: float = float("nan")  # the last replay's
    max_abs_error: float = float("nan")
    rel_l2: float = float("nan")
    error: str | None = None  # the run's exception, when it raised

    @property
    def ratio(self) -> float:
        return self.new_ms / self.replay_ms

    @property
    def matched(self) -> bool:
        return self.error is None and self.rel_l2 <= REL_L2_TOLERANCE


@dataclass
class SweepResult:
    model: str
    backend: str
    cold_ms: float  # the ``seen`` size's first run: the structure's own compile
    cold_pipelines: int
    sizes: list[SizeResult] = field(default_factory=list)

    @property
    def measured(self) -> list[SizeResult]:
        return [s for s in self.sizes if s.error is None]

    @property
    def matched(self) -> bool:
        return all(s.matched for s in self.sizes)


def rec_widths(count: int, low: int = REC_WIDTH_RANGE[0], high: int = REC_WIDTH_RANGE[1]) -> list[int]:
    """``count`` distinct widths spread evenly over [low, high], each rounded to a multiple of 8 (the recognizer
    downsamples the width by 8); not all multiples of 32, as real text lines are not."""
    widths = sorted({int(w) for w in np.rint(np.linspace(low, high, count) / 8).astype(int) * 8})
    if len(widths) != count:
        raise ValueError(f"{count} widths do not fit distinct multiples of 8 in [{low}, {high}]")
    return widths


def encoder_lengths(count: int, low: int = ENCODER_LENGTH_RANGE[0], high: int = ENCODER_LENGTH_RANGE[1]) -> list[int]:
    """``count`` distinct sequence lengths spread evenly over [low, high], as a batch padded to its longest
    sentence gives them (any length, most not a multiple of 4)."""
    lengths = sorted({int(n) for n in np.rint(np.linspace(low, high, count))})
    if len(lengths) != count:
        raise ValueError(f"{count} lengths do not fit distinct integers in [{low}, {high}]")
    return lengths


def sweeps(models: list[str], widths: int, det_sizes: int) -> list[Sweep]:
    known = {"ppocrv4_rec": Sweep("ppocrv4_rec", REC_SEEN, [(1, 3, 48, w) for w in rec_widths(widths)]),
             "ppocrv4_det": Sweep("ppocrv4_det", DET_SEEN, DET_SIZES[:det_sizes]),
             "bert_encoder": Sweep("bert_encoder", ENCODER_SEEN, [(1, n) for n in encoder_lengths(widths)])}
    unknown = [m for m in models if m not in known]
    if unknown:
        raise SystemExit(f"bench_sizes: no sweep for {', '.join(unknown)}; choose from {', '.join(known)}")
    return [known[m] for m in models]


def _feeds(input_name: str, shape: tuple[int, ...], tokens: bool = False) -> dict[str, np.ndarray]:
    """The inputs of one size, seeded per size so that each size's reference is its own: shared/MODELS.md's
    image in [0, 1), or (``tokens``) ids and a mask whose last fifth is padding."""
    rng = np.random.default_rng(sum(shape))
    if not tokens:
        return {input_name: rng.random(shape, dtype=np.float32)}
    mask = np.ones(shape, np.int64)
    mask[..., shape[-1] - shape[-1] // 5:] = 0
    return {"input_ids": rng.integers(3, decoders.ENCODER_CONFIG.vocab, shape, dtype=np.int64),
            "attention_mask": mask}


def _timed_run(worker: ws.Worker, feeds: dict[str, np.ndarray]) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    outputs = worker.run(feeds)
    return (time.perf_counter() - started) * 1e3, outputs


def _compare(outputs: dict[str, Any], reference: dict[str, np.ndarray]) -> tuple[float, float]:
    """(largest absolute error, largest relative L2 error) over the outputs."""
    abs_error = max(float(np.max(np.abs(np.asarray(outputs[n], np.float64) - r))) for n, r in reference.items())
    rel = max(zoo.rel_l2(outputs[n], r) for n, r in reference.items())
    return abs_error, rel


def run_sweep(sweep: Sweep, backend: str, model: ws.Model, input_name: str,
              references: dict[tuple[int, ...], dict[str, np.ndarray]], runs: int, threads: int,
              report: Any = print) -> SweepResult:
    """The sweep on one backend, a fresh worker; ``report`` gets one line per size as it is measured."""
    worker = ws.Worker(model, backend, threads=threads, prepare_ahead=False)  # (every new size measured as one)
    try:
        cold_ms, _ = _timed_run(worker, _feeds(input_name, sweep.seen, sweep.tokens))
        result = SweepResult(sweep.model, backend, cold_ms, worker.stats()["pipelines_created"])
        report(f"  {sweep.model} {backend}: seen {_size(sweep.seen)} cold {cold_ms:.0f} ms, "
               f"{result.cold_pipelines} pipelines")
        for shape in sweep.sizes:
            size = SizeResult(shape)
            result.sizes.append(size)
            feeds = _feeds(input_name, shape, sweep.tokens)
            try:
                before = worker.stats()["pipelines_created"]
                size.new_ms, outputs = _timed_run(worker, feeds)
                stats = worker.stats()
                size.pipelines_created = stats["pipelines_created"] - before
                size.new_encode_ms = stats["run"]["encode_ms"]
                errors = [_compare(outputs, references[shape])]
                replays = []
                for _ in range(runs):
                    elapsed, outputs = _timed_run(worker, feeds)
                    replays.append(elapsed)
                    errors.append(_compare(outputs, references[shape]))
                size.replay_ms = statistics.median(replays)
                size.replay_encode_ms = worker.stats()["run"]["encode_ms"]
                size.max_abs_error = max(e[0] for e in errors)
                size.rel_l2 = max(e[1] for e in errors)
            except Exception as exc:  # a size the engine fails on is a finding of the bench, not its end
                size.error = f"{type(exc).__name__}: {str(exc)[:300]}"
                report(f"    {_size(shape):>8} FAILED {size.error}")
                continue
            report(f"    {_size(shape):>8} new {size.new_ms:8.0f} ms  replay {size.replay_ms:7.1f} ms  "
                   f"x{size.ratio:6.1f}  {size.pipelines_created:3d} pipelines  max abs err {size.max_abs_error:.1e}  "
                   f"rel L2 {size.rel_l2:.1e}  encode {size.new_encode_ms:.0f} ms (replay "
                   f"{size.replay_encode_ms:.0f} ms)"
                   f"{'' if size.matched else '  DIFFERS from ORT'}")
        return result
    finally:
        worker.close()


def references_of(proto: onnx.ModelProto, input_name: str, shapes: list[tuple[int, ...]],
                  threads: int, tokens: bool = False) -> dict[tuple[int, ...], dict[str, np.ndarray]]:
    """ORT CPU's outputs per shape. A Sigmoid output is the exact float64 sigmoid of ORT's logits instead
    (tests/models/test_reference_models.py): ORT's logistic is a rational approximation 0.2% off in the far tail,
    where the PP-OCR detector's whole map lies on random input."""
    sigmoids = {out: logits for out, (op, logits, _attrs) in zoo.final_activation_logits(proto).items()
                if op == "Sigmoid"}
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 1)
    session = zoo.ort_session(zoo.with_outputs(proto, sorted(set(sigmoids.values()))), threads)
    names = [o.name for o in session.get_outputs()]
    outputs = [o.name for o in proto.graph.output]
    references = {}
    for shape in shapes:
        ran = dict(zip(names, session.run(names, _feeds(input_name, shape, tokens)), strict=True))
        references[shape] = {out: zoo.exact_activation("Sigmoid", ran[sigmoids[out]], {}, opset) if out in sigmoids
                             else ran[out] for out in outputs}
    return references


def bench(models: list[str], backends: list[str], widths: int, det_sizes: int, runs: int, threads: int,
          report: Any = print) -> list[SweepResult]:
    results = []
    for sweep in sweeps(models, widths, det_sizes):
        path = decoders.export_bert() if sweep.tokens else zoo.catalog_path(sweep.model)
        proto = onnx.load(str(path))
        input_name = proto.graph.input[0].name
        # Every reference before any GPU run: ORT's spinning pool never runs beside lavapipe's threads.
        references = references_of(proto, input_name, sweep.sizes, threads, sweep.tokens)
        model = ws.load_model(proto, name=sweep.model)
        for backend in backends:
            results.append(run_sweep(sweep, backend, model, input_name, references, runs, threads, report))
    return results


def _size(shape: tuple[int, ...]) -> str:
    return f"{shape[-2]}x{shape[-1]}"


def _sizes_span(sizes: list[SizeResult]) -> str:
    return f"{len(sizes)}: {_size(sizes[0].shape)}..{_size(sizes[-1].shape)}" if sizes else "0"


def summary_row(result: SweepResult) -> dict[str, Any]:
    measured = result.measured
    ratios = [s.ratio for s in measured]
    pipelines = [s.pipelines_created for s in measured]
    return {"model": result.model, "backend": result.backend, "sizes": _sizes_span(result.sizes),
            "failed": len(result.sizes) - len(measured), "cold_ms": result.cold_ms,
            "new_ms": statistics.median(s.new_ms for s in measured) if measured else float("nan"),
            "replay_ms": statistics.median(s.replay_ms for s in measured) if measured else float("nan"),
            "worst_ratio": max(ratios, default=float("nan")),
            "median_ratio": statistics.median(ratios) if ratios else float("nan"),
            "pipelines_median": statistics.median(pipelines) if pipelines else float("nan"),
            "pipelines_max": max(pipelines, default=0),
            "max_abs_error": max((s.max_abs_error for s in measured), default=float("nan")),
            "max_rel_l2": max((s.rel_l2 for s in measured), default=float("nan")),
            "matched": result.matched}


def summary_line(results: list[SweepResult]) -> str:
    ratios = [s.ratio for r in results for s in r.measured]
    if not ratios:
        return "no size was measured"
    geomean = float(np.exp(np.mean(np.log(ratios))))
    return (f"a new size costs {statistics.median(ratios):.1f}x a replay (median over {len(ratios)} size changes of "
            f"{len(results)} model/backend sweeps; geometric mean {geomean:.1f}x, worst {max(ratios):.1f}x)")


HEADER = (f"{'model':<12} {'backend':<12} {'sizes':<20} {'cold ms':>8} {'new ms':>8} {'replay ms':>9} "
          f"{'worst x':>8} {'median x':>8} {'pipelines/size':>14} {'max abs err':>11} {'rel L2':>7} {'ORT':>6}")


def _sizes_cell(row: dict[str, Any]) -> str:
    return row["sizes"] + (f", {row['failed']} failed" if row["failed"] else "")


def format_row(row: dict[str, Any]) -> str:
    pipelines = f"{row['pipelines_median']:g} (max {row['pipelines_max']})"
    verdict = "same" if row["matched"] else "DIFFER"
    return (f"{row['model']:<12} {row['backend']:<12} {_sizes_cell(row):<20} {row['cold_ms']:>8.0f} "
            f"{row['new_ms']:>8.0f} {row['replay_ms']:>9.1f} {row['worst_ratio']:>8.1f} {row['median_ratio']:>8.1f} "
            f"{pipelines:>14} {row['max_abs_error']:>11.1e} {row['max_rel_l2']:>7.0e} {verdict:>6}")


def markdown_lines(rows: list[dict[str, Any]], summary: str, command: str) -> list[str]:
    lines = [f"\n## New input size against replay, GPU backends ({time.strftime('%Y-%m-%d')})\n",
             f"Command: `{command}`\n",
             "| model | backend | sizes | cold ms | new-size ms (median) | replay ms (median) "
             "| worst new/replay | median new/replay | pipelines per size change (median, max) "
             "| max abs error vs ORT | max rel L2 | outputs |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    lines += [f"| {r['model']} | {r['backend']} | {_sizes_cell(r)} "
              f"| {r['cold_ms']:.0f} | {r['new_ms']:.0f} | {r['replay_ms']:.1f} | {r['worst_ratio']:.1f} "
              f"| {r['median_ratio']:.1f} | {r['pipelines_median']:g}, {r['pipelines_max']} | {r['max_abs_error']:.1e} "
              f"| {r['max_rel_l2']:.0e} | {'same as ORT' if r['matched'] else 'DIFFER'} |" for r in rows]
    return [*lines, "", summary]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes-models", default="bert_encoder,ppocrv4_rec,ppocrv4_det")
    parser.add_argument("--backends", default="gpu-compute,gpu-pixel")
    parser.add_argument("--sizes-widths", type=int, default=20,
                        help="recognizer widths and encoder lengths (default 20)")
    parser.add_argument("--sizes-runs", type=int, default=3, help="replays per size, their median is the replay")
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_WIDTHS} widths and the {QUICK_DET_SIZES} smaller detector sizes")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--markdown", help="append the table to this Markdown file")
    args = parser.parse_args(argv)
    widths = QUICK_WIDTHS if args.quick else args.sizes_widths
    det_sizes = QUICK_DET_SIZES if args.quick else len(DET_SIZES)
    models = args.sizes_models.split(",")
    backends = args.backends.split(",")
    print(f"New input size against replay: {', '.join(models)} on {', '.join(backends)}, {widths} rec widths and "
          f"encoder lengths, {det_sizes} det sizes, {args.sizes_runs} replays per size, threads {args.threads}",
          flush=True)
    results = bench(models, backends, widths, det_sizes, args.sizes_runs, args.threads,
                    report=lambda line: print(line, flush=True))
    rows = [summary_row(r) for r in results]
    summary = summary_line(results)
    print(HEADER)
    for row in rows:
        print(format_row(row))
    print(summary)
    if args.markdown:
        command = (f"python tools/bench.py --sizes --sizes-models {args.sizes_models} --backends {args.backends} "
                   f"--sizes-runs {args.sizes_runs} " + ("--quick" if args.quick else f"--sizes-widths {widths}"))
        with open(args.markdown, "a") as fh:
            fh.write("\n".join(markdown_lines(rows, summary, command)) + "\n")
    return 0 if all(r.matched for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
