"""Operators of the image family (numpy kernels)."""

from __future__ import annotations

import numpy as np

from wgsentis.ops.registry import register
