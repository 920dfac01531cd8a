"""Getting results off the device: staging buffers kept between runs (one pool per plan), the pending readback of
a run's outputs (with its index fault words and any timestamps in the same map), and the times each phase of
that took."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from wgsentis.backends.gpu.device import GPUContext, map_read_async, wait_mapped
from wgsentis.backends.gpu.faults import IndexCheck, index_fault
from wgsentis.errors import IndexOutOfRangeError

MAX_FREE_STAGING = 4  # staging buffers a pool keeps unmapped for the next runs (more runs in flight make more)


class StagingPool:
    """MAP_READ buffers of one size, reused run after run: a buffer goes back to the pool once its run's outputs
    were read and it was unmapped. Creating and destroying one per run costs an allocation on the device and
    on the host per run."""

    def __init__(self, ctx: GPUContext, nbytes: int, label: str) -> None:
        self.ctx = ctx
        self.nbytes = nbytes
        self.label = label
        self.free: list[Any] = []
        self.created = 0

    def acquire(self, what: str) -> Any:
        if self.free:
            return self.free.pop()
        usage = self.ctx.wgpu.BufferUsage
        self.created += 1
        return self.ctx.create_buffer(self.nbytes, usage.MAP_READ | usage.COPY_DST, self.label, what)

    def release(self, buffer: Any) -> None:
        if len(self.free) < MAX_FREE_STAGING:
            self.free.append(buffer)
        else:
            buffer.destroy()

    def close(self) -> None:
        for buffer in self.free:
            buffer.destroy()
        self.free = []


class PendingReadback:
    """Outputs copied into one staging buffer whose mapping was requested; resolves when mapped. ``layout``: per
    output, its offset in the staging buffer and the function that decodes its bytes from there.

    ``phases`` collects the run's fixed costs in seconds as they happen: "wait" (for the map), "copy_out"
    (reading the mapped bytes into arrays); the program adds "encode" and "submit"."""

    def __init__(self, ctx: GPUContext, staging: Any, layout: dict[str, tuple[int, Callable[[np.ndarray], Any]]],
                 host_values: dict[str, Any],
                 extra: tuple[int, int, Callable[[np.ndarray], None]] | None = None,
                 checks: tuple[int, list[IndexCheck]] | None = None,
                 pool: StagingPool | None = None, phases: dict[str, float] | None = None) -> None:
        self.ctx = ctx
        self.staging = staging
        self.layout = layout
        self.host_values = host_values
        self.extra = extra  # (offset, nbytes, callback): more bytes in the same staging buffer (timestamps)
        self.checks = checks  # (offset, slots): the run's index fault words, in the same staging buffer
        self.pool = pool  # where the staging buffer goes back once read (None: destroyed)
        self.phases = phases if phases is not None else {}
        self.values: dict[str, Any] | None = None
        self.error: IndexOutOfRangeError | None = None  # a faulted index: raised by every wait()
        self.promise = map_read_async(staging) if staging is not None else None

    def done(self) -> bool:
        if self.values is not None or self.promise is None:
            return True
        # wgpu's poll thread moves the promise out of "pending" once the map callback fired.
        return getattr(self.promise, "_state", "pending") != "pending"

    def _release(self) -> None:
        self.staging.unmap()
        if self.pool is not None:
            self.pool.release(self.staging)
        else:
            self.staging.destroy()
        self.staging = None

    def wait(self) -> dict[str, Any]:
        """The outputs by name; raises IndexOutOfRangeError, before handing out any value, when a
        bounds-checked index of the run lay outside its axis."""
        if self.error is not None:
            raise self.error
        if self.values is None:
            values = dict(self.host_values)
            if self.promise is not None:
                started = time.perf_counter()
                wait_mapped(self.promise, f"the outputs {', '.join(self.layout)}" if self.layout else "the outputs")
                mapped = time.perf_counter()
                self.phases["wait"] = mapped - started
                raw = np.frombuffer(self.staging.read_mapped(copy=True), dtype=np.uint8)
                self._release()
                if self.checks is not None:
                    offset, slots = self.checks
                    self.error = index_fault(raw[offset: offset + 8 * len(slots)], slots)
                    if self.error is not None:
                        self.promise = None
                        raise self.error
                for name, (offset, decode) in self.layout.items():
                    values[name] = decode(raw[offset:])  # the storage's own decoding of its bytes
                if self.extra is not None:
                    offset, nbytes, callback = self.extra
                    callback(raw[offset: offset + nbytes])
                self.phases["copy_out"] = time.perf_counter() - mapped
            self.values = values
        return self.values
