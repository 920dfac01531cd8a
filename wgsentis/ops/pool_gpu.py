"""gpu-compute programs of the pool family."""

from __future__ import annotations


