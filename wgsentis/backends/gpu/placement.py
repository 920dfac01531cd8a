"""Backend-neutral placement: which layers a GPU program must run on the host (tensors the host reads, and
what computes them), where each layer runs for a given set of argument values and why, and running a layer's
numpy kernel there (planned host layers and fallbacks alike)."""

from __future__ import annotations

from typing import Any

import numpy as np

from wgsentis.backends.cpu import GraphProgram, LayerStep
from wgsentis.backends.gpu.tensors import GTensor
from wgsentis.errors import PASS_THROUGH_ERRORS, LayerError, WgSentisError
from wgsentis.ir import Graph, Layer, captured_names, subgraphs
from wgsentis.ops import registry
from wgsentis.ops.cast import cast_target
from wgsentis.ops.spec import ALL_INPUTS, ANY_INT32, spec_of
from wgsentis.ops.kernel_options import DEFAULT_KERNEL_OPTIONS, KernelOptions

_OFFSET_BOUND = 2**30  # a host addend below this keeps a wrapped int32 sum out of every index range
_INT32_LIMIT = 2**31 - 1  # the largest |value| an int64 result may have to be held exactly in an i32 word


def _positions(chosen: tuple[int, ...] | str, count: int) -> range | tuple[int, ...]:
    """A spec's input positions (ALL_INPUTS: every one of ``count``)."""
    return range(count) if chosen == ALL_INPUTS else chosen


def _takes(chosen: tuple[int, ...] | str, position: int) -> bool:
    """Whether a spec's input positions (ALL_INPUTS: all) include ``position``."""
    return chosen == ALL_INPUTS or position in chosen


def value_bound(value: Any) -> int:
    """A bound on |v| for the elements of an int64 (or narrower integer, or bool) operand: exact for host values
    and constants, a device tensor's recorded bound, else any int32 (what the device can hold). (A run's own
    values held beside a device tensor are not used: a replay brings others.)"""
    if value is None:
        return 0
    if isinstance(value, GTensor):
        if value.bound is not None:
            return value.bound
        if value.host is None or value.alloc is None or not value.alloc.persistent:
            return ANY_INT32
        value = value.host
    array = np.asarray(value)
    if array.dtype.kind not in "biu":
        return ANY_INT32
    if array.size == 0:
        return 0
    return max(abs(int(array.max())), abs(int(array.min())))


def input_bound(value: np.ndarray) -> int:
    """The bound a plan records for an int64 input (or a fallback's int64 output) of these values: the next power
    of two at or above their largest |v| (at least 2**16), so a replay whose values stay under it keeps the plan
    and one past it records anew (GPUProgram.upload_input checks)."""
    largest = value_bound(value)
    return max(1 << 16, 1 << max(largest, 1).bit_length())


def int64_result_bounds(layer: Layer, args: list[Any]) -> list[int]:
    """Bounds on |v| of ``layer``'s outputs computed from its inputs' bounds (``value_bound``): sums and products
    of bounds for arithmetic, the largest of the values passed on for selections, the axis length for indices
    (ArgMax, TopK's), the type's range for casts from narrow integers; any int32 where no rule applies."""
    op = spec_of(layer.op_type, layer.domain)
    bounds = [value_bound(a) for a in args]
    if op.int64_bound is not None:
        result = op.int64_bound(layer, bounds, args)
        if isinstance(result, list):
            return result
    elif op.passes_values_of:
        result = max((bounds[k] for k in _positions(op.passes_values_of, len(bounds)) if k < len(bounds)),
                     default=ANY_INT32)
    else:
        result = ANY_INT32
    return [result] * max(1, len(layer.outputs))


