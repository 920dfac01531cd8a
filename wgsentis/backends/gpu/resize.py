"""A new input size of a structure already traced, planned from that trace: the layers the new size leaves as they
were keep the base plan's steps, memory and bind groups, and only the others are placed and built again.

A decoder step with a longer cache, or an OCR line of another width, changes the shapes of a few dozen of a
graph's hundreds of layers. A full trace still walks every layer: each is placed, keyed, stamped from its template
or built, its new memory laid out in new arenas, every step bound anew (most of a new size's host time on a
GPT-2 step). Here the first trace of a structure (input names, ranks, dtypes) keeps a ``TraceRecord``: per
top-level layer, the clock it ran at, its steps, outputs, placement, fault slots and the run inputs it read on
the host. A later trace of the same structure at other sizes (``Resize``) walks the layers with a set of *dirty*
tensors, those whose value is not the base trace's (another shape, dtype, layout, int64 bound, another place in
memory, another host value):

- a GPU layer reading no dirty tensor is *kept*: the base plan's steps (bound already, their parameter blocks in
  the base plan's uniform arena) go into the new plan as they are, its outputs are the base trace's tensors, and
  nothing is placed, keyed, built or bound;
- any other layer is placed and built (or stamped) as in a full trace. Each allocation it makes *inherits* the
  base allocation made at the same tick in the same order (its arena, offset and reserved bytes; on gpu-pixel its
  texture) where that one is at least as large, so that an output of the old size lands where the base plan
  kept it and the layers after it stay clean; an output whose size changed gets memory of the new plan's own
  (the *delta*, laid out by the planner in arenas of its own).

Before the plan is kept, what the base layout relied on is checked: every inherited allocation lives exactly the
base one's lifetime (so it overlaps nothing the base layout kept apart from it), each rebuilt step reads and
writes distinct buffers, every layer took the base trace's ticks and fault slots. Anything else (a builder taking
another path at the new size, a fallback, a control-flow layer) abandons the resize: the size is traced in full,
and that trace becomes the structure's base. So does the next size's after a resize that kept under a quarter of
the GPU layers (a prompt's trace is a poor base for one token a step: nearly every shape differs from it).

A decoder's next token changes what the last one changed: each successful resize leaves its trace a ``Prediction``
(the layers it kept, the tensors it found dirty), and the next resize from that trace keeps those layers a run of
consecutive layers at a time (``KeptRun``: their steps, placements and the reference counts that can matter,
gathered once), for as long as every tensor it has found dirty so far is one the prediction foresaw; from the first
that is not, it decides each layer as above.

Memory: a re-sized plan holds its delta arenas and parameter blocks, and shares the base plan's arenas (kept alive
by the re-sized plans that use them, so a structure keeps one full set plus, per cached size, what changed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from wgsentis.backends.gpu.planner import live_peak, step_conflicts
from wgsentis.backends.gpu.steps import Draw, Placement, Plan
from wgsentis.backends.gpu.tensors import Allocation, GTensor
from wgsentis.budget import check_device_bytes
from wgsentis.ir import Graph

# Host values up to this many elements are compared by value when deciding whether a tensor changed; a larger
# host value is the same only where it is the same array.
HOST_COMPARE_ELEMENTS = 4096


class ResizeAbandoned(Exception):  # noqa: N818 - internal control flow, never reaches users
    """A resize met what the base plan's layout cannot stand for: the size is traced in full instead."""


@dataclass(slots=True)
class LayerRecord:
    """What one top-level layer gave in a full trace."""

    kind: str  # "gpu" or "host"
    keepable: bool  # a GPU or host layer without subgraphs, no output holding a host copy of the run's values
    tick_start: int  # the recording's clock as the layer began
    tick_end: int  # the clock once it was recorded (a builder may step it)
    steps: list[Any]
    outputs: tuple[Any, ...]
    placement: Placement
    checks: list[Any]  # the fault slots it reserved (faults.IndexCheck), in slot order
    host_reads: tuple[str, ...]  # run inputs it read on the host (their values are part of the plan's signature)
    allocations: tuple[int, int]  # its allocations: [start, stop) of the plan's list


