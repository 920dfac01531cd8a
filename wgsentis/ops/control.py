"""Control flow (If, Loop, Scan), sequence and optional operators.

Subgraphs arrive as ``wgsentis.model.Graph`` attributes and run through ``ctx.run_graph``, which
keeps the enclosing scope's names visible. A sequence value is a Python list of arrays; an empty
optional is None (an optional holding a sequence holds a list). Kernels never mutate an input
list: sequence ops return new lists, so loop-carried sequences stay safe to share.
"""

from __future__ import annotations

import numpy as np

from wgsentis.ir import Graph
from wgsentis.ops.registry import register
from wgsentis.ops.tensor import check_indices
from wgsentis.run_control import check_loop_iterations

# -- shared helpers ---------------------------------------------------------------------------


def _pack(outputs: list):
    """A kernel result: the single value, or a tuple when the node has several outputs."""
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


def need_graph(graph, op: str, name: str) -> Graph:
    """``graph``, the subgraph attribute ``name`` of ``op``; ValueError where the layer has none."""
    if not isinstance(graph, Graph):
        raise ValueError(f"{op} needs the graph attribute '{name}'")
    return graph


def scalar_int(value, what: str) -> int:
    """A one-element input (a trip count, an iteration) as an int; ValueError naming ``what`` otherwise."""
    arr = np.asarray(value)
    if arr.size != 1:
        raise ValueError(f"{what} must be a scalar, got shape {arr.shape}")
    return int(arr.reshape(-1)[0])


def scalar_truth(value, what: str) -> bool:
    """A one-element condition as a bool; ValueError naming ``what`` otherwise."""
    arr = np.asarray(value)
    if arr.size != 1:
        raise ValueError(f"{what} must be a single boolean, got shape {arr.shape}")
    return bool(arr.reshape(-1)[0])


class Accumulation:
    """What a Loop, Scan or SequenceMap holds across iterations: per-iteration outputs kept until the end,
    and the stacked copy made of the tensors among them then. ``add`` checks both against the run's
    memory budget before an iteration's values are kept, so a loop whose outputs grow without bound stops
    with ResourceLimitError as soon as they pass it. The GPU Loop programs (control_gpu.py) keep theirs
    here too, device tensors and host values alike, so every backend stops at the same iteration."""

    __slots__ = ("control", "held", "iterations", "layer", "stacked")

    def __init__(self, control, layer) -> None:
        self.control = control if control is not None and control.memory_limit is not None else None
        self.layer = layer
        self.held = 0  # bytes of the kept per-iteration values
        self.stacked = 0  # bytes the final stacking of the kept tensors will allocate
        self.iterations = 0

    def add(self, collected: list[list], values: list, stacks: bool = True) -> None:
        """Append ``values`` (one iteration's, one per output) to ``collected``, after the budget check;
        ``stacks``: whether the tensors among them are stacked at the end (not when kept as sequences)."""
        if self.control is not None and values:
            tensors = sum(_nbytes(v) for v in values if not isinstance(v, list)) if stacks else 0
            added = sum(_nbytes(v) for v in values)
            held, stacked = self.held + added, self.stacked + tensors
            biggest = max(values, key=_nbytes)
            shape = None if isinstance(biggest, list) else (self.iterations + 1, *_shape(biggest))
            self.control.check_bytes(
                self.layer, shape, held + stacked,
                f"{len(values)} per-iteration output(s) after {self.iterations + 1} iterations: {held:,} bytes held "
                f"until the end, {stacked:,} more for stacking them")
            self.held, self.stacked = held, stacked
        self.iterations += 1
        for k, value in enumerate(values):
            collected[k].append(value)


def _nbytes(value) -> int:
    """Bytes of a tensor (a host array or a device tensor), or of a sequence's tensors (None: 0)."""
    if value is None:
        return 0
    if isinstance(value, list):
        return sum(_nbytes(v) for v in value)
    nbytes = getattr(value, "nbytes", None)
    return int(nbytes) if isinstance(nbytes, int) else int(np.asarray(value).nbytes)


def _shape(value) -> tuple[int, ...]:
    """A tensor's shape, host array or device tensor."""
    shape = getattr(value, "shape", None)
    return tuple(shape) if shape is not None else np.shape(value)


def _empty_scan_output(graph: Graph, index: int) -> np.ndarray:
    """The stacked output of zero iterations: shape (0, *element shape) when the body declares it."""
    info = graph.outputs[index]
    dtype = info.dtype if info.dtype is not None else np.dtype(np.float32)
    shape = info.shape if info.shape is not None and all(isinstance(d, int) for d in info.shape) else ()
    return np.zeros((0, *shape), dtype=dtype)


# -- If ---------------------------------------------------------------------------------------