def index_only_tensors(graph: Graph) -> set[str]:
    """Tensors whose values only ever serve as indices, directly or through ops that pass values through unchanged
    (Reshape, Concat, Where's branches...): never a graph output, never read by a subgraph. An int64 value that
    left the int32 range on the device is out of every axis' range there too (the device's checked_index raises
    the cpu's IndexOutOfRangeError), so such tensors may be computed on the device (``int64_range_reason``)."""
    readers: dict[str, list[tuple[str, int, list[str]]]] = {}
    for layer in graph.layers:
        for position, name in enumerate(layer.inputs):
            if name:
                readers.setdefault(name, []).append((spec_of(layer.op_type, layer.domain), position,
                                                     [o for o in layer.outputs if o]))
        for name in captured_names(layer):
            readers.setdefault(name, []).append((None, -1, []))
    outputs = {o.name for o in graph.outputs}
    memo: dict[str, bool] = {}

    def index_only(name: str) -> bool:
        if name not in memo:
            memo[name] = False  # (a cycle cannot arise in a sorted graph; this also ends any)
            reads = readers.get(name, [])
            memo[name] = name not in outputs and bool(reads) and all(
                op is not None and (op.index_input == position
                                    or (_takes(op.views_values_of, position) and all(index_only(o) for o in outs)))
                for op, position, outs in reads)
        return memo[name]

    return {name for name in readers if index_only(name)}


def int64_range_reason(layer: Layer, args: list[Any], index_only: frozenset[str] | set[str] = frozenset()) -> str:
    """Why ``layer`` must not compute on the device, where the device would hold an int64 result outside the
    int32 range in 32 bits (a silent wrap or saturation): an int64 arithmetic op with a device operand, or a Cast
    to int64 of a float tensor on the device; "" when the device computes it exactly. A division is exact
    unless it divides -2**31 by -1, so one by a host divisor without -1 stays on the device. Where the result
    serves only as indices (``index_only``), a Cast (past int32: -2**31) and a sum with a host offset under 2**30
    (a wrapped sum lands at least 2**30 from zero) stay on the device: a value past int32 is out of range there
    as on the host, and raises the same IndexOutOfRangeError for the same layer (its index as the device holds
    it)."""
    device = [k for k, a in enumerate(args) if isinstance(a, GTensor)]
    if not device or layer.domain:
        return ""
    indices = bool(layer.outputs) and layer.outputs[0] in index_only
    if layer.op_type in ("Cast", "CastLike"):
        source, target = args[0], args[1] if layer.op_type == "CastLike" else None
        to = target.dtype if target is not None else cast_target(layer.attrs.get("to"))
        if to == np.int64 and isinstance(source, GTensor) and source.dtype.kind == "f" and not indices:
            return (f"Cast of {source.dtype.name} input '{layer.inputs[0]}' to int64: the GPU holds int64 in 32-bit "
                    "words and these values can pass the int32 range; the host casts them exactly")
        return ""
    if not spec_of(layer.op_type).widens_int64:
        return ""
    data = next((a for a in args if a is not None), None)  # (the result's type: CumSum's axis is int64 too)
    if data is None or np.dtype(getattr(data, "dtype", np.float32)) != np.int64:
        return ""
    if layer.op_type in ("Add", "Sub") and indices and len(device) == 1:
        offset = args[1 - device[0]]
        if isinstance(offset, np.ndarray) and offset.size and int(np.abs(offset).max()) < _OFFSET_BOUND:
            return ""
    if int64_result_bounds(layer, args)[0] <= _INT32_LIMIT:
        return ""  # the operands' bounds keep the result within int32: exact on the device
    if layer.op_type == "Div" and device == [0] and isinstance(args[1], np.ndarray) and not (args[1] == -1).any():
        return ""
    operand = layer.inputs[device[0]]
    return (f"int64 {layer.op_type} of device input '{operand}': the GPU holds int64 in 32-bit words and this "
            "result can pass the int32 range (a silent wrap there); the host computes it exactly")


