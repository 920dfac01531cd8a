"""gpu-compute programs of the tensor family."""

from __future__ import annotations


