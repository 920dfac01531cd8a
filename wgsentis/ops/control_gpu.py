"""GPU programs of control flow, for both GPU backends: If records its chosen branch's layers into the plan, Loop
and Scan their body once per iteration with the loop driven from the host (``GPUProgram.record_subgraph``). Loop-carried
values and scan outputs stay on the device; a condition the host knows (a shape, an input read on the host, a
constant, the iteration count) costs nothing, one computed on the device is read back as one word per If or per
iteration (``GPUProgram.read_scalar``: a counted download, and the run is recorded as it runs, since its steps
depend on the value). Where a layer of a branch or body would fall back, the whole If or Loop falls back to the
CPU kernels in control.py, as before.

The plan holds every iteration's steps, all inside the Loop's layer. Memory is not: an iteration's intermediates
die after their last reader and its carried values once the next iteration has read them, on the recording's
clock, which ticks per body layer, so a 500-step loop needs about one iteration's memory (plus its scan outputs).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from wgsentis.backends.gpu.tensors import SubgraphDeclined
from wgsentis.ops import registry
from wgsentis.ops.control import (
    UNBOUNDED_TRIP_COUNT,
    Accumulation,
    need_graph,
    scalar_int,
    scalar_truth,
)
from wgsentis.ops.registry import GPU_COMPUTE, GPU_PIXEL, register
from wgsentis.run_control import check_loop_iterations

# Scan outputs are stacked by Concat in groups of at most this many (bindings per program are limited).
_CONCAT_GROUP = 6
# The most body layers one Loop or Scan records across its iterations (trip count x body layers, judged before
# the first iteration). The plan holds every iteration's steps inside the one layer; an iteration's
# intermediates share memory with the next one's (record_subgraph frees them after their last reader, and the
# clock of their lifetimes ticks per body layer), so what grows with the trip count is the steps' host objects
# and the time to record them: SLANet's 501 x 166 layers record in about 20 s on lavapipe and replay in 5 s.
# Past this the loop runs on the host, as a fallback layer. A loop with no trip count is not bounded here (its
# condition ends it; the run's timeout still applies).
MAX_UNROLLED_LAYERS = 1 << 18


def _check_unrolled(body, iterations: int) -> None:
    recorded = iterations * len(body.layers)
    if recorded > MAX_UNROLLED_LAYERS:
        raise SubgraphDeclined(f"{iterations} iterations of a {len(body.layers)}-layer body would record {recorded} "
                               f"layers, past {MAX_UNROLLED_LAYERS}: the loop runs on the host")


def _alloc_ids(values: Any) -> set[int]:
    return {id(v.alloc) for v in values if getattr(v, "alloc", None) is not None}


def _on_both(op: str, since: int):
    """Register on both GPU backends. A condition or trip count is not declared a host input: that would pull
    whatever computes it onto the host (placement.host_tensors); ``read_scalar`` takes the host's copy where there
    is one, else reads the device."""

    def wrap(fn):
        for backend in (GPU_COMPUTE, GPU_PIXEL):
            register(op, since, backend=backend, reads_scope=True, narrow_types=True)(fn)
        return fn

    return wrap


def _standard(rec, op: str, opset: int):
    impl = registry.lookup(op, "", opset, rec.program.backend)
    if impl is None:
        raise SubgraphDeclined(f"no {op} program to stack scan outputs")
    return impl.build


@_on_both("If", 1)
def if_(rec, layer, cond, *, then_branch=None, else_branch=None, **attrs):
    """The chosen branch's layers, recorded in place of the If."""
    if cond is None or getattr(cond, "size", 1) != 1:
        return NotImplemented  # the CPU kernel names the bad condition
    chosen = scalar_truth(rec.program.read_scalar(rec, cond, "condition"), "If condition")
    branch = need_graph(then_branch if chosen else else_branch, "If", "then_branch/else_branch")
    outputs = rec.program.record_subgraph(rec, branch, [], rec.scope)
    if len(outputs) != len(layer.outputs):
        return NotImplemented
    return tuple(outputs) if len(outputs) != 1 else outputs[0]


def _stack(rec, layer, values: list[Any], axis: int = 0) -> Any:
    """Per-iteration scan values stacked along a new axis ``axis``, on the device."""
    unsqueeze = _standard(rec, "Unsqueeze", 13)
    concat = _standard(rec, "Concat", 13)
    parts = []
    for v in values:
        part = unsqueeze(rec, layer, v, np.array([axis], np.int64))
        if part is NotImplemented:
            raise SubgraphDeclined("scan outputs cannot be stacked on the device")
        parts.append(part)
    while len(parts) > 1:
        merged = []
        for k in range(0, len(parts), _CONCAT_GROUP):
            group = parts[k:k + _CONCAT_GROUP]
            out = group[0] if len(group) == 1 else concat(rec, layer, *group, axis=axis)
            if out is NotImplemented:
                raise SubgraphDeclined("scan outputs cannot be stacked on the device")
            merged.append(out)
        parts = merged
    return parts[0]