@register("If", 1)
def if_(ctx, cond, *, then_branch=None, else_branch=None):
    """Run ``then_branch`` or ``else_branch``; its outputs are the node's outputs."""
    branch = then_branch if scalar_truth(cond, "If condition") else else_branch
    branch = need_graph(branch, "If", "then_branch/else_branch")
    outputs = ctx.run_graph(branch, [])
    if len(outputs) != ctx.num_outputs:
        raise ValueError(f"If: branch '{branch.name}' gives {len(outputs)} outputs, node has {ctx.num_outputs}")
    return _pack(outputs)


# -- Loop -------------------------------------------------------------------------------------


# A trip count at least this large is exporters' "infinite": such a Loop is bounded as one with none, by the run's
# ``max_loop_iterations`` (run_control.check_loop_iterations).
UNBOUNDED_TRIP_COUNT = 2**62


@register("Loop", 1)
def loop(ctx, M=None, cond=None, *v_initial, body=None):
    """Generic loop: trip count and/or condition; loop-carried values, then stacked scan outputs.

    Loop-carried values may be tensors, sequences (lists) or optionals (None). Each scan output
    stacks its per-iteration values along a new leading axis. Every iteration is a checkpoint of the run
    (cancel, timeout), and the scan outputs kept so far are checked against its memory budget.
    """
    body = need_graph(body, "Loop", "body")
    n_carried = len(v_initial)
    n_scan = len(body.outputs) - 1 - n_carried
    if n_scan < 0 or len(body.inputs) != 2 + n_carried:
        raise ValueError(f"Loop: body has {len(body.inputs)} inputs / {len(body.outputs)} outputs for "
                         f"{n_carried} loop-carried values")
    trip_count = None if M is None else scalar_int(M, "Loop trip count M")
    keep_going = True if cond is None else scalar_truth(cond, "Loop condition")
    iter_dtype = np.int64 if M is None else np.asarray(M).dtype
    carried = list(v_initial)
    scans: list[list] = [[] for _ in range(n_scan)]
    accumulation = Accumulation(ctx.control, ctx.layer)
    iteration = 0
    unbounded = trip_count is None or trip_count >= UNBOUNDED_TRIP_COUNT
    while keep_going and (trip_count is None or iteration < trip_count):
        ctx.checkpoint()
        if unbounded:
            check_loop_iterations(ctx.control, ctx.layer, iteration)
        outputs = ctx.run_graph(body, [np.array(iteration, dtype=iter_dtype),
                                       np.array(keep_going, dtype=np.bool_), *carried])
        keep_going = scalar_truth(outputs[0], "Loop body condition output")
        carried = list(outputs[1:1 + n_carried])
        if n_scan:
            accumulation.add(scans, list(outputs[1 + n_carried:1 + n_carried + n_scan]))
        iteration += 1
    stacked = []
    for k, values in enumerate(scans):
        if not values:
            stacked.append(_empty_scan_output(body, 1 + n_carried + k))
        elif isinstance(values[0], list):  # sequence-valued scan output: concatenate the sequences
            stacked.append([item for seq in values for item in seq])
        else:
            stacked.append(np.stack([np.asarray(v) for v in values]))
    results = carried + stacked
    if not results:
        raise ValueError("Loop: node has no outputs")
    return _pack(results[:max(ctx.num_outputs, 1)])


# -- Scan -------------------------------------------------------------------------------------


def _scan_core(ctx, body: Graph, states: list, scan_inputs: list[np.ndarray], input_axes: list[int],
               input_dirs: list[int], output_axes: list[int], output_dirs: list[int],
               accumulation: Accumulation | None = None) -> list:
    """One Scan over ``scan_inputs``: returns final states followed by the scan outputs. Each step is a
    checkpoint of the run; ``accumulation`` checks the collected outputs against its memory budget."""
    n_states = len(states)
    n_out = len(body.outputs) - n_states
    if n_out < 0:
        raise ValueError("Scan: body has fewer outputs than state variables")
    lengths = {x.shape[a] for x, a in zip(scan_inputs, input_axes, strict=True)}
    if len(lengths) > 1:
        raise ValueError(f"Scan: scan inputs have different sequence lengths {sorted(lengths)}")
    steps = lengths.pop() if lengths else 0
    collected: list[list[np.ndarray]] = [[] for _ in range(n_out)]
    accumulation = Accumulation(ctx.control, ctx.layer) if accumulation is None else accumulation
    for t in range(steps):
        ctx.checkpoint()
        elements = [np.take(x, steps - 1 - t if d else t, axis=a)
                    for x, a, d in zip(scan_inputs, input_axes, input_dirs, strict=True)]
        outputs = ctx.run_graph(body, [*states, *elements])
        states = list(outputs[:n_states])
        if n_out:
            accumulation.add(collected, [np.asarray(v) for v in outputs[n_states:n_states + n_out]])
    results = list(states)
    for k, values in enumerate(collected):
        if not values:
            results.append(_empty_scan_output(body, n_states + k))
            continue
        if output_dirs[k]:
            values = values[::-1]  # prepending each new value
        rank = values[0].ndim + 1
        axis = output_axes[k] + rank if output_axes[k] < 0 else output_axes[k]
        if not 0 <= axis < rank:
            raise ValueError(f"Scan: scan_output_axes entry {output_axes[k]} out of range")
        results.append(np.stack(values, axis=axis))
    return results


