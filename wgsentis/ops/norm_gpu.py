"""gpu-compute programs of the norm family."""

from __future__ import annotations


