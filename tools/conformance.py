"""ONNX node conformance scoreboard: runs every in-process ONNX node test case through
``Worker(..., backend).run`` with each case's own tolerances, and writes ``docs/conformance.md``.

    python tools/conformance.py [--backend cpu] [--ops Conv,Relu] [--write] [--json F] [-v]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

import onnx
import onnx.numpy_helper
from onnx.backend.test.case.node import collect_testcases
from onnx.backend.test.runner import Runner

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import wgsentis as ws  # noqa: E402
from wgsentis.errors import UnsupportedOperatorError  # noqa: E402

_OP_NAMES = {s.name.lower(): s.name for s in onnx.defs.get_all_schemas_with_history()}


def case_op(case: Any) -> str:
    """The op a case tests: the single node's op, else the longest op name its test name starts with."""
    nodes = case.model.graph.node
    if len(nodes) == 1:
        return nodes[0].op_type
    tokens = case.name.removeprefix("test_").split("_")
    for n in range(len(tokens), 0, -1):
        joined = "".join(tokens[:n]).lower()
        if joined in _OP_NAMES:
            return _OP_NAMES[joined]
    return nodes[-1].op_type


def run_case(case: Any, backend: str, threads: int = 2) -> tuple[str, str, bool]:
    """Run one case; returns (status, detail, used_fallback) with status pass|fail|unsupported|error."""
    try:
        model = ws.load_model(case.model, name=case.name)
    except UnsupportedOperatorError as exc:
        return "unsupported", str(exc), False
    except Exception as exc:
        return "error", f"load: {type(exc).__name__}: {exc}", False
    fallback = False
    try:
        with ws.Worker(model, backend, threads=threads) as worker:
            for inputs, expected in case.data_sets:
                names = [i.name for i in case.model.graph.input]
                feeds = dict(zip(names, inputs, strict=False))
                feeds = {k: v for k, v in feeds.items() if k in {i.name for i in model.inputs}}
                got = worker.run(feeds)
                expected = [onnx.numpy_helper.to_array(e) if isinstance(e, onnx.TensorProto) else e
                            for e in expected]
                outputs = [got[o.name] for o in model.outputs]
                fallback = fallback or bool(worker.stats().get("fallback_layers"))
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    Runner.assert_similar_outputs(list(expected), outputs, rtol=case.rtol, atol=case.atol)
    except AssertionError as exc:
        return "fail", str(exc).strip().splitlines()[0][:300] if str(exc).strip() else "mismatch", fallback
    except Exception as exc:
        return "error", f"{type(exc).__name__}: {str(exc)[:300]}", fallback
    return "pass", "", fallback


def run_all(backend: str = "cpu", ops: set[str] | None = None, pattern: str | None = None,
            verbose: bool = False) -> dict[str, Any]:
    """Run the cases; returns a summary dict with per-op and per-case results."""
    cases = [c for c in collect_testcases() if c.kind == "node"]
    results: list[dict[str, Any]] = []
    started = time.perf_counter()
    for case in cases:
        op = case_op(case)
        if ops and op not in ops:
            continue
        if pattern and not re.search(pattern, case.name):
            continue
        t0 = time.perf_counter()
        status, detail, fallback = run_case(case, backend)
        results.append({"case": case.name, "op": op, "status": status, "detail": detail,
                        "fallback": fallback, "seconds": round(time.perf_counter() - t0, 4)})
        if verbose and status != "pass":
            print(f"{status:12s} {case.name}: {detail}")
    per_op: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in results:
        per_op[r["op"]][r["status"]] += 1
        if r["status"] == "pass" and not r["fallback"]:
            per_op[r["op"]]["pass_no_fallback"] += 1
    passed = sum(1 for r in results if r["status"] == "pass")
    return {
        "backend": backend, "total": len(results), "passed": passed,
        "passed_no_fallback": sum(1 for r in results if r["status"] == "pass" and not r["fallback"]),
        "seconds": round(time.perf_counter() - started, 1), "onnx": onnx.__version__,
        "per_op": {k: dict(v) for k, v in sorted(per_op.items())}, "cases": results,
    }


def write_markdown(summaries: list[dict[str, Any]], path: Path) -> None:
    """Write the scoreboard: totals per backend, then per op passed (and passed with no fallback layer),
    failed and unsupported, by backend."""
    lines = ["# ONNX node conformance", "",
             f"In-process cases of `onnx.backend.test.case.node.collect_testcases()` (onnx "
             f"{summaries[0]['onnx']}), each with its own tolerances, run through `Worker(..., backend).run`. "
             "A GPU case passes *without fallback* when no layer ran on the CPU through a sync. "
             "Regenerate with `python tools/conformance.py --backend cpu --backend gpu-compute "
             "--backend gpu-pixel --write`.", "",
             "| backend | cases | passed | passed without fallback |", "|---|---|---|---|"]
    for s in summaries:
        lines.append(f"| {s['backend']} | {s['total']} | {s['passed']} | {s['passed_no_fallback']} |")
    lines += ["", "Per op: passed (without fallback) / failed / unsupported.", "",
              "| op | cases | " + " | ".join(s["backend"] for s in summaries) + " |",
              "|---|---|" + "---|" * len(summaries)]
    ops = sorted({op for s in summaries for op in s["per_op"]})
    for op in ops:
        cells = []
        total = 0
        for s in summaries:
            c = s["per_op"].get(op, {})
            total = max(total, sum(v for k, v in c.items() if k != "pass_no_fallback"))
            cells.append(f"{c.get('pass', 0)} ({c.get('pass_no_fallback', 0)}) / "
                         f"{c.get('fail', 0) + c.get('error', 0)} / {c.get('unsupported', 0)}")
        lines.append(f"| {op} | {total} | " + " | ".join(cells) + " |")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", action="append", help="backend(s) to run (default: cpu)")
    parser.add_argument("--ops", help="comma-separated op types to run")
    parser.add_argument("-k", dest="pattern", help="regex on case names")
    parser.add_argument("--write", action="store_true", help="write docs/conformance.md and the floor file")
    parser.add_argument("--json", help="write the full results as JSON here")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every case that does not pass")
    args = parser.parse_args(argv)
    ops = set(args.ops.split(",")) if args.ops else None
    summaries = [run_all(b, ops, args.pattern, args.verbose) for b in (args.backend or ["cpu"])]
    for s in summaries:
        print(f"{s['backend']}: {s['passed']} / {s['total']} passed "
              f"({s['passed_no_fallback']} without fallback) in {s['seconds']} s")
    if args.json:
        Path(args.json).write_text(json.dumps(summaries, indent=1, default=str))
    if args.write:
        write_markdown(summaries, ROOT / "docs" / "conformance.md")
        floor_path = ROOT / "docs" / "conformance_floor.json"
        floors = json.loads(floor_path.read_text()) if floor_path.exists() else {}
        for s in summaries:
            floors[s["backend"]] = {"passed": s["passed"], "passed_no_fallback": s["passed_no_fallback"]}
        floor_path.write_text(json.dumps(floors, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
