"""The memory planner: lays a plan's intermediates out in arenas by lifetime and size, and keeps plans per input
signature in a bounded LRU.

A recording gives every intermediate (inputs, layer outputs, a layer's own scratch buffers) as an Allocation with
its size and the first and last tick that use it (the recording's clock ticks once per placed layer, the layers of a
subgraph included: a Loop's iterations each take their body's ticks). Two tensors may share bytes when their
lifetimes do not overlap. Offsets are assigned greedily, largest tensor first, each at the lowest offset where it
overlaps no tensor already placed whose lifetime meets its own (the "greedy by size" strategy of TFLite's arena
planner, which ONNX Runtime's memory patterns resemble). An arena is one device buffer, and WebGPU adds a rule of
its own: within one dispatch a buffer is either read-only or writable, and a copy's source and destination are
different buffers. Tensors one step reads and writes therefore *conflict*: they go to different arenas (a chain of
layers alternates between two). Of the arenas a tensor may go to, it takes the one that grows least, and opens a new
one only when each would grow by its whole size (or none has room within the device's buffer size). On the reference
models the arenas come to 1.0-1.2x their largest set of live tensors. ``live_peak`` is the bound the result is
measured against: the largest sum of live tensors plus the layer's own scratch at any step.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from wgsentis.backends.gpu.device import GPUContext
from wgsentis.backends.gpu.tensors import ALIGN, Allocation
from wgsentis.errors import InputError

DEFAULT_MAX_PLANS = 16  # recorded plans (input signatures) a program keeps, least recently used evicted first


def lifetime(alloc: Allocation, end: int) -> tuple[int, int]:
    """(first, last) layer index that uses ``alloc``; ``end`` for one alive to the end of the run."""
    return alloc.born, end if alloc.dies is None else alloc.dies


# Orders the greedy placement tries, largest tensors first either way; the planner keeps the tighter layout.
# Ties broken by the longer lifetime first packed PP-OCR det's arenas in 1.10x its live set, by the earlier
# birth 1.20x; other models prefer the other.
ORDERS = ("size, longest first", "size, earliest first")


def assign_offsets(allocs: list[Allocation], end: int, capacity: int,
                   conflicts: dict[int, set[int]] | None = None, order: str = ORDERS[0]) -> list[tuple[int, int]]:
    """(arena index, byte offset) for each of ``allocs``, in their order. Largest first (ties: ``order``), each
    goes to the lowest free offset (among the tensors whose lifetimes overlap its own) of the arena that grows
    least by taking it, among the arenas holding no tensor it conflicts with (``conflicts``: index -> indices)
    and with room within ``capacity``; a new arena when every choice would grow the total by its whole size."""
    conflicts = conflicts or {}
    spans = [lifetime(a, end) for a in allocs]
    if order == ORDERS[0]:
        rank = sorted(range(len(allocs)), key=lambda i: (-allocs[i].reserved, spans[i][0] - spans[i][1], i))
    else:
        rank = sorted(range(len(allocs)), key=lambda i: (-allocs[i].reserved, spans[i][0], i))
    # Each arena indexes its short-lived members by spans of the clock (``width`` ticks a bucket), so that
    # finding the tensors alive beside a new one costs about what overlaps it, not the whole arena: a Loop's
    # unrolled iterations give tens of thousands of short-lived tensors. Members spanning more than
    # _LONG_BUCKETS buckets (model outputs, scan outputs kept to the loop's end) are kept in one list instead.
    width = max(1, (end + 2) // 1024)
    buckets: list[dict[int, list[int]]] = []  # per arena: bucket -> short-lived member indices (key -1: long)
    members_of: list[set[int]] = []
    extent: list[int] = []
    where: list[tuple[int, int]] = [(0, 0)] * len(allocs)
    # Each placed tensor's lifetime and bytes (start, stop) as flat lists: the searches below read them for
    # every member of every arena a tensor may go to (most of the planner's time on a 600-layer decoder).
    firsts = [f for f, _ in spans]
    lasts = [last for _, last in spans]
    placed: list[tuple[int, int]] = [(0, 0)] * len(allocs)
    no_conflicts: set[int] = set()
    for i in rank:
        size = allocs[i].reserved
        first, last = spans[i]
        lo, hi = (first + 1) // width, (last + 1) // width
        against = conflicts.get(i, no_conflicts)
        best: tuple[int, int, int] | None = None  # (growth, offset, arena)
        for arena, members in enumerate(members_of):
            if not against.isdisjoint(members):
                continue
            arena_buckets = buckets[arena]
            keys = (-1, *range(lo, hi + 1)) if hi - lo < len(arena_buckets) else arena_buckets
            alive = {j for b in keys for j in arena_buckets.get(b, ()) if firsts[j] <= last and first <= lasts[j]}
            offset = _first_fit(sorted([placed[j] for j in alive]), size, capacity)
            if offset is not None:
                choice = (max(0, offset + size - extent[arena]), offset, arena)
                best = choice if best is None or choice < best else best
                if best[:2] == (0, 0):
                    break  # no growth at offset 0: no later arena does better (ties go to the first)
        # A new arena when every choice would grow the total by the tensor's whole size; a small tensor (under
        # _SMALL bytes) then grows an arena instead, the same bytes, so that thousands of small tensors alive at
        # once (a quantized LSTM's per-step states) do not each open a buffer of its own (435 for one).
        if best is None or best[0] > size or (best[0] == size and size >= _SMALL):
            buckets.append({})
            members_of.append(set())
            extent.append(0)
            best = (size, 0, len(members_of) - 1)
        _growth, offset, arena = best
        for b in (range(lo, hi + 1) if hi - lo < _LONG_BUCKETS else (-1,)):
            buckets[arena].setdefault(b, []).append(i)
        members_of[arena].add(i)
        extent[arena] = max(extent[arena], offset + size)
        where[i] = (arena, offset)
        placed[i] = (offset, offset + size)
    return where


_LONG_BUCKETS = 8
_SMALL = 64 << 10


def step_conflicts(steps: list[Any], allocs: list[Allocation]) -> dict[int, set[int]]:
    """Index -> indices of the allocations (among ``allocs``) that a step reads while another writes, or that
    one copy reads and writes: these must live in different buffers."""
    index = {id(a): i for i, a in enumerate(allocs)}
    out: dict[int, set[int]] = {}

    def pair(reads: list[Allocation], writes: list[Allocation]) -> None:
        for r in reads:
            for w in writes:
                i, j = index.get(id(r)), index.get(id(w))
                if i is not None and j is not None and i != j:
                    out.setdefault(i, set()).add(j)
                    out.setdefault(j, set()).add(i)

    for step in steps:
        storage = getattr(step, "storage", None)
        if storage is not None:
            pair([a for a, _ in storage[: step.reads]], [a for a, _ in storage[step.reads:]])
        elif isinstance(getattr(step, "dst", None), Allocation):
            pair([step.src], [step.dst])
    return out


def _first_fit(busy: list[tuple[int, int]], size: int, capacity: int) -> int | None:
    """The lowest offset in an arena where ``size`` bytes overlap none of the ``busy`` byte ranges (start, stop),
    sorted, within ``capacity``; None when there is none."""
    offset = 0
    for start, stop in busy:
        if offset + size <= start:
            break
        offset = max(offset, (stop + ALIGN - 1) // ALIGN * ALIGN)
    return offset if offset + size <= capacity else None


def plan_arenas(ctx: GPUContext, allocs: list[Allocation], steps: list[Any], end: int,
                label: str, orders: tuple[str, ...] = ORDERS) -> tuple[list[Any], int, str]:
    """Move ``allocs`` into arenas laid out by ``assign_offsets`` for the plan's ``steps``, in each of ``orders``,
    the smallest layout kept; returns the arena buffers, their bytes and the order that laid them out."""
    if not allocs:
        return [], 0, orders[0]
    capacity = int(ctx.limits.get("max-buffer-size", 1 << 30)) // ALIGN * ALIGN
    conflicts = step_conflicts(steps, allocs)
    layouts = {order: _with_sizes(allocs, assign_offsets(allocs, end, capacity, conflicts, order))
               for order in orders}
    best = min(orders, key=lambda order: sum(layouts[order][1].values()))
    where, sizes = layouts[best]
    usage = ctx.wgpu.BufferUsage
    arenas = [ctx.create_buffer(sizes[k], usage.STORAGE | usage.COPY_SRC | usage.COPY_DST,
                                f"wgsentis arena {k} of {label}", f"arena {k} of {label} ({sizes[k]:,} bytes)")
              for k in range(len(sizes))]
    for alloc, (arena, offset) in zip(allocs, where, strict=True):
        alloc.move(arenas[arena], offset)
    return arenas, sum(sizes.values()), best


def _with_sizes(allocs: list[Allocation], where: list[tuple[int, int]]) -> tuple[list[tuple[int, int]],
                                                                                dict[int, int]]:
    """``where`` and the bytes each arena it uses needs."""
    sizes: dict[int, int] = {}
    for alloc, (arena, offset) in zip(allocs, where, strict=True):
        sizes[arena] = max(sizes.get(arena, 0), offset + alloc.reserved)
    return where, sizes


def live_peak(allocs: list[Allocation], end: int, scratch: dict[int, int]) -> int:
    """The largest bytes live at any step: tensors whose lifetimes include it, plus that layer's scratch
    textures (``scratch``: layer index -> bytes it asked for)."""
    if not allocs and not scratch:
        return 0
    delta: dict[int, int] = {}
    for a in allocs:
        first, last = lifetime(a, end)
        delta[first] = delta.get(first, 0) + a.reserved
        delta[last + 1] = delta.get(last + 1, 0) - a.reserved
    steps = sorted(set(delta) | set(scratch))
    live, peak = 0, 0
    for step in steps:
        live += delta.get(step, 0)
        peak = max(peak, live + scratch.get(step, 0))
    return peak


class PlanCache:
    """Plans by input signature, at most ``capacity``, the least recently used evicted first, and at most one more
    prepared ahead of its run (``put_ahead``). Each plan holds its own arenas, so a model run at ever new shapes
    would otherwise grow without bound."""

    def __init__(self, capacity: int = DEFAULT_MAX_PLANS) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise InputError(f"max_plans={capacity!r}: the number of cached plans must be a positive integer")
        self.capacity = capacity
        self.plans: OrderedDict[tuple, Any] = OrderedDict()
        self.ahead: tuple[tuple, Any] | None = None  # (signature, plan) prepared ahead of its first run, unused yet
        self.evicted = 0

    def get(self, signature: tuple) -> Any:
        plan = self.plans.get(signature)
        if plan is not None:
            self.plans.move_to_end(signature)  # most recently used last; the first is evicted first
        elif self.ahead is not None and self.ahead[0] == signature:
            plan, self.ahead = self.ahead[1], None
            self.put(signature, plan)  # in use now: it takes its place among the others
        return plan

    def put(self, signature: tuple, plan: Any) -> None:
        self.plans[signature] = plan
        self.plans.move_to_end(signature)
        while len(self.plans) > self.capacity:
            # Dropped, never destroyed: work already submitted keeps its buffers alive until it is done.
            self.plans.popitem(last=False)
            self.evicted += 1

    def put_ahead(self, signature: tuple, plan: Any) -> None:
        """Keep ``plan``, traced ahead of any run of its signature (lookahead.py), beside the others: it evicts none
        of them until a run takes it, and replaces the plan prepared before it, if any."""
        self.ahead = (signature, plan)

    def discard(self, signature: tuple) -> None:
        self.plans.pop(signature, None)
        if self.ahead is not None and self.ahead[0] == signature:
            self.ahead = None

    def __len__(self) -> int:
        return len(self.plans) + (self.ahead is not None)

    def __contains__(self, signature: tuple) -> bool:
        # (not a use: the order stays)
        return signature in self.plans or (self.ahead is not None and self.ahead[0] == signature)

    def __iter__(self) -> Any:
        """The signatures, least recently used first (then the one prepared ahead)."""
        return iter([*self.plans, *([self.ahead[0]] if self.ahead is not None else [])])

    def values(self) -> list[Any]:
        return [*self.plans.values(), *([self.ahead[1]] if self.ahead is not None else [])]

    def clear(self) -> None:
        self.plans.clear()
        self.ahead = None
