"""GPU timestamps of a profiled run: query sets a program keeps, and the stamps written between layers (or a
timestamped pass per layer where the adapter cannot write them inside passes)."""

from __future__ import annotations

from typing import Any

import numpy as np

from wgsentis.backends.gpu.device import GPUContext
from wgsentis.backends.gpu.streams import CommandStream

MAX_QUERIES = 4096  # per query set (wgpu's limit)
# Timestamps written between layers need both: inside the open pass, and on the encoder around copies.
_INSIDE_STAMPS = frozenset({"timestamp-query-inside-passes", "timestamp-query-inside-encoders"})


def stamps_inside_passes(ctx: GPUContext) -> bool:
    """Whether the adapter can write timestamps between layers (inside passes and around copies)."""
    return _INSIDE_STAMPS <= set(ctx.info.features)


class QuerySets:
    """Timestamp query sets and the buffer they resolve into, made when first needed and kept by a program."""

    def __init__(self, ctx: GPUContext) -> None:
        self.ctx = ctx
        self.sets: list[Any] = []
        self.resolved: Any = None

    def get(self, index: int) -> Any:
        while len(self.sets) <= index:
            self.sets.append(self.ctx.device.create_query_set(type="timestamp", count=MAX_QUERIES,
                                                              label="wgsentis layer timestamps"))
        return self.sets[index]

    def resolve_buffer(self, nbytes: int) -> Any:
        if self.resolved is None or self.resolved.size < nbytes:  # kept across runs
            usage = self.ctx.wgpu.BufferUsage
            self.resolved = self.ctx.create_buffer(nbytes, usage.QUERY_RESOLVE | usage.COPY_SRC,
                                                   "wgsentis resolved timestamps", "the timestamp resolve buffer")
        return self.resolved

    def close(self) -> None:
        for query_set in self.sets:
            query_set.destroy()
        self.sets = []
        if self.resolved is not None:
            self.resolved.destroy()
        self.resolved = None


class Stamps:
    """Per-layer GPU timestamps of a profiled replay.

    Where the adapter writes timestamps inside passes, they go between layers in the open pass (or on
    the encoder around copies): a pass per layer costs ~0.15 ms each on some drivers (lavapipe),
    which would swamp small layers. Otherwise each layer gets its own pass with timestamp writes
    (copies then go untimed). ``whole``: one span (layer -1) from the first layer's start to the run's end.
    """

    def __init__(self, queries: QuerySets, inside: bool, whole: bool = False) -> None:
        self.queries = queries
        self.inside = inside
        self.whole = whole
        self.count = 0
        self.spans: list[tuple[int, int, int]] = []  # (layer index, query at start, query at end)
        self._start = -1
        self._last_end = -1  # query of the last layer's end stamp, and the pass it was written in
        self._last_pass: Any = None

    def _next(self) -> tuple[Any, int, int]:
        q = self.count
        self.count += 1
        return self.queries.get(q // MAX_QUERIES), q % MAX_QUERIES, q

    def _write(self, stream: CommandStream) -> int:
        from wgpu.backends.wgpu_native.extras import write_timestamp

        query_set, index, q = self._next()
        write_timestamp(stream.current_pass if stream.current_pass is not None else stream.encoder, query_set, index)
        return q

    def begin_layer(self, stream: CommandStream, layer_index: int) -> None:
        if self.whole:
            if self.count == 0:
                self._start = self._write(stream)
            return
        if self.inside:
            # The previous layer's end stamp starts this one when nothing ran in between (same open pass).
            if not (self._last_end >= 0 and stream.current_pass is not None
                    and stream.current_pass is self._last_pass):
                self._start = self._write(stream)
            else:
                self._start = self._last_end
            return
        stream.end_pass()
        # Only pairs are taken in this scheme, so a pair starts at an even query and never straddles
        # two query sets (MAX_QUERIES is even).
        query_set, begin, q = self._next()
        _, end, _ = self._next()
        stream.pass_timestamps = {"query_set": query_set, "beginning_of_pass_write_index": begin,
                                  "end_of_pass_write_index": end}
        self._start = q

    def end_layer(self, stream: CommandStream, layer_index: int) -> None:
        if self.whole:
            return
        if self.inside:
            self._last_end = self._write(stream)
            self._last_pass = stream.current_pass
            self.spans.append((layer_index, self._start, self._last_end))
            return
        if stream.pass_timestamps is not None:
            # The layer opened no pass (copies only): its pair was never written. Give it back, since every
            # query up to ``count`` is resolved, and resolving one never written waits for it forever on some
            # drivers (NVIDIA's: the readback then never completes).
            stream.pass_timestamps = None
            self.count -= 2
            return
        stream.end_pass()
        self.spans.append((layer_index, self._start, self._start + 1))

    def resolve(self, encoder: Any) -> Any:
        """Record the resolve of every query written into a buffer; returns that buffer."""
        resolved = self.queries.resolve_buffer(8 * self.count)
        for set_index in range((self.count + MAX_QUERIES - 1) // MAX_QUERIES):
            first = set_index * MAX_QUERIES
            n = min(MAX_QUERIES, self.count - first)
            encoder.resolve_query_set(self.queries.get(set_index), 0, n, resolved, 8 * first)
        return resolved

    def finish(self, stream: CommandStream) -> None:
        """After the last layer: the closing stamp of a ``whole`` run."""
        if self.whole and self.count:
            self.spans.append((-1, self._start, self._write(stream)))

    def span_counts(self) -> dict[int, int]:
        """Layer index -> how many timed intervals its duration sums (more than one around copies)."""
        out: dict[int, int] = {}
        for layer_index, _begin, _end in self.spans:
            out[layer_index] = out.get(layer_index, 0) + 1
        return out

    def durations(self, stamps: np.ndarray) -> dict[int, int]:
        """Layer index -> GPU nanoseconds (summed over a layer's spans) from the resolved ``stamps``."""
        out: dict[int, int] = {}
        for layer_index, begin, end in self.spans:
            out[layer_index] = out.get(layer_index, 0) + max(0, int(stamps[end] - stamps[begin]))
        return out