@dataclass
class TraceRecord:
    """A full trace's layers (``LayerRecord`` per top-level layer), its run inputs' tensors, the clock one past its
    last tick and its layers' scratch texture requests (tick -> bytes)."""

    layers: list[LayerRecord] = field(default_factory=list)
    inputs: dict[str, Any] = field(default_factory=dict)
    end: int = 0
    scratch: dict[int, int] = field(default_factory=dict)

    # What every resize from this trace looks up in its plan (``index_base``, once).
    slots: dict[tuple[int, int], Allocation] | None = None  # allocations by (tick born, order among those)
    base_allocations: set[int] = field(default_factory=set)
    # gpu-pixel: the textures one draw renders together must be one size, which the base layout gave those it drew
    # together; a resize's draw may tile otherwise, so those are never inherited (and ``Resize.check`` refuses a
    # draw rendering into inherited textures beside others).
    bundled: set[int] = field(default_factory=set)
    base_textures: set[int] = field(default_factory=set)
    # What the last resize from this trace kept (``Prediction``): the next one keeps those layers run by run.
    prediction: Prediction | None = None

    def finished(self, end: int, scratch: dict[int, int]) -> TraceRecord:
        """The record of a trace that ended at ``end`` with these scratch requests."""
        self.end, self.scratch = end, dict(scratch)
        return self

    def index_base(self, plan: Plan) -> None:
        """Index the traced ``plan``'s allocations and many-target draws for the resizes planned from it."""
        slots: dict[tuple[int, int], Allocation] = {}
        counts: dict[int, int] = {}
        for alloc in plan.allocations:
            k = counts.get(alloc.born, 0)
            counts[alloc.born] = k + 1
            slots[(alloc.born, k)] = alloc
        self.base_allocations = {id(a) for a in plan.allocations}
        self.bundled = {id(t) for step in plan.steps if isinstance(step, Draw) and len(step.targets) > 1
                        for t in step.targets}
        self.base_textures = {id(a.texture) for a in plan.allocations if hasattr(a, "texture")}
        self.slots = slots


def same_value(new: Any, old: Any, inherited: dict[int, Allocation]) -> bool:
    """Whether ``new`` (a value of the resize) stands where ``old`` (the base trace's) did for every layer reading it:
    the same array, or a device tensor of the same shape, dtype, bound and layout in the same memory (its own
    allocation inheriting the old one's, or the old one's itself)."""
    if new is old:
        return True
    if isinstance(new, GTensor):
        if not isinstance(old, GTensor) or new.chunks is not None or old.chunks is not None:
            return False
        if (new.shape != old.shape or new.dtype != old.dtype or new.first != old.first or new.bound != old.bound
                or new.layout != old.layout):
            return False
        if (new.host is not None or old.host is not None) and not same_value(new.host, old.host, inherited):
            return False  # a host copy of the run's values (an input, a view of one): placement may read it
        return new.alloc is old.alloc or inherited.get(id(new.alloc)) is old.alloc
    if isinstance(new, np.ndarray) and isinstance(old, np.ndarray):
        return (new.dtype == old.dtype and new.shape == old.shape and new.dtype != object
                and new.size <= HOST_COMPARE_ELEMENTS and new.tobytes() == old.tobytes())
    return False