@register("Scan", 8)
def scan_v8(ctx, sequence_lens=None, *inputs, body=None, num_scan_inputs=None, directions=None):
    """Scan-8: every input has batch axis 0 and (scan inputs) sequence axis 1; shorter sequences
    given by ``sequence_lens`` leave zero padding in the scan outputs."""
    body = need_graph(body, "Scan", "body")
    if num_scan_inputs is None:
        raise ValueError("Scan needs 'num_scan_inputs'")
    n_states = len(inputs) - num_scan_inputs
    states, scan_inputs = list(inputs[:n_states]), list(inputs[n_states:])
    dirs = list(directions) if directions else [0] * num_scan_inputs
    batch = (scan_inputs[0] if scan_inputs else states[0]).shape[0]
    max_len = scan_inputs[0].shape[1] if scan_inputs else 0
    lens = [max_len] * batch if sequence_lens is None else [int(v) for v in np.asarray(sequence_lens).ravel()]
    per_batch = []
    accumulation = Accumulation(ctx.control, ctx.layer)  # one budget over every batch row's outputs
    for b in range(batch):
        seq = [x[b, :lens[b]] for x in scan_inputs]  # (len, ...)
        per_batch.append(_scan_core(ctx, body, [s[b] for s in states], seq, [0] * len(seq), dirs,
                                    [0] * (len(body.outputs) - n_states), [0] * (len(body.outputs) - n_states),
                                    accumulation))
    results = []
    for k in range(len(body.outputs)):
        values = [np.asarray(r[k]) for r in per_batch]
        if k >= n_states and any(v.shape[0] != max_len for v in values):
            padded = []
            for v in values:
                pad = np.zeros((max_len - v.shape[0], *v.shape[1:]), dtype=v.dtype)
                padded.append(np.concatenate([v, pad]))
            values = padded
        results.append(np.stack(values))
    return _pack(results)


@register("Scan", 9)
def scan(ctx, *inputs, body=None, num_scan_inputs=None, scan_input_axes=None, scan_input_directions=None,
         scan_output_axes=None, scan_output_directions=None):
    body = need_graph(body, "Scan", "body")
    if num_scan_inputs is None:
        raise ValueError("Scan needs 'num_scan_inputs'")
    n_states = len(inputs) - num_scan_inputs
    if n_states < 0:
        raise ValueError(f"Scan: {len(inputs)} inputs but num_scan_inputs={num_scan_inputs}")
    states, scan_inputs = list(inputs[:n_states]), [np.asarray(x) for x in inputs[n_states:]]
    n_out = len(body.outputs) - n_states
    in_axes = list(scan_input_axes) if scan_input_axes else [0] * num_scan_inputs
    in_axes = [a + x.ndim if a < 0 else a for a, x in zip(in_axes, scan_inputs, strict=True)]
    in_dirs = list(scan_input_directions) if scan_input_directions else [0] * num_scan_inputs
    out_axes = list(scan_output_axes) if scan_output_axes else [0] * n_out
    out_dirs = list(scan_output_directions) if scan_output_directions else [0] * n_out
    return _pack(_scan_core(ctx, body, states, scan_inputs, in_axes, in_dirs, out_axes, out_dirs))


# -- sequences --------------------------------------------------------------------------------


def _sequence(value, op: str) -> list:
    if not isinstance(value, list):
        raise TypeError(f"{op}: expected a sequence, got {type(value).__name__}")
    return value


def _position(ctx, position, length: int, allow_end: bool) -> int:
    """``position`` in [-length, length) (or ``length`` itself when ``allow_end``: an append), made >= 0;
    otherwise IndexOutOfRangeError naming ``ctx``'s layer."""
    pos = scalar_int(position, f"{ctx.layer.op_type} position")
    if not (allow_end and pos == length):
        what = f"position (or {length} to append)" if allow_end else "position"
        check_indices(ctx, np.array([pos], np.int64), length, what)
    return pos + length if pos < 0 else pos


@register("SequenceConstruct", 11)
def sequence_construct(ctx, *inputs):
    return list(inputs)


