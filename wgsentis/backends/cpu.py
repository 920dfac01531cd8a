"""CPU backend: runs a graph's layers with their numpy kernels as jobs on a thread pool.

Layers run in dependency order. The ``threads`` setting bounds both the pool and the BLAS library's
threads, and ``spin_wait`` picks who runs in parallel:

- ``spin_wait=True`` (the Worker's default): products run on the BLAS library's own threads, which
  spin-wait between jobs as ONNX Runtime's do; layers run one after another on the calling thread and
  the other kernels on one thread. A hand-off to a spinning thread costs a few microseconds, against
  ~50 us for a blocked Python thread on a 2-vCPU VM (whose idle vCPUs halt), so on cores the worker has
  to itself this is the faster mode: all 12 reference models, each mode in its own process, 1.16x
  geometric mean (docs/benchmarks-history.md, eighth session). When other processes keep the cores busy, spinning
  threads fight them for the cores: two ResNet-50 processes side by side ran 1.5-2.3x slower than in
  the other mode (ONNX Runtime's spinning pool slows alike).
- ``spin_wait=False``: our own pool of blocking threads splits the big products, convolution bands,
  pools and depthwise kernels (wgsentis.ops.parallel) and runs ready parallel branches side by side;
  BLAS stays on one thread. The calling thread runs a chain inline (no pool round-trip per layer).
"""

from __future__ import annotations

import math
import threading
from collections import ChainMap, deque
from collections.abc import Mapping, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from time import perf_counter
from typing import Any

import numpy as np

from wgsentis.backends.host_memory import keep_freed_memory
from wgsentis.backends.shape_values import ShapeValues
from wgsentis.budget import check_layer_outputs, outputs_key, within_input_bound
from wgsentis.errors import (
    PASS_THROUGH_ERRORS,
    LayerError,
    RunInterruptedError,
    UnsupportedOperatorError,
    WgSentisError,
)
from wgsentis.ir import Graph, Layer, captured_names
from wgsentis.ops import registry
from wgsentis.ops.activations import inplace_activation
from wgsentis.ops.kernel_options import DEFAULT_KERNEL_OPTIONS, KernelOptions
from wgsentis.ops.parallel import TRANSIENT, HostWorkspace, set_blas_threads
from wgsentis.ops.spec import spec_of

POOL_MIN_SECONDS = 300e-6  # a ready layer faster than this in the last run is not worth a hand-off



