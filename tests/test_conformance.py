"""The ONNX node conformance count on the CPU backend never drops below the recorded floor."""

from __future__ import annotations

import json
from pathlib import Path

import conformance

FLOOR = json.loads((Path(__file__).resolve().parent.parent / "docs" / "conformance_floor.json").read_text())


def test_cpu_conformance_floor():
    summary = conformance.run_all("cpu")
    assert summary["total"] >= 1800
    failures = [f"{c['case']}: {c['status']} {c['detail'][:120]}" for c in summary["cases"] if c["status"] != "pass"]
    assert summary["passed"] >= FLOOR["cpu"]["passed"], (
        f"{summary['passed']} passed, floor {FLOOR['cpu']['passed']}; not passing:\n" + "\n".join(failures[:50]))
