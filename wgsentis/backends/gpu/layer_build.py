"""Building one layer on the GPU: where the placer puts it, and on the GPU, what its builder records.

``LayerBuilder.place`` asks the placer (``placement.Placer``) where a layer runs and, for a GPU layer, calls its
builder on the arguments as that builder may see them: narrow types widened for builders that know only float32
and int32, the run's host copies hidden (a builder would bake them into a plan replayed on other values). A
builder that gives up makes the layer a fallback, with the reason; one past a device limit is built again in
tiles where the backend binds windows of buffers (``outer_tiles.tiled_build``). Its outputs come back in the
model's types (float16, int8... rounded or retyped), with the bounds of any int64 results. Used by the layer loop
of a recording (``recording.Recording``) and by control-flow subgraphs (``subgraphs.record_subgraph``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from wgsentis.backends.gpu.dtypes import NARROW_TYPES, TooLargeForDevice, gpu_type_of
from wgsentis.backends.gpu.outer_tiles import tiled_build
from wgsentis.backends.gpu.placement import ANY_INT32, Placer, int64_result_bounds
from wgsentis.backends.gpu.tensors import (
    Allocation,
    Declined,
    GTensor,
    NeedsDeviceValues,
    SubgraphDeclined,
    describe_arguments,
)
from wgsentis.errors import PASS_THROUGH_ERRORS, LayerError, WgSentisError
from wgsentis.ir import Graph, Layer
from wgsentis.ops.spec import spec_of

_WIDE = (np.dtype(np.float32), np.dtype(np.int32))


def without_run_host_copy(value: Any) -> Any:
    """A device argument as its builder may see it: without the host copy of a value of this run (an input, a
    view of one), which a builder would bake into the plan, replayed on other values; host inputs a builder
    reads are declared (``host_inputs``) and so part of the plan's signature. Constants keep theirs."""
    if not isinstance(value, GTensor) or value.host is None or value.alloc is None or value.alloc.persistent:
        return value
    bare = GTensor(value.alloc, value.shape, value.dtype, value.name, chunks=value.chunks, first=value.first)
    bare.layout = value.layout
    bare.bound = value.bound  # (a bound the plan checks at every upload, not this run's values)
    return bare


def narrow_host_inputs(args: list[Any]) -> bool:
    """Whether every device argument is a narrow-typed tensor with a host copy (and there is one)."""
    device = [a for a in args if isinstance(a, GTensor)]
    return bool(device) and all(a.host is not None and a.dtype in NARROW_TYPES for a in device)


def widened(rec: Any, value: Any) -> Any:
    """A narrow-typed argument as its wide type, for builders that know only float32 and int32: a device tensor
    retyped in place (the words already hold the wide values), a host array converted."""
    if isinstance(value, GTensor) and value.dtype in NARROW_TYPES:
        return rec.retype(value, NARROW_TYPES[value.dtype])
    if isinstance(value, np.ndarray) and value.dtype in NARROW_TYPES:
        return value.astype(NARROW_TYPES[value.dtype])
    return value


