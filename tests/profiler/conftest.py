"""Shared fixtures of the profiler tests: the built-in sample model and a GPU probe."""

from __future__ import annotations

import pytest

from wgsentis.backends.device import gpu_available
from wgsentis.cli import sample_model_path


@pytest.fixture(scope="session")
def sample_path() -> str:
    return str(sample_model_path())


@pytest.fixture(scope="session")
def gpu() -> None:
    ok, why = gpu_available()
    if not ok:
        pytest.skip(f"no GPU adapter: {why}")
