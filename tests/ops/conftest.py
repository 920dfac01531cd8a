"""Fixtures shared by the gpu-compute op tests."""

from __future__ import annotations

import pytest

from wgsentis.backends import gpu_compute


@pytest.fixture
def shaders(monkeypatch):
    """The shader of every dispatch recorded while the test runs."""
    seen: list[str] = []
    dispatch = gpu_compute.Recorder.dispatch

    def spy(self, shader, *args, **kwargs):
        seen.append(shader)
        return dispatch(self, shader, *args, **kwargs)

    monkeypatch.setattr(gpu_compute.Recorder, "dispatch", spy)
    return seen