def host_tensors(graph: Graph, backend: str) -> set[str]:
    """Tensors that must be read on the host: the inputs ``backend``'s programs take as host values (shapes,
    axes, pads...) and, walking back, whatever computes them, except through Shape/Size, which read only their
    input's shape, and through control flow (If, Loop, Scan): a Loop whose counter ends a Slice must not pull
    the backbone that feeds it onto the host (its counter comes out a host value anyway where the body computes
    it from the iteration number, else one counted download). Layers producing these run on the host at plan
    time."""
    needed: set[str] = set()
    for layer in graph.layers:
        gpu = registry.lookup(layer.op_type, layer.domain, layer.opset, backend=backend)
        for pos in gpu.host_inputs if gpu is not None else ():
            if pos < len(layer.inputs) and layer.inputs[pos]:
                needed.add(layer.inputs[pos])
    for layer in reversed(graph.layers):
        shape_only = spec_of(layer.op_type, layer.domain).shape_only
        if shape_only or subgraphs(layer) or not any(o in needed for o in layer.outputs):
            continue
        needed.update(n for n in layer.inputs if n and n not in graph.constants)
    return needed


def layer_reads(graph: Graph) -> list[tuple[str, ...]]:
    """Per layer, the tensor names it reads: its inputs, then what its subgraphs capture, in order, once each."""
    return [tuple(n for n in dict.fromkeys([*layer.inputs, *sorted(captured_names(layer))]) if n)
            for layer in graph.layers]


def last_uses(reads: list[tuple[str, ...]], output_names: list[str]) -> dict[str, int]:
    """Tensor name -> index of the last layer that reads it (``reads``: ``layer_reads``; the graph's outputs: one
    past the last layer)."""
    last: dict[str, int] = {}
    for i, names in enumerate(reads):
        for n in names:
            last[n] = i
    for n in output_names:
        last[n] = len(reads)
    return last


class Placer:
    """Places the layers of one graph for one GPU backend and runs those placed on the host."""

    def __init__(self, graph: Graph, backend: str, control_of: Any,
                 kernels: KernelOptions = DEFAULT_KERNEL_OPTIONS) -> None:
        self.graph = graph
        self.backend = backend
        self.host_needed = host_tensors(graph, backend)
        self.index_only = index_only_tensors(graph)  # tensors that only serve as indices (int64_range_reason)
        reads = layer_reads(graph)
        self.last_use = last_uses(reads, [o.name for o in graph.outputs])
        # Per layer: the tensors it reads last (dropped after it), and its outputs nothing reads (dropped at once);
        # fixed for the graph, so a recording does not derive them again layer by layer (captures included).
        self.dies_after = [tuple(n for n in names if self.last_use[n] == i) for i, names in enumerate(reads)]
        self.unread_outputs = [tuple(k for k, n in enumerate(layer.outputs) if n and n not in self.last_use)
                               for layer in graph.layers]
        self.host_program = HostProgram(graph, control_of, kernels)
        self.cpu_steps = [LayerStep(layer, self.host_program) for layer in graph.layers]
        self._subgraph_steps: dict[int, tuple[Layer, LayerStep]] = {}

    def builder(self, layer: Layer) -> Any:
        """The backend's program builder for ``layer`` (registry.GPUImpl), or None."""
        return registry.lookup(layer.op_type, layer.domain, layer.opset, backend=self.backend)

    def decide(self, layer: Layer, args: list[Any]) -> tuple[str, str]:
        """(device, reason) for ``layer`` on these arguments, before any builder runs: "host", "fallback", or
        "gpu" (the builder may still give up: the caller then falls back). Shape-only layers get zero-stride
        stand-ins for their device inputs (in ``args``); host-read inputs of a GPU layer get their host values."""
        if spec_of(layer.op_type, layer.domain).shape_only:
            # Only the shape is read: a zero-stride stand-in carries it without any data.
            for k, a in enumerate(args):
                if isinstance(a, GTensor):
                    args[k] = np.broadcast_to(np.zeros((), a.dtype), a.shape)
            return "host", "reads only its input's shape"
        impl = registry.lookup(layer.op_type, layer.domain, layer.opset)
        known = [a.host if isinstance(a, GTensor) and a.host is not None else a for a in args]
        if impl is not None and not registry.is_deterministic(impl, known):
            return "fallback", "random: runs again on every replay, never baked into the plan"
        host_layer = any(o in self.host_needed for o in layer.outputs)
        if (host_layer and all_host(args)) or all(a is None or isinstance(a, np.ndarray) for a in args):
            # Values already on the host (shapes and what is computed from them) stay there: no sync.
            if not captured_names(layer):
                return "host", "its inputs are host values" + (" read by a GPU program" if host_layer else "")
        gpu = self.builder(layer)
        if gpu is None:
            return "fallback", f"no {self.backend} program for {layer.op_type}"
        if captured_names(layer) and not gpu.reads_scope:
            return "fallback", "its subgraphs read outer-scope tensors"
        for pos in gpu.host_inputs:
            if pos < len(args) and isinstance(args[pos], GTensor):
                if args[pos].host is None:
                    return "fallback", f"input {pos} is read on the host but exists only on the device"
                args[pos] = args[pos].host
        reason = int64_range_reason(layer, args, self.index_only)
        if reason:
            return "fallback", reason
        return "gpu", ""

    def run_host(self, index: int, args: list[Any]) -> tuple[Any, ...]:
        """Layer ``index``'s numpy kernel on host ``args``; errors name the layer."""
        return run_step(self.cpu_steps[index], args)

    def subgraph_step(self, layer: Layer) -> LayerStep:
        """The numpy step of a subgraph's layer (an If branch's, a Loop body's), made once per layer."""
        step = self._subgraph_steps.get(id(layer))
        if step is None:  # (the layer is kept with its step, so its id is never another layer's)
            step = self._subgraph_steps[id(layer)] = (layer, LayerStep(layer, self.host_program))
        return step[1]

    def set_outer_scope(self, index: int, names: list[str], values: list[Any]) -> None:
        """The outer-scope tensors layer ``index``'s subgraphs read, for its next host run."""
        outer = dict(self.graph.constants)
        outer.update(zip(names, values, strict=True))
        self.cpu_steps[index].ctx.outer = outer

    def close(self) -> None:
        self.host_program.close()


