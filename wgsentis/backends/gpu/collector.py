"""Python's cyclic garbage collector paused while a GPU plan is traced, and resumed once its run is submitted.

A trace makes tens of thousands of small objects (steps, tensors, allocations, parameter blocks), so the collector
runs inside it several times, and each of its full collections walks every object the process holds, the
programs' plans and templates included: on lavapipe, a new sequence length of a 4-layer BERT-style encoder spent
5.4 ms per size in collections (gpu-pixel 11.7 ms, a full one of 36-86 ms every tenth size) against a trace of 25-50
ms. With the collector paused for the run, its objects are collected together at the first allocation after it,
typically while the thread waits for the device, and the young generations fill ten times more slowly, so the
full collections come ten times more rarely.

The pause is process-wide, counted: the collector resumes when the last paused run ends, and only where a pause
stopped it (one the caller turned off stays off). Garbage made meanwhile waits, never longer than one run's host
work.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class CollectorPause:
    """The count of runs that have paused the collector, and whether a pause stopped it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pauses = 0
        self._stopped = False  # the collector was on when the first pause began, and is off for the pauses

    @contextmanager
    def paused(self) -> Iterator[None]:
        with self._lock:
            if self._pauses == 0:
                self._stopped = gc.isenabled()
                if self._stopped:
                    gc.disable()
            self._pauses += 1
        try:
            yield
        finally:
            with self._lock:
                self._pauses -= 1
                if self._pauses == 0 and self._stopped:
                    self._stopped = False
                    gc.enable()


COLLECTOR = CollectorPause()
