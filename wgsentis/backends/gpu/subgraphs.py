"""Control-flow subgraphs on the GPU: an If's branch, a Loop's or a Scan's body recorded as part of its layer.

The If, Loop and Scan programs (``ops/control_gpu.py``) call ``GPUProgram.record_subgraph``, which records the
subgraph's layers into the recording in progress (``recording.Recording``) here: each one a GPU program or a host
computation, SubgraphDeclined where one would fall back (the enclosing layer then runs on the host as a whole).
The subgraph's own intermediates are freed after their last reader, so a Loop's iterations reuse one another's
memory; ``SubgraphDeaths`` keeps, per subgraph, which names die after which layer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from wgsentis.backends.gpu.placement import host_of, run_step
from wgsentis.backends.gpu.recording import Recording
from wgsentis.backends.gpu.tensors import GTensor, SubgraphDeclined
from wgsentis.errors import RunInterruptedError
from wgsentis.ir import Graph, captured_names


class SubgraphDeaths:
    """Per subgraph, the names its layers make that are dead once each layer has run. Kept by the program: a Loop
    asks once per iteration, and its body is the same graph on every run."""

    def __init__(self) -> None:
        self._by_graph: dict[int, tuple[Graph, list[list[str]]]] = {}

    def of(self, graph: Graph) -> list[list[str]]:
        """Per layer of ``graph``: the names its layers make that are dead once it has run (read last by it, or
        never read), graph outputs excepted."""
        cached = self._by_graph.get(id(graph))
        if cached is not None and cached[0] is graph:
            return cached[1]
        last: dict[str, int] = {}
        for index, layer in enumerate(graph.layers):
            for name in set(layer.inputs) | captured_names(layer):
                if name:
                    last[name] = index
        kept = {info.name for info in graph.outputs}
        deaths: list[list[str]] = [[] for _ in graph.layers]
        for index, layer in enumerate(graph.layers):
            for name in layer.outputs:
                if name and name not in kept:
                    deaths[max(index, last.get(name, index))].append(name)
        self._by_graph[id(graph)] = (graph, deaths)
        return deaths


def record_subgraph(recording: Recording, deaths: SubgraphDeaths, rec: Any, graph: Graph, inputs: list[Any],
                    scope: Callable[[str], Any]) -> list[Any]:
    """Record ``graph``'s layers into ``rec`` as part of the current layer of ``recording``, its inputs bound to
    ``inputs`` and the names it does not define looked up in ``scope`` (a function of a name): every layer a GPU
    program or a host computation; SubgraphDeclined where one would fall back. Returns the subgraph's outputs
    (device tensors or host values)."""
    env: dict[str, Any] = {info.name: value for info, value in zip(graph.inputs, inputs, strict=False)}

    def value(name: str) -> Any:
        if name in env:
            return env[name]
        if name in graph.constants:
            return graph.constants[name]
        return scope(name)

    outer_scope = getattr(rec, "scope", None)
    try:
        _record_layers(recording, deaths.of(graph), rec, graph, env, value, outer_scope)
    except RunInterruptedError as exc:
        exc.inside(rec.layer.name, rec.layer.op_type)  # name the path down to the layer, as the CPU does
        raise
    return [value(info.name) for info in graph.outputs]


def _record_layers(recording: Recording, dead_after: list[list[str]], rec: Any, graph: Graph, env: dict[str, Any],
                   value: Callable[[str], Any], outer_scope: Any) -> None:
    # The subgraph's own intermediates are freed after their last reader, as the top level's are: a Loop's
    # iterations then reuse one another's memory instead of holding every iteration's at once.
    program = recording.program
    made: set[int] = set()  # allocations the subgraph's layers made and returned
    holders: dict[int, int] = {}  # such an allocation's id -> names bound to it (views share one)
    for index, layer in enumerate(graph.layers):
        program.advance_clock()
        args = [value(n) if n else None for n in layer.inputs]
        scoped = [isinstance(a, GTensor) for a in args]
        if program.control is not None:
            program.control.before_layer(layer, args)
        outer_allocs = rec.layer_allocs
        rec.scope = value
        try:
            kind, reason, outputs = recording.place(rec, layer, args)
        finally:
            rec.scope = outer_scope
        rec.layer_allocs = outer_allocs + rec.made_and_kept
        made.update(id(alloc) for alloc in rec.made_and_kept)
        if kind == "host":
            outputs = run_step(program.placer.subgraph_step(layer), [host_of(a) for a in args])
        elif kind != "gpu":
            raise SubgraphDeclined(f"{layer.op_type} '{layer.name}' would fall back ({reason})")
        # An input of the run that a layer of the subgraph read on the host is part of the plan's signature.
        for n, a, was_device in zip(layer.inputs, args, scoped, strict=False):
            if was_device and isinstance(a, np.ndarray) and n in recording.plan.input_tensors and n not in env:
                recording.note_host_read(n)
        for name, out in zip(layer.outputs, outputs, strict=False):
            if name:
                env[name] = out
                if isinstance(out, GTensor) and id(out.alloc) in made:
                    holders[id(out.alloc)] = holders.get(id(out.alloc), 0) + 1
        for name in dead_after[index]:
            out = env.get(name)
            if isinstance(out, GTensor) and id(out.alloc) in holders:
                holders[id(out.alloc)] -= 1
                if holders[id(out.alloc)] == 0:
                    program.free_temporaries([out.alloc])
