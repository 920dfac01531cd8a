"""Host memory for the CPU backend: keep what a run frees for the next run, instead of faulting it in again.

A CPU run allocates every layer's output afresh (numpy arrays), tens of MB per run for large feature
maps. With glibc's default policy the freed memory goes back to the kernel between runs: blocks above
the mmap threshold are unmapped, and the heaps of the threads' arenas (a worker runs on its own thread)
are trimmed with MADV_DONTNEED. The next run then pays a page fault per 4 KiB page it touches again:
PP-OCR det, the first model in its process, took ~6000 faults per run (24 MB) and 23-28 ms of
system time in runs of 117-142 ms; VGG-19 ~2300 faults. ``keep_freed_memory`` raises both thresholds
once per process, so that freed blocks up to 32 MiB (glibc's largest mmap threshold) stay in the heaps
and up to ``TRIM_THRESHOLD_BYTES`` of free heap is kept: both models then fault in 0-6 pages per run
(PP-OCR det 110-117 ms). Larger blocks are still mapped afresh each time. The cost is that the
process keeps its peak working memory between runs, as ONNX Runtime's arena does. Other C libraries
(musl, macOS) are left as they are.
"""

from __future__ import annotations

import ctypes
import functools
import platform
import threading
from typing import Any

_M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's upper limit for M_MMAP_THRESHOLD on 64-bit systems
TRIM_THRESHOLD_BYTES = 1 << 30

_lock = threading.Lock()
_done = False


@functools.cache  # platform.libc_ver reads the interpreter's binary: look each function up once
def _glibc_function(name: str, *argtypes: Any) -> Any:
    """glibc's ``name`` with its argument types (returning int), or None under another C library."""
    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        function = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None
    function.argtypes = list(argtypes)
    function.restype = ctypes.c_int
    return function


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds for this process (once); returns whether they are raised."""
    global _done
    with _lock:
        if _done:
            return True
        mallopt = _glibc_function("mallopt", ctypes.c_int, ctypes.c_int)
        if mallopt is None:
            return False
        # mallopt returns 1 on success, 0 on a value out of range (then glibc's policy stays as it was).
        _done = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
            mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
        return _done


def release_freed_memory() -> bool:
    """Give the heap's free memory back to the kernel now (glibc's ``malloc_trim``): what ``keep_freed_memory``
    keeps for the next run is no use once a program is closed. Returns whether anything was released."""
    malloc_trim = _glibc_function("malloc_trim", ctypes.c_size_t)
    return malloc_trim is not None and bool(malloc_trim(0))
