"""Shared test set-up: the --runslow switch, the skip of GPU tests without an adapter, paths to tools/, and the
``shaders`` fixture (the gpu-compute dispatches a test recorded)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", default=False, help="run tests marked slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # GPU tests (marked ``gpu``: helpers.requires_gpu) skip with the probe's reason where no adapter opens; the
    # adapter is probed only when such a test was collected.
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if gpu_items:
        from helpers import gpu_adapter

        ok, reason = gpu_adapter()
        if not ok:
            for item in gpu_items:
                item.add_marker(pytest.mark.skip(reason=reason))
    if config.getoption("--runslow"):
        return
    skip_slow = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip_slow)


@pytest.fixture
def shaders(monkeypatch):
    """The shader of every gpu-compute dispatch recorded while the test runs."""
    from wgsentis.backends import gpu_compute

    seen: list[str] = []
    dispatch = gpu_compute.Recorder.dispatch

    def spy(self, shader, *args, **kwargs):
        seen.append(shader)
        return dispatch(self, shader, *args, **kwargs)

    monkeypatch.setattr(gpu_compute.Recorder, "dispatch", spy)
    return seen
