"""Intra-op parallelism for the CPU kernels: split work over the worker's ``threads``, and the workspace
(per-thread scratch buffers, the thread pools of the splits) that a CPU program lends its kernels.

This is the ``spin_wait=False`` mode of the CPU backend (wgsentis.backends.cpu): threads that block when
idle, for cores shared with other busy processes. In the default spin-wait mode kernels get one thread
here (``kernel_threads``) and BLAS's own threads carry the products. The measurements below are about
this mode's choices.

In this mode BLAS runs single-threaded (its spin-waiting threads collapse when the machine is shared: a
small sgemm took 16 ms with 2 OpenBLAS threads against 0.07 ms with one, with the other core busy), so
big products are split here instead, across threads that block rather than spin. numpy releases
the GIL inside matmul and its array loops, so the parts run truly in parallel.

OpenBLAS's own split is faster for a product alone (it shares packed panels between its threads), but
on x86_64 its idle threads spin on nops for about 0.1 s after every job, holding a core that our pool
needs for everything BLAS does not run: with big products on BLAS threads, all 12 reference models
measured 0.97x (PP-OCR det's banded im2col layer 9.7 -> 17 ms); see docs/benchmarks-history.md, seventh session.
So the two never mix: spin-wait mode leaves this pool out entirely and runs everything else on one
thread, which measured 1.16x over this mode on cores of its own (eighth session).

The scratch buffers and pools belong to a ``HostWorkspace``, which the CPU program (and a GPU program's
host program) owns and closes with itself; kernels reach it through their context (``kernel_workspace``).
"""

from __future__ import annotations

import itertools
import math
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

# Below this many FLOPs a product runs on one thread: a hand-off costs ~50 us on this VM, and inside a
# model the split loses more (alternating runs, 4M against 32M: shufflenet 22.6 -> 19.9 ms, squeezenet
# 17.1 -> 16.3, ResNet-50 and Inception within 2%).
MIN_SPLIT_FLOPS = 32_000_000
SCRATCH_MAX_BYTES = 256 << 20  # larger temporaries are allocated fresh, not kept


class _ThreadBuffers:
    """One thread's scratch buffers in one workspace, by key."""

    __slots__ = ("__weakref__", "buffers")

    def __init__(self) -> None:
        self.buffers: dict[str, np.ndarray] = {}