@_on_both("Loop", 1)
def loop(rec, layer, M=None, cond=None, *v_initial, body=None, **attrs):
    """The body recorded once per iteration: the iteration number and the condition as host values, the carried
    values passed on as the device tensors the previous iteration made, scan outputs stacked at the end."""
    body = need_graph(body, "Loop", "body")
    n_carried = len(v_initial)
    n_scan = len(body.outputs) - 1 - n_carried
    if n_scan < 0 or len(body.inputs) != 2 + n_carried or any(isinstance(v, list) or v is None for v in v_initial):
        return NotImplemented  # sequence or optional carried values: the CPU kernel
    program = rec.program
    trip_count = None if M is None else scalar_int(program.read_scalar(rec, M, "trip count"), "Loop trip count M")
    keep_going = True if cond is None else scalar_truth(program.read_scalar(rec, cond, "condition"), "Loop condition")
    iter_dtype = np.dtype(np.int64) if M is None else np.dtype(getattr(M, "dtype", np.int64))
    unbounded = trip_count is None or trip_count >= UNBOUNDED_TRIP_COUNT
    carried = list(v_initial)
    scans: list[list[Any]] = [[] for _ in range(n_scan)]
    scan_allocs: set[int] = set()
    # The scan outputs kept so far (device tensors or host values) against the run's memory budget, as the CPU
    # kernel counts them: held until the end plus the stacked copy, checked before an iteration's are kept.
    accumulation = Accumulation(program.control, layer)
    if trip_count is not None and not unbounded:
        _check_unrolled(body, trip_count)
    iteration = 0
    while keep_going and (trip_count is None or iteration < trip_count):
        if program.control is not None:
            program.control.check(layer)
        if unbounded:  # the same bound, and the same LayerError, as the CPU kernel: falling back would rerun it all
            check_loop_iterations(program.control, layer, iteration)
        outputs = program.record_subgraph(
            rec, body, [np.array(iteration, dtype=iter_dtype), np.array(keep_going), *carried], rec.scope)
        keep_going = scalar_truth(program.read_scalar(rec, outputs[0], "body condition"), "Loop body condition output")
        if n_scan:
            accumulation.add(scans, list(outputs[1 + n_carried:1 + n_carried + n_scan]))
            scan_allocs.update(_alloc_ids(outputs[1 + n_carried:1 + n_carried + n_scan]))
        # The previous iteration's carried values (and this one's condition) are dead once read: their memory
        # serves the next iteration.
        program.release(rec, [*carried, outputs[0]], scan_allocs | _alloc_ids(outputs[1:1 + n_carried]))
        carried = list(outputs[1:1 + n_carried])
        iteration += 1
    if n_scan and iteration == 0:
        return NotImplemented  # empty scan outputs take their shape from the body's types: the CPU kernel
    if any(isinstance(v, list) for values in scans for v in values):
        return NotImplemented
    results = carried + [_stack(rec, layer, values) for values in scans]
    results = results[:max(len(layer.outputs), 1)]
    return tuple(results) if len(results) != 1 else results[0]


@_on_both("Scan", 9)
def scan(rec, layer, *inputs, body=None, num_scan_inputs=None, scan_input_axes=None, scan_input_directions=None,
         scan_output_axes=None, scan_output_directions=None, **attrs):
    """The body recorded once per step: each scan input's slice taken on the device (Gather at the step), states
    passed on as device tensors, scan outputs stacked along their axes at the end."""
    body = need_graph(body, "Scan", "body")
    if num_scan_inputs is None or any(isinstance(v, list) or v is None for v in inputs):
        return NotImplemented
    n_states = len(inputs) - num_scan_inputs
    n_out = len(body.outputs) - n_states
    if n_states < 0 or n_out < 0:
        return NotImplemented
    states, scan_inputs = list(inputs[:n_states]), list(inputs[n_states:])
    in_axes = [a + x.ndim if a < 0 else a for a, x in zip(list(scan_input_axes or [0] * num_scan_inputs),
                                                           scan_inputs, strict=True)]
    in_dirs = list(scan_input_directions or [0] * num_scan_inputs)
    out_axes = list(scan_output_axes or [0] * n_out)
    out_dirs = list(scan_output_directions or [0] * n_out)
    lengths = {x.shape[a] for x, a in zip(scan_inputs, in_axes, strict=True)}
    if len(lengths) != 1 or 0 in lengths:
        return NotImplemented  # mismatched or empty sequences: the CPU kernel reports or shapes them
    steps = lengths.pop()
    gather = _standard(rec, "Gather", 13)
    program = rec.program
    collected: list[list[Any]] = [[] for _ in range(n_out)]
    scan_allocs: set[int] = set()
    accumulation = Accumulation(program.control, layer)  # the collected outputs against the budget, as on the CPU
    _check_unrolled(body, steps)
    for t in range(steps):
        if program.control is not None:
            program.control.check(layer)
        elements = []
        for x, axis, reverse in zip(scan_inputs, in_axes, in_dirs, strict=True):
            element = gather(rec, layer, x, np.array(steps - 1 - t if reverse else t, np.int64), axis=axis)
            if element is NotImplemented:
                return NotImplemented
            elements.append(element)
        outputs = program.record_subgraph(rec, body, [*states, *elements], rec.scope)
        scan_allocs.update(_alloc_ids(outputs[n_states:]))
        program.release(rec, [*states, *elements], scan_allocs | _alloc_ids(outputs[:n_states]))
        states = list(outputs[:n_states])
        if n_out:
            accumulation.add(collected, list(outputs[n_states:n_states + n_out]))
    results = list(states)
    for k, values in enumerate(collected):
        if any(isinstance(v, list) for v in values):
            return NotImplemented
        values = values[::-1] if out_dirs[k] else values
        rank = np.ndim(values[0]) + 1
        axis = out_axes[k] + rank if out_axes[k] < 0 else out_axes[k]
        if not 0 <= axis < rank:
            return NotImplemented
        results.append(_stack(rec, layer, values, axis))
    return tuple(results) if len(results) != 1 else results[0]