class KernelContext:
    """What a kernel may ask of the engine besides its inputs and attributes."""

    __slots__ = ("activation", "activation_taken", "cache", "kernels", "layer", "num_outputs", "opset", "outer",
                 "program", "rng", "threads", "workspace")

    def __init__(self, layer: Layer, program: GraphProgram) -> None:
        self.layer = layer
        self.program = program
        self.opset = layer.opset
        self.num_outputs = len(layer.outputs)
        self.outer: Mapping[str, Any] = {}
        self.rng: np.random.Generator | None = None
        # What a kernel derives from its constant inputs once and reuses on every run (Winograd
        # weights): it lives as long as the compiled program, so closing the worker frees it.
        self.cache: dict[Any, Any] = {}
        self.activation: tuple[str, Any, dict[str, Any]] | None = None  # (op type, kernel, attrs)
        self.activation_taken = False
        # Threads the kernel may split its work over (wgsentis.ops.parallel.kernel_threads): the program's,
        # or 1 while other layers run beside it on the branch pool, so 2 cores never carry 4 threads.
        self.threads = getattr(program, "kernel_threads", 1)
        # The program's kernel choices (KernelOptions) and its workspace: the scratch buffers and thread pools
        # kernels use (wgsentis.ops.parallel.kernel_workspace), freed when the program closes.
        self.kernels: KernelOptions = getattr(program, "kernels", DEFAULT_KERNEL_OPTIONS)
        self.workspace: HostWorkspace = getattr(program, "workspace", TRANSIENT)

    def take_activation(self) -> Any:
        """The layer's fused activation as an in-place function on parts of the output, for a kernel that
        applies it itself (part by part, on the thread that computed the part, while it is in cache);
        the engine then does not apply it again. None when the layer has none, or one with no in-place
        form (the engine applies it to the whole output)."""
        if self.activation is None:
            return None
        apply = inplace_activation(self.activation[0], self.activation[2])
        self.activation_taken = apply is not None
        return apply

    def constant_cache(self, *indices: int) -> dict[Any, Any] | None:
        """``cache`` where the layer's inputs at ``indices`` are constants of its graph (or absent), else
        None: what a kernel derives from an input that may change between runs (a weight fed as a graph
        input, perhaps the same array changed in place) must be derived again on every run."""
        constants = self.program.graph.constants
        for index in indices:
            name = self.layer.inputs[index] if index < len(self.layer.inputs) else ""
            if name and name not in constants:
                return None
        return self.cache

    def output_wanted(self, index: int) -> bool:
        """Whether output ``index`` exists and has a name (optional outputs may be omitted)."""
        return index < self.num_outputs and bool(self.layer.outputs[index])

    @property
    def control(self) -> Any:
        """The run's RunControl (memory budget, deadline, cancel token), or None outside a worker's run."""
        return self.program.control

    def checkpoint(self) -> None:
        """Stop here if the run was cancelled or passed its timeout: kernels that iterate (Loop, Scan) call
        it once per iteration, so a runaway loop can be stopped."""
        control = self.program.control
        if control is not None:
            control.check(self.layer)

    def run_graph(self, graph: Graph, inputs: list[Any], extra: Mapping[str, Any] | None = None) -> list[Any]:
        """Run a subgraph with positional inputs; names of the enclosing scope stay visible."""
        program = self.program.subprogram(graph)
        scope: Mapping[str, Any] = self.outer if extra is None else ChainMap(dict(extra), self.outer)
        feeds = {info.name: value for info, value in zip(graph.inputs, inputs, strict=False)}
        try:
            return program.run(feeds, scope, control=self.program.control)
        except RunInterruptedError as exc:
            exc.inside(self.layer.name, self.layer.op_type)  # name the path down to the layer that ran
            raise

    def random(self, seed: float | None) -> np.random.RandomState:
        """A generator seeded by the op's ``seed`` attribute (fresh entropy when absent).

        NumPy's MT19937 ``RandomState``, the generator ONNX's own reference outputs use, so a seeded
        random op reproduces them bit for bit.
        """
        return np.random.RandomState(None if seed is None else int(seed) & 0xFFFFFFFF)


class LayerStep:
    __slots__ = ("args_plain", "attrs", "budget_key", "ctx", "inputs", "kernel", "layer", "named_outputs", "outputs",
                 "seconds", "shape_sized", "single_output", "sized")

    def __init__(self, layer: Layer, program: GraphProgram) -> None:
        impl = registry.lookup(layer.op_type, layer.domain, layer.opset)
        if impl is None:
            raise UnsupportedOperatorError(layer.op_type, layer.domain, layer.opset, layer.name)
        self.layer = layer
        self.kernel = impl.kernel
        self.attrs = dict(layer.attrs)
        self.inputs = list(layer.inputs)
        self.outputs = list(layer.outputs)
        # Fixed for the program's life, so not re-derived per run: whether every input is named (the argument
        # list is then one lookup per name) and the outputs that have a name with their positions.
        self.args_plain = all(self.inputs)
        self.named_outputs = tuple((i, n) for i, n in enumerate(self.outputs) if n)
        self.single_output = self.outputs[0] if len(self.outputs) == 1 else ""  # its name: one store, no loop
        self.ctx = KernelContext(layer, program)
        self.seconds = math.inf  # the kernel's time in the last run (unknown: inf)
        op_spec = spec_of(layer.op_type, layer.domain)
        self.sized = op_spec.size_rule is not None  # checked against the budget
        self.shape_sized = op_spec.size_reads_shapes  # its outputs within_input_bound of its inputs
        # (memory limit, budget.outputs_key) of the last budget check that passed: an equal one skips the check
        self.budget_key: Any = None
        if layer.fused_activation is not None:
            act_type, act_attrs = layer.fused_activation
            # The host's opset, or the newest version where the activation is newer than the model
            # (a HardSwish that FuseHardSwishPattern built in an opset-12 model).
            act = registry.lookup(act_type, "", layer.opset) or registry.lookup(act_type, "", 1 << 30)
            if act is None:
                raise UnsupportedOperatorError(act_type, "", layer.opset, layer.name, "fused activation")
            self.ctx.activation = (act_type, act.kernel, act_attrs)

    def run(self, args: list[Any]) -> Any:
        """The kernel on ``args``, then the fused activation unless the kernel applied it itself
        (``KernelContext.take_activation``). Both backends run host layers through here."""
        ctx = self.ctx
        ctx.activation_taken = False
        result = self.kernel(ctx, *args, **self.attrs)
        if ctx.activation is not None and not ctx.activation_taken:
            _, act_kernel, act_attrs = ctx.activation
            result = act_kernel(ctx, result, **act_attrs)
        return result


