"""ONNX node conformance never drops below the recorded floors (docs/conformance_floor.json): on the
CPU, and on each GPU backend (gpu-compute, gpu-pixel) both with fallback allowed and with no fallback layer."""

from __future__ import annotations

import json
from pathlib import Path

import conformance
import pytest
from helpers import requires_gpu

FLOOR = json.loads((Path(__file__).resolve().parent.parent / "docs" / "conformance_floor.json").read_text())


def _not_passing(summary: dict) -> str:
    return "\n".join(f"{c['case']}: {c['status']} {c['detail'][:120]}" for c in summary["cases"]
                     if c["status"] != "pass")


def test_cpu_conformance_floor():
    summary = conformance.run_all("cpu")
    assert summary["total"] >= 1800
    assert summary["passed"] >= FLOOR["cpu"]["passed"], (
        f"{summary['passed']} passed, floor {FLOOR['cpu']['passed']}; not passing:\n" + _not_passing(summary))


@requires_gpu
@pytest.mark.parametrize("backend", ["gpu-compute", "gpu-pixel"])
def test_gpu_conformance_floor(backend):
    summary = conformance.run_all(backend)
    floor = FLOOR[backend]
    assert summary["passed"] >= floor["passed"], (
        f"{summary['passed']} passed, floor {floor['passed']}; not passing:\n" + _not_passing(summary))
    assert summary["passed_no_fallback"] >= floor["passed_no_fallback"], (
        f"{summary['passed_no_fallback']} passed without fallback, floor {floor['passed_no_fallback']}")
    # A GPU backend passes at least every case the CPU backend passes (fallback allowed).
    assert summary["passed"] >= FLOOR["cpu"]["passed"]
