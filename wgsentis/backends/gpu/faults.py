"""Index bounds checks on the device (wgsl/common/faults.wgsl): a fault buffer of slots that checking kernels
write an out-of-range index into, cleared every run and read back with its outputs and with every fallback
layer's inputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from wgsentis.backends.gpu.device import GPUContext
from wgsentis.backends.gpu.dtypes import TooLargeForDevice
from wgsentis.errors import IndexOutOfRangeError, LayerError

# Bounds-checked index slots a plan may hold (two words each: a 512 KiB buffer, made when first needed; a run reads
# back and clears only the slots its plan uses). A 501-step decoder Loop with two checked ScatterElements in its
# body takes 1002; beyond, layers fall back.
FAULT_SLOTS = 65536
VALUE_FAULT_BASE = 1 << 30  # value_fault's word: this minus the flat index (so atomicMax keeps the smallest index)


@dataclass(frozen=True)
class IndexCheck:
    """A fault slot: data-driven indices of ``layer`` that must lie in [-bound, bound) (wgsl/common/faults.wgsl).
    A plan's slots are numbered in the order they were recorded, so the first one that faulted is the
    earliest layer at fault."""

    layer: str
    op_type: str
    bound: int
    what: str = "indices"
    # A value check instead (wgsl/common/faults.wgsl value_fault): the CPU kernel's error text, with {index} the
    # smallest flat index at fault.
    value_error: str = ""
    # False: indices must lie in [0, bound) (checked_nonneg: ArrayFeatureExtractor gives negatives no meaning).
    negative_ok: bool = True

    def error(self, above: int, below: int) -> IndexOutOfRangeError | LayerError | None:
        """The error a slot's two words report (None when both are zero): the largest index past the end,
        else the smallest below -bound, as the CPU kernels' ``check_indices`` names it; for a value check, the
        CPU kernel's error at the smallest flat index at fault."""
        if self.value_error:
            return LayerError(self.layer, self.op_type, self.value_error.format(index=VALUE_FAULT_BASE - above)) \
                if above else None
        if above:
            return IndexOutOfRangeError(self.layer, self.op_type, self.bound + above - 1, self.bound, self.what,
                                        self.negative_ok)
        if below:
            lowest = -self.bound if self.negative_ok else 0
            return IndexOutOfRangeError(self.layer, self.op_type, lowest - below, self.bound, self.what,
                                        self.negative_ok)
        return None


def index_fault(raw: np.ndarray, checks: list[IndexCheck]) -> IndexOutOfRangeError | LayerError | None:
    """The error of the first faulted slot among ``checks``, given the bytes of their fault words (two u32
    per slot) as read back; None when none faulted."""
    raw = raw[: 8 * len(checks)]
    if not raw.any():  # the usual case, in a microsecond
        return None
    pairs = raw.view(np.uint32).reshape(-1, 2)
    slot = int(np.flatnonzero(pairs.any(axis=1))[0])
    return checks[slot].error(int(pairs[slot, 0]), int(pairs[slot, 1]))


def reserve_checks(recorder: Any, bounds: list[int], what: str = "indices", value_error: str = "",
                   negative_ok: bool = True) -> int:
    """Reserve one fault slot per bound for ``recorder``'s current layer's data-driven indices, which must lie
    in [-bound, bound) (wgsl/common/faults.wgsl ``checked_index``), or in [0, bound) with ``negative_ok`` false
    (``checked_nonneg``); returns the first slot's word, a parameter of the checking program (slot j at that
    word + 2j), which binds the fault buffer. A violation raises IndexOutOfRangeError when the run's outputs (or
    a fallback's inputs) are read. Every GPU backend's recorder checks this way. ``value_error``: a value check
    instead (one slot, written by value_fault), raising the CPU kernel's error."""
    first = len(recorder.index_checks)
    if first + len(bounds) > FAULT_SLOTS:
        raise TooLargeForDevice(f"more than {FAULT_SLOTS} bounds-checked index slots in one plan")
    layer = recorder.layer
    name, op_type = (layer.name, layer.op_type) if layer is not None else ("", "")
    recorder.index_checks.extend(IndexCheck(name, op_type, int(b), what, value_error, negative_ok) for b in bounds)
    recorder.program.faults.clear(first, len(bounds))  # before this run's first submit that can write them
    return 2 * first


class FaultBuffer:
    """One fault buffer per program (runs are ordered on the queue) and the slots of the run in progress."""

    def __init__(self, ctx: GPUContext) -> None:
        self.ctx = ctx
        self._buffer: Any = None
        self.run_checks: list[IndexCheck] = []  # the run in progress's slots, which its readbacks check

    @property
    def buffer(self) -> Any:
        """The storage buffer of FAULT_SLOTS slots (two u32 words each; zero when made)."""
        if self._buffer is None:
            usage = self.ctx.wgpu.BufferUsage
            self._buffer = self.ctx.create_buffer(8 * FAULT_SLOTS, usage.STORAGE | usage.COPY_SRC | usage.COPY_DST,
                                                  "wgsentis index faults", "the index fault buffer")
        return self._buffer

    def clear(self, first: int, count: int) -> None:
        """Zero slots first..first+count-1. A queue write lands before the next submit, after every run
        submitted earlier: the slots start this run cleared whatever the previous run left in them."""
        if count:
            self.ctx.queue.write_buffer(self.buffer, 8 * first, np.zeros(2 * count, np.uint32))

    def start(self, checks: list[IndexCheck]) -> None:
        """Make ``checks`` (a plan's slots, or a recording's growing list) the run's, cleared now."""
        self.run_checks = checks
        self.clear(0, len(checks))

    def nbytes(self) -> int:
        """Bytes of the run's fault words a readback copies."""
        return 8 * len(self.run_checks)

    def copy_into(self, encoder: Any, staging: Any, offset: int) -> tuple[int, list[IndexCheck]] | None:
        """Record the copy of the run's fault words into ``staging`` at ``offset``; returns what ``index_fault``
        needs to read them, or None when the run has no checked index."""
        checks = self.run_checks
        if not checks:
            return None
        encoder.copy_buffer_to_buffer(self.buffer, 0, staging, offset, 8 * len(checks))
        return offset, list(checks)

    def close(self) -> None:
        if self._buffer is not None:
            self._buffer.destroy()
        self._buffer = None
        self.run_checks = []