class LayerBuilder:
    """Places layers of ``graph`` and runs the GPU layers' builders for a program: ``free_temporaries`` is the
    program's (frees a builder's leftovers), ``tiles_past_binding`` whether a layer past the storage binding limit
    is built again in tiles (``GPUProgram.tiles_past_binding``)."""

    def __init__(self, placer: Placer, graph: Graph,
                 free_temporaries: Callable[[list[Allocation], set[int] | frozenset[int]], None],
                 tiles_past_binding: bool) -> None:
        self.placer = placer
        self.graph = graph
        self.free_temporaries = free_temporaries
        self.tiles_past_binding = tiles_past_binding

    def place(self, rec: Any, layer: Layer, args: list[Any], top_scope: Callable[[str], Any]) -> tuple[str, str, Any]:
        """Where a layer runs ("gpu", "host" or "fallback"), why, and (on the GPU) the outputs its builder recorded
        into ``rec``. ``top_scope`` looks up the recording's values for a control-flow builder at the top level."""
        kind, reason = self.placer.decide(layer, args)
        rec.made_and_kept = []
        if kind != "gpu":
            return kind, reason, None
        gpu = self.placer.builder(layer)
        start = len(rec.steps)
        rec.layer_allocs = []
        rec.scratch_calls = []  # (a recorder without scratch textures keeps it empty)
        narrow_in = {a.dtype for a in args if isinstance(a, GTensor | np.ndarray) and a.dtype in NARROW_TYPES}
        if narrow_in and not gpu.narrow_types:
            args = [widened(rec, a) for a in args]
        if not gpu.reads_scope:  # (control flow reads its conditions through read_scalar, which registers them)
            args = [without_run_host_copy(a) for a in args]
        if gpu.reads_scope and getattr(rec, "scope", None) is None:
            rec.scope = top_scope  # a top-level layer's outer scope
        try:
            outputs = gpu.build(rec, layer, *args, **layer.attrs)
            if outputs is NotImplemented:
                reason = f"its program declined these inputs: {describe_arguments(layer, args)}"
        except Declined as exc:
            outputs, reason = NotImplemented, str(exc)
        except TooLargeForDevice as exc:
            outputs, reason = self._tiled(rec, layer, gpu.build, args, start, exc)
        except NeedsDeviceValues as exc:
            # Tracing cannot read the device: this run is recorded as it runs instead (the read is a sync).
            outputs, reason = NotImplemented, str(exc)
        except SubgraphDeclined as exc:
            outputs, reason = NotImplemented, f"its subgraph cannot run on the GPU: {exc}"
        except PASS_THROUGH_ERRORS:
            raise
        except WgSentisError as exc:
            raise LayerError(layer.name, layer.op_type, str(exc)) from exc
        except Exception as exc:
            raise LayerError(layer.name, layer.op_type, f"GPU program: {type(exc).__name__}: {exc}") from exc
        outputs = NotImplemented if outputs is NotImplemented else (
            outputs if isinstance(outputs, tuple) else (outputs,))
        # Buffers the builder made but did not return are its temporaries (or leftovers of a build
        # that gave up): free them now. Later layers reusing them run after this layer's dispatches.
        kept = {id(o.alloc) for o in outputs if isinstance(o, GTensor)} if outputs is not NotImplemented else set()
        self.free_temporaries(rec.layer_allocs, kept)
        # What this builder made and returned (record_subgraph hands it to the enclosing layer's temporaries;
        # a returned view of an outer tensor or a constant is not the builder's to free).
        rec.made_and_kept = [alloc for alloc in rec.layer_allocs if id(alloc) in kept]
        rec.built_allocs = rec.layer_allocs  # every allocation the builder made, in order (layer_reuse)
        rec.layer_allocs = []
        if outputs is NotImplemented:
            del rec.steps[start:]
            return "fallback", reason, None
        if any(isinstance(o, GTensor) and o.dtype == np.int64 for o in outputs):
            bounds = int64_result_bounds(layer, args)
            for o, bound in zip(outputs, bounds, strict=False):
                if isinstance(o, GTensor) and o.dtype == np.int64:
                    o.bound = min(bound, ANY_INT32)
        if (narrow_in and not gpu.narrow_types) or any(isinstance(o, GTensor) and o.dtype in NARROW_TYPES
                                                       for o in outputs):
            # (A builder that takes narrow types as they are gives its outputs their dtypes itself.)
            outputs = tuple(self._narrowed(rec, layer, o, n, set() if gpu.narrow_types else narrow_in)
                            for o, n in zip(outputs, layer.outputs, strict=False))
        return "gpu", "", outputs

    def _tiled(self, rec: Any, layer: Layer, build: Any, args: list[Any], start: int,
               exc: TooLargeForDevice) -> tuple[Any, str]:
        """A layer whose builder went past a device limit, built again in tiles along its leading axes where the
        backend binds windows of storage buffers (``tiles_past_binding``: outer_tiles.tiled_build); the outputs
        (NotImplemented where it does not apply) and the reason it falls back otherwise."""
        reason = f"past a device limit: {exc}"
        if not self.tiles_past_binding:
            return NotImplemented, reason
        del rec.steps[start:]  # what the whole-tensor build recorded before it gave up
        self.free_temporaries(rec.layer_allocs, frozenset())
        rec.layer_allocs = []
        try:
            outputs = tiled_build(rec, layer, build, args)
        except TooLargeForDevice as again:
            return NotImplemented, f"past a device limit: {again}"
        except Declined as declined:
            return NotImplemented, str(declined)
        return outputs, reason

    def _narrowed(self, rec: Any, layer: Layer, out: Any, name: str, narrow_in: set[np.dtype]) -> Any:
        """A builder's output in its logical dtype: where the model's types (or, failing them, a narrow input of the
        same storage) say the output is narrow (float16, int8...) but the builder computed it wide, its values
        are rounded or wrapped into the narrow type (not for ops that only move or select values)."""
        if not isinstance(out, GTensor) or out.dtype not in _WIDE:
            return out
        info = self.graph.value_info.get(name)
        want = info.dtype if info is not None and info.dtype is not None else None
        if want is None:
            same = [d for d in narrow_in if NARROW_TYPES[d] == out.dtype]
            want = same[0] if len(same) == 1 else None
        if want is None or np.dtype(want) not in NARROW_TYPES or gpu_type_of(want) != out.gpu_type:
            return out
        # (Ops whose outputs only move, select or compare input values: a narrow input's need no rounding.)
        if spec_of(layer.op_type, layer.domain).preserves_values:
            return rec.retype(out, want)
        return rec.narrowed(out, want)
