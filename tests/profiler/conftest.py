"""Shared fixtures of the profiler tests: the built-in sample model (GPU tests: helpers.requires_gpu)."""

from __future__ import annotations

import pytest

from wgsentis.cli import sample_model_path


@pytest.fixture(scope="session")
def sample_path() -> str:
    return str(sample_model_path())