class Resize:
    """The state of one resize: the base plan and its record, the dirty tensor names, and the allocations made so
    far with the base allocations they inherit. ``inherit(program, alloc)`` is what the program's allocators call
    for each allocation the resize makes."""

    def __init__(self, base: Any, feeds: dict[str, Any]) -> None:
        self.base = base
        self.record: TraceRecord = base.trace
        self.dirty: set[str] = set()
        self.inherited: dict[int, Allocation] = {}  # id(new allocation) -> the base allocation it stands in
        self.stand_ins: dict[int, Allocation] = {}  # id(base allocation) -> the new allocation standing in it
        self.pairs: list[tuple[Allocation, Allocation]] = []
        self.delta: list[Allocation] = []  # allocations of the plan's own (laid out in its delta arenas)
        self.kept_layers = 0
        self.kept_records: list[LayerRecord] = []  # the kept layers that had allocations of their own
        self.kept_indices: list[int] = []
        if self.record.slots is None:
            self.record.index_base(base)
        self.base_allocations = self.record.base_allocations
        self.bundled, self.base_textures = self.record.bundled, self.record.base_textures
        self._slots = self.record.slots
        self._counts: dict[int, int] = {}
        for name, value in feeds.items():
            previous = base.host_read_inputs.get(name)
            if previous is not None and not (isinstance(value, np.ndarray) and value.shape == previous.shape
                                             and value.dtype == previous.dtype and np.array_equal(value, previous)):
                self.dirty.add(name)  # read on the host by the base plan, now another value

    def inherit(self, program: Any, alloc: Allocation) -> None:
        """``alloc`` (just made, virtual) takes the place of the base allocation made at its tick in its order,
        where ``program.inherit_allocation`` says it fits there; else it is one of the plan's own."""
        k = self._counts.get(alloc.born, 0)
        self._counts[alloc.born] = k + 1
        old = self._slots.get((alloc.born, k))
        if old is not None and id(getattr(old, "texture", None)) not in self.bundled \
                and program.inherit_allocation(alloc, old):
            self.inherited[id(alloc)] = old
            self.stand_ins[id(old)] = alloc
            self.pairs.append((alloc, old))
        else:
            self.delta.append(alloc)

    def compare_inputs(self, env: dict[str, Any], names: Any) -> None:
        """Mark the run inputs whose tensors are not the base trace's (another shape, or other memory) dirty."""
        for name in names:
            if not same_value(env.get(name), self.record.inputs.get(name), self.inherited):
                self.dirty.add(name)

    def keep(self, index: int, record: LayerRecord) -> None:
        """Layer ``index`` kept from the base trace as it was."""
        self.kept_indices.append(index)
        self.kept_layers += record.kind == "gpu"
        if record.allocations[0] != record.allocations[1]:
            self.kept_records.append(record)

    def kept_allocations(self) -> list[Allocation]:
        """The base allocations of the kept layers."""
        return [a for r in self.kept_records for a in self.base.allocations[r.allocations[0]:r.allocations[1]]]

    def counted_value(self, value: Any) -> Allocation | None:
        """``counted`` of a value's allocation (None for what is not a device tensor of the recording's, or a
        constant)."""
        if not isinstance(value, GTensor) or value.alloc is None or value.alloc.persistent:
            return None
        return self.counted(value.alloc)

    def counted(self, alloc: Allocation) -> Allocation | None:
        """The allocation whose references a value in ``alloc`` counts: ``alloc`` itself, or for one of the base
        plan's the new allocation standing in it (a kept layer's view of a rebuilt layer's output keeps that
        alive), or None (the base trace counted its references, and laid out its lifetime)."""
        if id(alloc) not in self.base_allocations:
            return alloc
        return self.stand_ins.get(id(alloc))

    def clean(self, layer: Any, record: LayerRecord) -> bool:
        """Whether ``layer`` (keepable in the base trace: ``record``) reads no dirty tensor."""
        return record.keepable and self.dirty.isdisjoint(layer.inputs)

    def compare(self, layer: Any, outputs: Any, record: LayerRecord) -> None:
        """Mark the outputs of a layer placed again dirty where they differ from the base trace's."""
        old = record.outputs
        for k, name in enumerate(layer.outputs):
            if not name:
                continue
            new = outputs[k] if outputs is not None and k < len(outputs) else None
            if k >= len(old) or not same_value(new, old[k], self.inherited):
                self.dirty.add(name)

    def check(self, program: Any, steps: list[Any]) -> None:
        """Raise ResizeAbandoned unless what the base layout relied on holds: each inherited allocation lives the
        base one's lifetime, and no rebuilt step reads and writes one buffer (or texture)."""
        for new, old in self.pairs:
            if new.born != old.born or new.dies != old.dies:
                raise ResizeAbandoned(f"an allocation of tick {new.born} lives to {new.dies}, not {old.dies}")
        shared = [a for a in _bound_allocations(steps) if id(a) in self.inherited or id(a) in self.base_allocations]
        for i, others in step_conflicts(steps, shared).items():
            for j in others:
                if program.one_resource(shared[i], shared[j]):
                    raise ResizeAbandoned("a rebuilt step reads and writes one buffer")
        for step in steps:
            if isinstance(step, Draw):
                targets = {id(t.texture) for t in step.targets if t.texture is not None}
                if any(getattr(r, "texture", None) is not None and id(r.texture) in targets for r in step.extra):
                    raise ResizeAbandoned("a rebuilt draw reads a texture it renders to")
                if len(step.targets) > 1 and any(id(t) in self.base_textures for t in step.targets):
                    raise ResizeAbandoned("a rebuilt draw renders into inherited textures beside others")