class HostProgram:
    """Stands in for the CPU GraphProgram where kernels ask for subprograms (control flow), and lends them its
    CPU program's kernel choices and workspace (scratch buffers, thread pools), which ``close`` frees."""

    def __init__(self, graph: Graph, control_of: Any, kernels: KernelOptions = DEFAULT_KERNEL_OPTIONS) -> None:
        self._cpu = GraphProgram(Graph("host", [], [], {}, []), 1, kernels=kernels)
        self._control_of = control_of
        self.graph = graph  # whose constants a kernel may keep derived weights of
        self.kernels = kernels
        self.workspace = self._cpu.workspace

    @property
    def control(self) -> Any:
        """The RunControl of the run in progress (what Loop/Scan kernels check)."""
        return self._control_of()

    def subprogram(self, graph: Graph) -> Any:
        return self._cpu.subprogram(graph)

    def close(self) -> None:
        self._cpu.close()


def run_step(step: LayerStep, args: list[Any]) -> tuple[Any, ...]:
    """A layer's numpy step on host ``args``, its outputs as a tuple; errors name the layer."""
    try:
        with np.errstate(all="ignore"):  # IEEE results (see backends/cpu.py _run_step)
            result = step.run(args)
    except PASS_THROUGH_ERRORS:
        raise
    except WgSentisError as exc:
        raise LayerError(step.layer.name, step.layer.op_type, str(exc)) from exc
    except Exception as exc:
        raise LayerError(step.layer.name, step.layer.op_type, f"{type(exc).__name__}: {exc}") from exc
    result = result if isinstance(result, tuple) else (result,)
    return tuple(np.asarray(v) if isinstance(v, np.generic) else v for v in result)


def all_host(args: list[Any]) -> bool:
    return all(not isinstance(a, GTensor) or a.host is not None for a in args)


def host_of(value: Any) -> Any:
    return value.host if isinstance(value, GTensor) else value


def host_read(layer: Layer, args: list[Any], env: dict[str, Any]) -> set[str]:
    """Names of a layer's inputs that its GPU builder received as host values (read on the host)."""
    return {n for n, a in zip(layer.inputs, args, strict=False)
            if n and isinstance(a, np.ndarray) and isinstance(env.get(n), GTensor)}
