"""gpu-compute programs of the reduce family."""

from __future__ import annotations