def _shape_text(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype.name}{list(value.shape)}"
    if isinstance(value, list):
        return f"sequence[{len(value)}]"
    return "none" if value is None else type(value).__name__


def _signature(feeds: Mapping[str, Any]) -> tuple | None:
    """The input shapes and dtypes of a run whose inputs are all arrays (ShapeValues keeps its values by it)."""
    try:
        return tuple((name, value.shape, value.dtype.str) for name, value in feeds.items())
    except AttributeError:  # a sequence, a map or an absent optional input: no signature
        return None


class HostValues:
    """A run's outputs already on the host: a readback that is always done."""

    __slots__ = ("values",)

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values

    def done(self) -> bool:
        return True

    def wait(self) -> dict[str, Any]:
        return self.values


class GraphProgram:
    """A graph compiled for the CPU backend: steps, dependencies and tensor lifetimes.

    It owns the workspace its kernels share (scratch buffers, the pools their splits run on) and its branch
    pool; a subprogram (a control-flow body) shares its parent's. ``close()`` frees them."""

    runs_on_any_thread = True  # (the program protocol) a blocking run executes on its caller's thread

    def __init__(self, graph: Graph, threads: int = 1, parent: GraphProgram | None = None,
                 branch_parallel: bool = True, spin_wait: bool = False,
                 kernels: KernelOptions = DEFAULT_KERNEL_OPTIONS) -> None:
        self.graph = graph
        self.threads = max(1, threads)
        self.spin_wait = spin_wait
        self.kernels = kernels if parent is None else parent.kernels
        self.workspace = HostWorkspace() if parent is None else parent.workspace
        if parent is None:
            keep_freed_memory()  # each run's outputs reuse the last run's memory, not fresh pages
        # Threads a kernel may split its own work over: none of ours while BLAS's threads carry the products.
        self.kernel_threads = 1 if spin_wait else self.threads
        self.parent = parent
        self.control: Any = None  # the RunControl of the run in progress (wgsentis.run_control)
        self._subprograms: dict[int, GraphProgram] = {}
        self.steps = [LayerStep(layer, self) for layer in graph.layers]
        self.shape_values = ShapeValues(graph)
        self.output_names = [o.name for o in graph.outputs]
        # stats() lists every layer after each run a caller reads them (a generation loop, every token): a copy of
        # this tuple costs less than a pass over the layers.
        self._layer_names = tuple(layer.name for layer in graph.layers)
        producers = {o: i for i, layer in enumerate(graph.layers) for o in layer.outputs if o}
        self.deps: list[set[int]] = []
        self.dependents: list[list[int]] = [[] for _ in graph.layers]
        last_use: dict[str, int] = {}
        for i, layer in enumerate(graph.layers):
            needed = {n for n in layer.inputs if n} | captured_names(layer)
            d = {producers[n] for n in needed if n in producers and producers[n] != i}
            self.deps.append(d)
            for j in d:
                self.dependents[j].append(i)
            for n in needed:
                last_use[n] = i
        keep = set(self.output_names)
        # Tensors to drop after each step (frees memory early in long chains). In sequential runs a
        # tensor dies after its last reader in list order; parallel runs count readers instead,
        # since layers may finish out of order.
        self.release: list[list[str]] = [[] for _ in graph.layers]
        self.readers: dict[str, int] = {}
        self.reads: list[list[str]] = []
        for layer in graph.layers:
            names = sorted({n for n in layer.inputs if n} | captured_names(layer))
            names = [n for n in names if n not in keep and n not in graph.constants]
            self.reads.append(names)
            for n in names:
                self.readers[n] = self.readers.get(n, 0) + 1
        for name, last in last_use.items():
            if name not in keep and name not in graph.constants:
                self.release[last].append(name)
        self.pool: ThreadPoolExecutor | None = None
        branches = sum(1 for d in self.deps if not d) > 1 or any(len(d) > 1 for d in self.dependents)
        # branch_parallel=False keeps layers sequential (kernels still split work over ``threads``):
        # the profiler's per-layer host timers then add up to the run's wall time.
        if self.kernel_threads > 1 and parent is None and branches and branch_parallel:
            self.pool = ThreadPoolExecutor(max_workers=self.threads - 1, thread_name_prefix="wgsentis-cpu")

    def bind_blas(self) -> None:
        """Set the BLAS library's thread count for this program's runs (process-wide; call before a run):
        ``threads`` when spin-waiting, else 1."""
        set_blas_threads(self.threads if self.spin_wait else 1)

    def subprogram(self, graph: Graph) -> GraphProgram:
        program = self._subprograms.get(id(graph))
        if program is None:
            program = GraphProgram(graph, 1, parent=self)  # (the parent's kernel choices and workspace)
            self._subprograms[id(graph)] = program
        return program

    def close(self) -> None:
        """Shut the branch pool down and free the workspace (a subprogram leaves its parent's alone)."""
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None
        if self.parent is None:
            self.workspace.close()
        self.shape_values.clear()

    # -- the program protocol (wgsentis.backends) -----------------------------------------------
    def execute(self, feeds: dict[str, Any], control: Any = None, on_device: bool = False) -> HostValues:
        """Run on ``feeds`` with this program's BLAS threads; the outputs by name, already on the host (the cpu
        backend's device: ``on_device`` changes nothing). Any thread may call it, one run at a time
        (``runs_on_any_thread``): the run's scratch buffers are the program's, not the calling thread's."""
        self.bind_blas()
        previous = self.workspace.run_buffers()
        try:
            values = self.run(feeds, control=control)
        finally:
            self.workspace.restore_buffers(previous)
        return HostValues(dict(zip(self.output_names, values, strict=True)))

    def stats(self) -> dict[str, Any]:
        """Where layers ran (all on the host) and what crossed to a device (nothing)."""
        return {"backend": "cpu", "threads": self.threads, "spin_wait": self.spin_wait, "gpu_layers": [],
                "cpu_layers": list(self._layer_names), "fallback_layers": [],
                "uploads": 0, "downloads": 0, "upload_bytes": 0, "download_bytes": 0, "transfers": [],
                "peak_device_bytes": 0,
                # Shape arithmetic (ShapeValues): its layers, and how many kept their value in the last run.
                "shape_layers": self.shape_values.count, "shape_layers_kept": self.shape_values.kept}

    # -- running ------------------------------------------------------------------------------
    def run(self, feeds: Mapping[str, Any], outer: Mapping[str, Any] | None = None,
            on_layer: Any = None, control: Any = None) -> list[Any]:
        """Run the graph on ``feeds``; returns the graph outputs in order. ``control`` (a RunControl) is
        checked before every layer: cancellation, timeout and the memory budget."""
        self.control = control
        env: MutableMapping[str, Any] = dict(self.graph.constants)
        env.update(feeds)
        scope: MutableMapping[str, Any] = env if outer is None else ChainMap(env, outer)
        self.shape_values.start(_signature(feeds) if outer is None else None)
        with np.errstate(all="ignore"):
            if self.pool is None and on_layer is None:
                self._run_sequence(scope, env)
            elif self.pool is None:
                release = self.release
                run_step = self._run_step
                for i, step in enumerate(self.steps):
                    run_step(step, scope, on_layer, i)
                    if release[i]:  # most layers free nothing: no loop to enter
                        for name in release[i]:
                            env.pop(name, None)
            else:
                self._run_parallel(scope, env, on_layer)
        self.shape_values.finish()
        missing = [n for n in self.output_names if n not in scope]
        if missing:
            raise WgSentisError(f"graph '{self.graph.name}': outputs {missing} were never produced")
        return [scope[n] for n in self.output_names]

    def _run_sequence(self, scope: MutableMapping[str, Any], env: MutableMapping[str, Any]) -> None:
        """The layers in order, with no per-layer callback: a derived shape layer that keeps its value (most of
        a transformer's hundreds: ShapeValues) is decided and bound here, inline, since for a small-op graph the
        call per layer costs as much as the kernels (GPT-2 4x256, a token: 560 layers, 350 of them kept)."""
        shape_values = self.shape_values
        kept_values, changed, kinds = shape_values.values, shape_values.changed, shape_values.kinds
        source_shapes = shape_values.source_shapes
        run_step, put, release = self._run_step, self._put, self.release
        kept = 0
        for i, step in enumerate(self.steps):
            kind = kinds[i]
            if not kind:
                run_step(step, scope, None, i)
            else:
                # ShapeValues.kept_derived and kept_value, inline: the call per layer is what this loop saves.
                value = kept_values.get(i)
                if value is None:
                    keep = False
                elif kind == 2:  # derived: kept while none of its inputs changed
                    keep = changed.isdisjoint(step.inputs)
                else:  # a Shape or Size: kept while its input has the shape it had
                    source = scope.get(step.inputs[0]) if step.inputs else None
                    keep = type(source) is np.ndarray and source_shapes.get(i) == source.shape
                if not keep:
                    run_step(step, scope, None, i, kept_checked=True)
                else:
                    kept += 1
                    step.seconds = 0.0
                    if step.single_output:
                        scope[step.single_output] = value[0]
                    else:
                        put(step, value, scope)
            if release[i]:  # most layers free nothing: no loop to enter
                for name in release[i]:
                    env.pop(name, None)
        shape_values.kept += kept

    def _run_parallel(self, scope: MutableMapping[str, Any], env: MutableMapping[str, Any], on_layer: Any) -> None:
        remaining = [len(d) for d in self.deps]
        readers = dict(self.readers)
        ready = deque(i for i, n in enumerate(remaining) if n == 0)
        cond = threading.Condition()
        state = {"running": 0, "error": None}

        def finish(i: int) -> None:
            for name in self.reads[i]:
                readers[name] -= 1
                if readers[name] == 0:
                    env.pop(name, None)
            for j in self.dependents[i]:
                remaining[j] -= 1
                if remaining[j] == 0:
                    ready.append(j)

        def pooled(i: int) -> None:
            try:
                self.steps[i].ctx.threads = 1  # it runs beside the calling thread's layer
                with np.errstate(all="ignore"):  # (a pool thread: the caller's errstate is not its own)
                    self._run_step(self.steps[i], scope, on_layer, i)
            except BaseException as exc:
                with cond:
                    state["error"] = state["error"] or exc
                    state["running"] -= 1
                    cond.notify_all()
                return
            with cond:
                finish(i)
                state["running"] -= 1
                cond.notify_all()

        spare = self.threads - 1

        def dispatch() -> int:
            """Take the next ready layer for this thread, and hand long ready layers to the pool."""
            i = ready.popleft()
            # Ready layers that took long enough last run go to the pool; short ones (a squeeze-excite
            # branch's pool and 1x1 convs) stay for this thread, since a hand-off costs more than they
            # do (PP-LCNet: 8.2 ms with every branch pooled, 7.1 on one thread).
            if state["running"] < spare:
                kept = deque()
                while ready and state["running"] < spare:
                    j = ready.popleft()
                    if self.steps[j].seconds < POOL_MIN_SECONDS:
                        kept.append(j)
                        continue
                    state["running"] += 1
                    assert self.pool is not None
                    self.pool.submit(pooled, j)
                ready.extendleft(reversed(kept))
            # Alone, a layer splits its work over every thread; beside pooled layers, over none.
            self.steps[i].ctx.threads = 1 if state["running"] else self.threads
            return i

        while True:
            if state["running"]:
                with cond:
                    while not ready and state["running"] and state["error"] is None:
                        cond.wait()
                    if state["error"] is not None:
                        while state["running"]:
                            cond.wait()
                        raise state["error"]
                    if not ready:
                        continue  # every pooled layer is done: the lock-free path takes over
                    i = dispatch()
            else:
                # No pooled layer in flight, so no other thread touches the shared state: no lock (a
                # chain of 137 layers, PP-LCNet, paid 0.7 ms in lock round trips).
                if state["error"] is not None:
                    raise state["error"]
                if not ready:
                    break
                i = dispatch()
            try:
                self._run_step(self.steps[i], scope, on_layer, i)
            except BaseException:
                with cond:
                    while state["running"]:
                        cond.wait()
                raise
            if state["running"]:
                with cond:
                    finish(i)
            else:
                finish(i)

    def _run_step(self, step: LayerStep, scope: MutableMapping[str, Any], on_layer: Any, index: int,
                  kept_checked: bool = False) -> None:
        """Run layer ``index``'s step on its inputs in ``scope`` (or keep its shape value: ShapeValues), then put
        its outputs there (``kept_checked``: the caller found a shape layer's value not kept). The caller holds
        ``np.errstate(all="ignore")``: ONNX arithmetic is IEEE arithmetic (log(0) = -inf, inf - inf = NaN are
        results, not faults), so numpy's warnings would only be noise."""
        layer = step.layer
        shape_values = self.shape_values
        shape_kind = shape_values.kinds[index]
        if shape_kind == 2 and on_layer is None and not kept_checked:
            # Derived shape arithmetic decides on its inputs' names alone: no argument list to build.
            kept = shape_values.kept_derived(index, step)
            if kept is not None:
                step.seconds = 0.0
                self._put(step, kept, scope)
                return
        try:
            # Most layers name every input: one lookup per name, no test per name.
            args = (list(map(scope.__getitem__, step.inputs)) if step.args_plain
                    else [scope[n] if n else None for n in step.inputs])
        except KeyError as exc:
            raise LayerError(layer.name, layer.op_type, f"input tensor {exc} was never produced") from None
        if shape_kind and not kept_checked:
            kept = shape_values.kept_value(index, step, args)
            if kept is not None:
                step.seconds = 0.0
                self._put(step, kept, scope)
                if on_layer is not None:
                    on_layer(layer, list(kept))
                return
        ctx = step.ctx
        ctx.outer = scope
        control = self.control
        if control is not None:  # stop or refuse here, before the kernel allocates
            control.check(layer)
            if (step.sized and control.memory_limit is not None
                    and not (step.shape_sized and within_input_bound(args, control.memory_limit))):
                key = outputs_key(layer, args)
                if key is None or step.budget_key != (control.memory_limit, key):
                    check_layer_outputs(control, layer, args)
                    step.budget_key = None if key is None else (control.memory_limit, key)
        start = perf_counter()
        try:
            result = step.run(args)
        except WgSentisError as exc:
            if isinstance(exc, PASS_THROUGH_ERRORS):
                raise
            raise LayerError(layer.name, layer.op_type, str(exc)) from exc
        except Exception as exc:
            shapes = ", ".join(_shape_text(a) for a in args)
            raise LayerError(layer.name, layer.op_type,
                             f"{type(exc).__name__}: {exc} (inputs: {shapes})") from exc
        step.seconds = perf_counter() - start
        if type(result) is np.ndarray:  # one array, the common case: nothing to convert
            values: list[Any] = [result]
        else:
            if not isinstance(result, tuple):  # a tuple is several outputs; a list is one sequence
                result = (result,)
            values = [np.asarray(v) if isinstance(v, np.generic) else v for v in result]
        if shape_kind:
            values = shape_values.store(index, step, args, values)
        if step.single_output and values:
            scope[step.single_output] = values[0]
        else:
            self._put(step, values, scope)
        if on_layer is not None:
            on_layer(layer, values)

    @staticmethod
    def _put(step: LayerStep, values: Any, scope: MutableMapping[str, Any]) -> None:
        """Bind ``values`` to the step's named outputs (fewer values than outputs: the first ones)."""
        if step.single_output and values:
            scope[step.single_output] = values[0]
            return
        if len(values) >= len(step.outputs):
            for i, name in step.named_outputs:
                scope[name] = values[i]
            return
        for name, value in zip(step.outputs, values, strict=False):
            if name:
                scope[name] = value



def evaluate(graph: Graph) -> list:
    """Run a graph with no inputs once on one thread: constant folding's evaluator (``wgsentis.passes``)."""
    program = GraphProgram(graph, 1)
    try:
        return program.run({})
    finally:
        program.close()