def _bound_allocations(steps: list[Any]) -> list[Allocation]:
    """The allocations the steps bind or copy between, each once."""
    seen: dict[int, Allocation] = {}
    for step in steps:
        for alloc, _size in getattr(step, "storage", None) or ():
            seen.setdefault(id(alloc), alloc)
        for end in (getattr(step, "src", None), getattr(step, "dst", None)):
            if isinstance(end, Allocation):
                seen.setdefault(id(end), end)
    return list(seen.values())


def finish_resize(program: Any, plan: Plan, resize: Resize, steps: list[Any], end: int) -> None:
    """Lay out a re-sized ``plan`` (its walk done, ``steps`` the ones it built): check what the base layout relied
    on, lay its own allocations out in delta arenas (``program.layout_memory``), and count the memory it uses, the
    base plan's included, against the run's budget. The caller binds ``steps``."""
    if end != resize.record.end:
        raise ResizeAbandoned(f"the trace ended at tick {end}, not {resize.record.end}")
    resize.check(program, steps)
    predict(resize.record, resize)
    own = Plan(steps=steps, allocations=resize.delta)
    program.layout_memory(own, end)
    base = resize.base
    plan.arenas, plan.arena_bytes, plan.base = own.arenas, base.arena_bytes + own.arena_bytes, base
    plan.peak_live_bytes = live_peak(resize.kept_allocations() + plan.allocations, end,
                                     {**resize.record.scratch, **program.scratch_requests})
    if program.control is not None:
        check_device_bytes(program.control, f"the plan of graph '{program.graph.name}' re-sized",
                           plan.arena_bytes, program.ctx.held.nbytes,
                           "its intermediates (its base plan's included; device tensors held by the caller count)")


@dataclass(slots=True)
class KeptRun:
    """Consecutive layers ``[start, stop)`` a resize keeps, with what keeping each of them one by one
    (``Recording.keep_base_layer``) would add, gathered: their steps, fault slots, host reads, placements, GPU layer
    count, records with allocations, shape layers to adopt ((index, layer, outputs, the Shape/Size input's name)),
    outputs by name, and the reference counting that can matter, per layer at its last tick: ``events`` of (tick,
    outputs that may hold a rebuilt layer's allocation, names dying there that may, unread outputs that may).
    Everything else a kept layer holds is the base plan's, whose lifetimes its layout already has."""

    start: int
    stop: int
    end_tick: int
    steps: list[Any]
    checks: list[Any]
    host_reads: list[str]
    placements: list[Placement]
    gpu: int
    records: list[LayerRecord]
    adopts: list[tuple[int, Any, tuple[Any, ...], str | None]]
    outputs: dict[str, Any]
    events: list[tuple[int, list[Any], list[str], list[Any]]]


