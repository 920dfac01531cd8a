"""gpu-pixel programs (issue 20, in progress)."""

from __future__ import annotations
