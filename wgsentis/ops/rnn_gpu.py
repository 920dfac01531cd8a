"""gpu-compute programs of the rnn family."""

from __future__ import annotations