@dataclass
class Prediction:
    """The layers the last resize from a trace kept and the tensors it found dirty. A decoder's next token changes
    what the last one changed, so the next resize keeps the same layers: run by run (``KeptRun``, built once per
    prediction), without deciding each, as long as every tensor it has found dirty so far is one of ``dirty``
    (the kept layers read none of those). Once one is not, it decides each layer as a resize without a
    prediction does."""

    kept: frozenset[int]
    dirty: frozenset[str]
    runs: dict[int, KeptRun] | None = None  # by first layer

    def kept_runs(self, record: TraceRecord, base: Plan, graph: Graph, placer: Any,
                  shape_kinds: list[int]) -> dict[int, KeptRun]:
        """The runs of kept layers of a resize from ``record`` (the trace of ``base``), built on first use."""
        if self.runs is None:
            self.runs = _kept_runs(self.kept, record, base, graph, placer, shape_kinds)
        return self.runs


def predict(record: TraceRecord, resize: Resize) -> None:
    """Keep what ``resize`` (planned from ``record``, laid out and checked) kept, for the next resize from it."""
    kept, dirty = frozenset(resize.kept_indices), frozenset(resize.dirty)
    old = record.prediction
    if old is not None and old.kept == kept:
        # (Layers kept both times read neither run's dirty tensors: either run's runs stand for both.)
        if not dirty <= old.dirty:
            old.dirty = old.dirty | dirty
        return
    record.prediction = Prediction(kept, dirty)


def _kept_runs(kept: frozenset[int], record: TraceRecord, base: Plan, graph: Graph, placer: Any,
               shape_kinds: list[int]) -> dict[int, KeptRun]:
    layers = record.layers
    # A kept layer's own allocations are never stood in by a rebuilt layer's (those inherit only allocations
    # born at their own ticks): values in them count no references in a resize. The others may.
    own: set[int] = set()
    for i in kept:
        start, stop = layers[i].allocations
        own.update(id(a) for a in base.allocations[start:stop])

    def may_count(value: Any) -> bool:
        return isinstance(value, GTensor) and value.alloc is not None and not value.alloc.persistent \
            and id(value.alloc) not in own

    quiet = {name for i in kept for name, value in zip(graph.layers[i].outputs, layers[i].outputs, strict=False)
             if name and not may_count(value)}
    runs: dict[int, KeptRun] = {}
    order = sorted(kept)
    k = 0
    while k < len(order):
        start = stop = order[k]
        while k < len(order) and order[k] == stop:
            k += 1
            stop += 1
        run = KeptRun(start, stop, layers[stop - 1].tick_end, [], [], [], [], 0, [], [], {}, [])
        for i in range(start, stop):
            layer, rec = graph.layers[i], layers[i]
            run.steps.extend(rec.steps)
            run.checks.extend(rec.checks)
            run.host_reads.extend(rec.host_reads)
            run.placements.append(rec.placement)
            run.gpu += rec.kind == "gpu"
            if rec.allocations[0] != rec.allocations[1]:
                run.records.append(rec)
            if shape_kinds[i]:
                source = layer.inputs[0] if shape_kinds[i] == 1 and layer.inputs else None
                run.adopts.append((i, layer, rec.outputs, source))
            adds = []
            for name, value in zip(layer.outputs, rec.outputs, strict=False):
                if name:
                    run.outputs[name] = value
                    if may_count(value):
                        adds.append(value)
            dying = [n for n in placer.dies_after[i] if n not in quiet]
            unread = [rec.outputs[j] for j in placer.unread_outputs[i]
                      if j < len(rec.outputs) and may_count(rec.outputs[j])]
            if adds or dying or unread:
                run.events.append((rec.tick_end, adds, dying, unread))
        runs[start] = run
    return runs


def keepable(kind: str, layer: Any, outputs: Any) -> bool:
    """Whether a resize may keep a layer as a full trace recorded it: a GPU or host layer without subgraphs (whose
    captures it would have to follow) none of whose outputs holds a host copy of that run's values (a view of an
    input: a later run's layers must see their own run's)."""
    if kind not in ("gpu", "host") or any(isinstance(v, Graph) for v in layer.attrs.values()):
        return False
    return not any(isinstance(o, GTensor) and o.host is not None and not (o.alloc is not None and o.alloc.persistent)
                   for o in outputs or ())