@register("SequenceEmpty", 11)
def sequence_empty(ctx, *, dtype=None):
    return []


@register("SequenceAt", 11)
def sequence_at(ctx, input_sequence, position):
    seq = _sequence(input_sequence, "SequenceAt")
    return seq[_position(ctx, position, len(seq), allow_end=False)]


@register("SequenceInsert", 11)
def sequence_insert(ctx, input_sequence, tensor, position=None):
    seq = list(_sequence(input_sequence, "SequenceInsert"))
    index = len(seq) if position is None else _position(ctx, position, len(seq), allow_end=True)
    seq.insert(index, tensor)
    return seq


@register("SequenceErase", 11)
def sequence_erase(ctx, input_sequence, position=None):
    seq = list(_sequence(input_sequence, "SequenceErase"))
    if not seq:
        raise IndexError("SequenceErase: the sequence is empty")
    index = len(seq) - 1 if position is None else _position(ctx, position, len(seq), allow_end=False)
    del seq[index]
    return seq


@register("SequenceLength", 11)
def sequence_length(ctx, input_sequence):
    return np.array(len(_sequence(input_sequence, "SequenceLength")), dtype=np.int64)


@register("SplitToSequence", 11)
def split_to_sequence(ctx, x, split=None, *, axis=0, keepdims=1):
    """Split into a sequence: size-1 pieces (squeezed unless keepdims), equal chunks or given sizes."""
    rank = x.ndim
    if not -rank <= axis < rank:
        raise ValueError(f"SplitToSequence: axis {axis} out of range for rank {rank}")
    axis = axis + rank if axis < 0 else axis
    dim = x.shape[axis]
    if split is None:
        pieces = [np.take(x, [i], axis=axis) for i in range(dim)]
        return pieces if keepdims else [np.squeeze(p, axis=axis) for p in pieces]
    sizes_arr = np.asarray(split)
    if sizes_arr.ndim == 0:
        chunk = int(sizes_arr)
        if chunk <= 0:
            raise ValueError(f"SplitToSequence: split size {chunk} must be positive")
        sizes = [min(chunk, dim - start) for start in range(0, dim, chunk)]
    else:
        sizes = [int(s) for s in sizes_arr]
        if sum(sizes) != dim or any(s < 0 for s in sizes):
            raise ValueError(f"SplitToSequence: sizes {sizes} do not add up to dimension {dim}")
    bounds = np.cumsum([0, *sizes])
    return list(np.split(x, bounds[1:-1], axis=axis)) if sizes else []


@register("ConcatFromSequence", 11)
def concat_from_sequence(ctx, input_sequence, *, axis=None, new_axis=0):
    seq = _sequence(input_sequence, "ConcatFromSequence")
    if axis is None:
        raise ValueError("ConcatFromSequence needs 'axis'")
    if not seq:
        raise ValueError("ConcatFromSequence: the sequence is empty")
    rank = np.ndim(seq[0]) + (1 if new_axis else 0)
    if not -rank <= axis < rank:
        raise ValueError(f"ConcatFromSequence: axis {axis} out of range")
    axis = axis + rank if axis < 0 else axis
    return np.stack(seq, axis=axis) if new_axis else np.concatenate(seq, axis=axis)


@register("SequenceMap", 17)
def sequence_map(ctx, input_sequence, *additional_inputs, body=None):
    """Run ``body`` once per element; sequence inputs are indexed, tensor inputs passed whole."""
    body = need_graph(body, "SequenceMap", "body")
    seq = _sequence(input_sequence, "SequenceMap")
    for extra in additional_inputs:
        if isinstance(extra, list) and len(extra) != len(seq):
            raise ValueError("SequenceMap: sequence inputs have different lengths")
    results: list[list] = [[] for _ in body.outputs]
    accumulation = Accumulation(ctx.control, ctx.layer)
    for i, item in enumerate(seq):
        ctx.checkpoint()
        args = [item] + [extra[i] if isinstance(extra, list) else extra for extra in additional_inputs]
        accumulation.add(results, list(ctx.run_graph(body, args)), stacks=False)  # outputs stay sequences
    return _pack(results)


# -- optionals ----------------------------------------------------------------------------------


@register("Optional", 15)
def optional(ctx, input=None, *, type=None):
    return input


@register("OptionalHasElement", 15)
def optional_has_element_v15(ctx, input):
    return np.array(input is not None, dtype=np.bool_)


@register("OptionalHasElement", 18)
def optional_has_element(ctx, input=None):
    return np.array(input is not None, dtype=np.bool_)


@register("OptionalGetElement", 15)
def optional_get_element(ctx, input):
    if input is None:
        raise ValueError("OptionalGetElement: the optional is empty")
    return input