class HostWorkspace:
    """What a CPU program lends its kernels besides threads: per-thread scratch buffers reused across calls,
    and the thread pools that ``run_split`` hands parts to (one per part count). ``close()`` frees both;
    the workspace still works after it (it allocates again), so a late kernel call cannot fail on it.

    ``keep=False``: a workspace that keeps nothing (fresh temporaries, a pool per split), for kernels called
    outside a program (``TRANSIENT``)."""

    def __init__(self, keep: bool = True) -> None:
        self.keep = keep
        self._lock = threading.Lock()
        # A thread's buffers live in a thread-local, so they die with the thread as before; the weak set
        # reaches every live thread's buffers for close() and held_bytes().
        self._local = threading.local()
        self._threads: weakref.WeakSet[_ThreadBuffers] = weakref.WeakSet()
        self._pools: dict[int, ThreadPoolExecutor] = {}
        # The buffers of the thread executing a program's run (``run_buffers``), whichever thread that is.
        self._run = _ThreadBuffers()
        self._threads.add(self._run)

    def scratch(self, key: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """An uninitialised temporary of ``shape`` from the calling thread's buffer named ``key``.

        Large fresh numpy allocations are served by mmap and pay a page fault per 4 KiB on first touch,
        which costs as much as the arithmetic for im2col columns and depthwise planes; reusing warm buffers
        avoids that. The caller must be done with the array before asking for ``key`` again."""
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        if not self.keep or nbytes > SCRATCH_MAX_BYTES:
            return np.empty(shape, dtype=dtype)
        mine = getattr(self._local, "buffers", None)
        if mine is None:
            mine = self._local.buffers = _ThreadBuffers()
            with self._lock:
                self._threads.add(mine)
        buf = mine.buffers.get(key)
        if buf is None or buf.nbytes < nbytes:
            buf = mine.buffers[key] = np.empty(max(nbytes, 1), dtype=np.uint8)
        return buf[:nbytes].view(dtype).reshape(shape)

    def run_buffers(self) -> _ThreadBuffers | None:
        """Make the calling thread's scratch the program run's own set, until ``restore_buffers`` with what this
        returns: a worker runs one run at a time, on its runner thread or on the thread that called ``run``
        (``Worker._submit``), and every such thread shares one set instead of keeping one each."""
        previous = getattr(self._local, "buffers", None)
        self._local.buffers = self._run
        return previous

    def restore_buffers(self, previous: _ThreadBuffers | None) -> None:
        """The calling thread's own scratch again (``run_buffers``' return)."""
        if previous is None:
            self._local.__dict__.pop("buffers", None)
        else:
            self._local.buffers = previous

    def pool(self, parts: int) -> ThreadPoolExecutor | None:
        """The pool of ``parts - 1`` threads that splits into ``parts`` hand work to (made on first use), or
        None where this workspace keeps no pools."""
        if not self.keep:
            return None
        with self._lock:
            pool = self._pools.get(parts)
            if pool is None:
                pool = self._pools[parts] = ThreadPoolExecutor(max_workers=parts - 1,
                                                               thread_name_prefix="wgsentis-op")
            return pool

    def held_bytes(self) -> int:
        """Bytes of scratch buffers held for the live threads."""
        with self._lock:
            return sum(buf.nbytes for mine in list(self._threads) for buf in mine.buffers.values())

    def pool_threads(self) -> int:
        """Threads the pools made so far may run (each starts lazily, as work arrives)."""
        with self._lock:
            return sum(parts - 1 for parts in self._pools)

    def close(self) -> None:
        """Free every thread's scratch buffers and shut the pools down (waiting for their threads)."""
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
            for mine in list(self._threads):
                mine.buffers.clear()
            self._run = _ThreadBuffers()
            self._threads = weakref.WeakSet([self._run])
            self._local = threading.local()
        for pool in pools:
            pool.shutdown(wait=True)


TRANSIENT = HostWorkspace(keep=False)  # keeps nothing: the workspace of kernels called outside a program


def kernel_workspace(ctx: Any) -> HostWorkspace:
    """The workspace of the program a kernel runs in (its context's ``workspace``), ``TRANSIENT`` outside
    one."""
    workspace = getattr(ctx, "workspace", None)
    return workspace if isinstance(workspace, HostWorkspace) else TRANSIENT


_blas_lock = threading.Lock()
_blas_threads: int | None = None


def set_blas_threads(threads: int) -> None:
    """Bound the BLAS library's thread count (process-wide; only changed when it differs).

    Runs call it through ``GraphProgram.bind_blas``: ``threads`` when spin-waiting, else 1 (``par_matmul``
    splits the big products over our own threads)."""
    global _blas_threads
    with _blas_lock:
        if _blas_threads == threads:
            return
        try:
            import threadpoolctl

            # threadpoolctl >= 3.8 lets only the first Python thread that set OpenBLAS's (process-wide)
            # limit change it again, silently; every worker runs on its own thread, and this lock
            # already serialises our changes, so each change takes control first.
            clear = getattr(getattr(threadpoolctl, "OpenBLASController", None), "clear_controlling_thread", None)
            if clear is not None:
                clear(force=True)
            threadpoolctl.threadpool_limits(limits=threads, user_api="blas")
        except Exception:  # threadpoolctl missing or no BLAS found: nothing to bound
            pass
        _blas_threads = threads


def blas_threads() -> int:
    """The BLAS thread count last set through ``set_blas_threads`` (1 before any run): kernels pick the
    form whose products BLAS splits well when it has several."""
    return _blas_threads or 1


def kernel_threads(ctx) -> int:
    """How many threads a kernel may split its work over: its context's budget (the CPU program's
    threads, or 1 while other layers run beside it), 1 outside a CPU program."""
    threads = getattr(ctx, "threads", None)
    if threads is None:
        threads = getattr(getattr(ctx, "program", None), "threads", 1)
    return max(1, int(threads))


# The calling thread's share of a split, against 1 for each pool thread. A pool thread starts its part
# 30-80 us late (the hand-off) and, running beside the caller, ran its half 5-30% slower than the caller
# ran the other (2 cores; traced on split products, im2col bands and pools), so even halves left the
# caller waiting. Alternating 1.0 against 1.2 (a 55% share): 3x3/2 MaxPool 64ch@112 0.48 -> 0.44 ms,
# SqueezeNet's 16->64 3x3 0.47 -> 0.43 ms, ResNet-50's stem 1.87 -> 1.71 ms.
CALLER_SHARE = 1.2


def run_split(count: int, threads: int, work: Callable[[int, int], None], align: int = 1, *,
              workspace: HostWorkspace | None = None) -> None:
    """Run ``work(lo, hi)`` over ``[0, count)`` split into ``threads`` contiguous parts (inner bounds on
    multiples of ``align``); the first part, a ``CALLER_SHARE`` larger one, runs on the calling thread, the
    others on ``workspace``'s pool (a pool made for this split where the workspace keeps none)."""
    parts = max(1, min(threads, count // align))
    if parts == 1:
        work(0, count)
        return
    total = CALLER_SHARE + parts - 1
    cuts = [round(count * (CALLER_SHARE + i - 1) / total / align) * align for i in range(1, parts)]
    bounds = [0, *cuts, count]
    if any(lo >= hi for lo, hi in itertools.pairwise(bounds)):  # too few units to weight: even parts
        bounds = [0, *((count * i // parts + align // 2) // align * align for i in range(1, parts)), count]
    pool = (workspace or TRANSIENT).pool(parts)
    if pool is None:
        with ThreadPoolExecutor(max_workers=parts - 1, thread_name_prefix="wgsentis-op") as transient:
            _run_parts(transient, bounds, work)
        return
    _run_parts(pool, bounds, work)


def _run_parts(pool: ThreadPoolExecutor, bounds: list[int], work: Callable[[int, int], None]) -> None:
    futures = [pool.submit(work, bounds[i], bounds[i + 1]) for i in range(1, len(bounds) - 1)]
    work(bounds[0], bounds[1])
    for future in futures:
        future.result()


Epilogue = Callable[[np.ndarray, slice, slice], None]


def par_matmul(a: np.ndarray, b: np.ndarray, threads: int, epilogue: Epilogue | None = None, *,
               workspace: HostWorkspace | None = None) -> np.ndarray:
    """``np.matmul(a, b)``, split by output rows or columns over ``threads``.

    Each part's sgemm packs the whole of the operand that is not split, so the split runs along the
    larger of M and N: split by rows, both threads pack all of ``b`` (K, N). For ResNet-50's and
    SqueezeNet's im2col products (M 64-128, N 784-12544) columns ran 1.05-1.3x faster than rows.

    ``epilogue(part, rows, cols)``, if given, runs on each computed part ``out[..., rows, cols]`` on the
    thread that computed it, while the part is in cache (a bias, a residual, an activation). The parts run
    on ``workspace``'s pool (``run_split``)."""
    whole = slice(None)
    splittable = threads > 1 and a.ndim >= 2 and b.ndim >= 2 and a.dtype == b.dtype and a.dtype.kind == "f"
    if splittable:
        m, k = a.shape[-2:]
        n = b.shape[-1]
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        splittable = 2 * m * n * k * math.prod(batch) >= MIN_SPLIT_FLOPS
    if not splittable:
        out = np.matmul(a, b)
        if epilogue is not None:
            epilogue(out, whole, whole)
        return out
    out = np.empty((*batch, m, n), dtype=a.dtype)
    if m > n and m >= 8 * threads:
        def rows(lo: int, hi: int) -> None:
            part = out[..., lo:hi, :]
            np.matmul(a[..., lo:hi, :], b, out=part)
            if epilogue is not None:
                epilogue(part, slice(lo, hi), whole)

        run_split(m, threads, rows, workspace=workspace)
    else:
        def cols(lo: int, hi: int) -> None:
            part = out[..., lo:hi]
            np.matmul(a, b[..., lo:hi], out=part)
            if epilogue is not None:
                epilogue(part, whole, slice(lo, hi))

        run_split(n, threads, cols, align=16 if n >= 64 * threads else 1, workspace=workspace)  # whole 64-byte lines
    return out
