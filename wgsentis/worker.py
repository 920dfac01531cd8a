"""Worker: validates inputs, schedules a model run on a backend and hands out deferred outputs."""

from __future__ import annotations

import enum
import os
import threading
import warnings
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import onnx
import onnx.numpy_helper

from wgsentis.backends import ProgramOptions, create_program
from wgsentis.errors import InputError, SymbolicDimensionWarning, WgSentisError
from wgsentis.model import Model, TensorInfo
from wgsentis.ops.kernel_options import DEFAULT_KERNEL_OPTIONS, KernelOptions
from wgsentis.run_control import (
    DEFAULT_MAX_LOOP_ITERATIONS,
    CancelToken,
    RunControl,
    parse_max_loop_iterations,
    parse_memory_limit,
    parse_timeout,
)
from wgsentis.tensor import Tensor


class BackendType(enum.Enum):
    """Where a worker runs its layers."""

    CPU = "cpu"
    GPU_COMPUTE = "gpu-compute"
    GPU_PIXEL = "gpu-pixel"


def backend_of(backend: BackendType | str) -> BackendType:
    if isinstance(backend, BackendType):
        return backend
    try:
        return BackendType(str(backend).lower().replace("_", "-"))
    except ValueError:
        names = ", ".join(b.value for b in BackendType)
        raise InputError(f"unknown backend '{backend}'; choose one of: {names}") from None


class Worker:
    """Runs a Model on one backend. ``schedule`` returns at once; outputs are deferred Tensors.

    ``threads``: worker threads for CPU kernels (default: the core count, at most 8).
    ``spin_wait`` (cpu): True (default) runs the big products on the BLAS library's threads, which
    spin-wait between jobs like ONNX Runtime's intra-op pool: the fastest mode on cores the worker has
    to itself. False uses wgsentis's own threads, which block when idle: slower alone, but it degrades
    gracefully when other busy processes share the cores, where spinning threads slow everyone down
    (the same trade as ONNX Runtime's ``session.intra_op.allow_spinning``).
    ``precision`` (gpu-compute): "float32", or "float16" to hold the weights of Conv, MatMul and Gemm
    in half precision on the device (half the weight memory and bandwidth; products still accumulate
    in float32, so results differ from float32 by the weights' rounding, ~1e-3 relative). Needs the
    adapter feature shader-f16; a DeviceError names it when the adapter lacks it.
    ``memory_limit``: bytes one layer's outputs (or a Loop's/Scan's accumulated outputs, or the device
    memory a GPU plan holds) may take; checked from shapes before anything is allocated, on the host and
    the device, raising ResourceLimitError. "default" is half the physical memory; None lifts the limit.
    ``max_plans`` (GPU backends): recorded plans kept, one per input signature (shapes, dtypes and the
    values of inputs read on the host), the least recently used dropped first with its device memory.
    ``prepare_ahead`` (GPU backends): where the last four runs grew their inputs by the same steps (a decoder's
    cache, one row a token), trace the next size's plan right after submitting a run, while the device runs it,
    so that the next run replays (``stats()``: ``plans_prepared_ahead``, ``prepared_plans_replayed``,
    ``plans_prepared_ahead_failed``; a run's ``ahead_ms``). A miss costs that trace's host time and the plan's
    memory until it is evicted; False: none.
    ``fast_winograd`` (GPU backends): let 3x3 convolutions take Winograd F(4x4, 3x3), up to 1.75x faster on wide
    layers but with 4-7x the rounding error of a direct float32 sum; the default, False, takes F(2x2, 3x3) at
    most, whose error is within a direct sum's (quantized models re-quantize every layer and amplify errors).
    The cpu backend's kernels do not read it.
    ``kernels``: a ``KernelOptions``, the kernel forms the program may take (textures for GPU operands and
    inputs, vec4 stores, the CPU's Winograd); every one is on by default, each field says what turning it off
    takes instead (to compare forms, or to run the plainer paths).
    ``max_loop_iterations``: the iterations a Loop with no trip count (or an "infinite" one) may run before the
    run stops with a LayerError naming the Loop, on every backend (default 1e6: a condition that never turns
    false is taken for a model bug rather than left to hang).
    ``adapter`` (GPU backends): the index in ``wgsentis.adapters()`` of the GPU to run on, e.g. one per process of a
    batch job on a machine with several (``wgsentis.batch``); None (default) takes wgpu's high-performance choice.
    Device tensors pass between Workers made with the same ``adapter``; the cpu backend takes None only.

    Threads: a Worker may be shared by threads. Runs execute one at a time in the order scheduled, and
    ``run`` returns the outputs of its own inputs. ``peek_output`` returns the outputs of the last
    ``schedule`` made by the calling thread (or, in a thread that never scheduled, the last one of any
    thread); the deferred Tensors themselves may be read from any thread.
    """

    def __init__(self, model: Model, backend: BackendType | str = BackendType.CPU, *,
                 threads: int | None = None, spin_wait: bool = True, debug_groups: bool = False,
                 precision: str = "float32", memory_limit: int | str | None = "default",
                 max_plans: int = 16, fast_winograd: bool = False,
                 kernels: KernelOptions = DEFAULT_KERNEL_OPTIONS,
                 max_loop_iterations: int = DEFAULT_MAX_LOOP_ITERATIONS, adapter: int | None = None,
                 prepare_ahead: bool = True) -> None:
        if not isinstance(model, Model):
            raise InputError(f"Worker(model, ...): expected a wgsentis Model, got {type(model).__name__}")
        self.backend = backend_of(backend)
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise InputError(f"Worker(threads={threads!r}): threads must be a positive integer")
        if precision not in ("float32", "float16"):
            raise InputError(f"Worker(precision={precision!r}): choose 'float32' or 'float16'")
        if isinstance(max_plans, bool) or not isinstance(max_plans, int) or max_plans < 1:
            raise InputError(f"Worker(max_plans={max_plans!r}): max_plans must be a positive integer")
        if not isinstance(spin_wait, bool):
            raise InputError(f"Worker(spin_wait={spin_wait!r}): spin_wait must be True or False")
        if not isinstance(fast_winograd, bool):
            raise InputError(f"Worker(fast_winograd={fast_winograd!r}): fast_winograd must be True or False")
        if not isinstance(prepare_ahead, bool):
            raise InputError(f"Worker(prepare_ahead={prepare_ahead!r}): prepare_ahead must be True or False")
        if not isinstance(kernels, KernelOptions):
            raise InputError(f"Worker(kernels={kernels!r}): kernels must be a wgsentis KernelOptions")
        if adapter is not None and (isinstance(adapter, bool) or not isinstance(adapter, int) or adapter < 0):
            raise InputError(f"Worker(adapter={adapter!r}): adapter must be None or an index in wgsentis.adapters()")
        self.adapter = adapter
        self.spin_wait = spin_wait
        self.memory_limit = parse_memory_limit(memory_limit)
        self.max_loop_iterations = parse_max_loop_iterations(max_loop_iterations)
        self.precision = precision
        self.model = model
        self.threads = threads or min(os.cpu_count() or 1, 8)
        self.debug_groups = debug_groups
        self._options = ProgramOptions(threads=self.threads, spin_wait=spin_wait, debug_groups=debug_groups,
                                       precision=precision, max_plans=max_plans, fast_winograd=fast_winograd,
                                       kernels=kernels, adapter=adapter, prepare_ahead=prepare_ahead)
        self._graph = model.graph
        self._program = self._compile(self._graph)
        self._variants: dict[frozenset[str], Any] = {}  # fed overridable initializers -> program (_program_for)
        # One run at a time per worker, in order; schedule() only queues it.
        self._runner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wgsentis-worker")
        # Held by the run executing (on the runner, or a blocking run on its caller's thread: _submit) and by what
        # closes a program, so that a program runs one run at a time and closes after it.
        self._exec_lock = threading.Lock()
        self._lock = threading.Lock()
        self._outputs: dict[str, Tensor] = {}  # the last schedule's, any thread
        self._thread_outputs = threading.local()  # .outputs: the last schedule's of the calling thread
        self._last_run: Future | None = None
        self._cancel_token = CancelToken()  # held by every run scheduled since the last cancel()
        self._closed = False
        self._symbol_warnings: set[tuple[str, str, str]] = set()  # (dim, first input, other input) said once

    def _compile(self, graph: Any) -> Any:
        return create_program(self.backend.value, graph, self._options)

    @property
    def program(self) -> Any:
        """The compiled program runs go to (the backends' program protocol; GPU programs add the hooks tools
        use: ``set_timestamps``, ``last_run``, ``plan_summary``, ``run_layer_by_layer``). Recompiled when
        ``model.add_output`` changed the model."""
        with self._lock:
            if self.model.graph is not self._graph:
                self._swap_program()
            return self._program

    def _swap_program(self) -> None:
        """Compile the model's current graph; the old program closes after the runs already queued on it.
        The caller holds the lock: two threads must not both swap programs."""
        old = self._program
        self._graph = self.model.graph
        self._program = self._compile(self._graph)
        self._runner.submit(self._close_program, old)
        for variant in self._variants.values():
            self._runner.submit(self._close_program, variant)
        self._variants.clear()

    def _close_program(self, program: Any) -> None:
        with self._exec_lock:  # after a run on the caller's thread that is still using it
            program.close()

    def _program_for(self, feeds: dict[str, Any]) -> Any:
        """The program a run with ``feeds`` takes (the caller holds the lock): the worker's own, or where the run
        feeds overridable initializers, the program of the model in which those are inputs, compiled on first
        use per set of names and kept until close (the default one keeps its initializers folded)."""
        fed = frozenset(feeds) - {info.name for info in self._graph.inputs}
        if not fed:
            return self._program
        if fed not in self._variants:
            self._variants[fed] = self._compile(self.model.feeding(fed))
        return self._variants[fed]

    # -- lifecycle ----------------------------------------------------------------------------
    def close(self) -> None:
        """Wait for scheduled work, then release the worker's threads."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._runner.shutdown(wait=True)
        with self._exec_lock:  # a blocking run on another thread finishes first
            self._program.close()
            for variant in self._variants.values():
                variant.close()
            self._variants.clear()

    def cancel(self) -> None:
        """Stop the run in progress and every run scheduled before this call, at the next layer boundary
        (or Loop/Scan iteration): their outputs raise RunCancelledError naming the layer that was running.
        Runs scheduled after this call are not affected, and the worker stays usable."""
        with self._lock:
            token, self._cancel_token = self._cancel_token, CancelToken()
        token.cancel()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - a worker dropped without close()
        # The garbage collector may run this on any thread at any moment, a wgpu callback or a held lock
        # included, so nothing here may block: no wait for the device (close() waits for its queue), no lock.
        # The runner's threads finish what is queued and end; the program's device objects go with their last
        # reference (wgpu keeps alive what submitted work still uses). close() is what frees them at once.
        try:
            if not self._closed:
                self._closed = True
                self._runner.shutdown(wait=False)
        except Exception:
            pass

    # -- running ------------------------------------------------------------------------------
    def schedule(self, inputs: dict[str, Any] | None = None, *, timeout: float | None = None,
                 on_device: bool = False, **named: Any) -> Worker:
        """Validate ``inputs`` (name -> array or Tensor) and queue a run; returns immediately.

        ``timeout``: seconds the run may take once it starts (None: no bound); past it the run stops at
        the next layer boundary or Loop/Scan iteration and its outputs raise RunTimeoutError naming the
        layer that was running. ``on_device``: the outputs ``peek_output`` hands out keep their data in device
        memory (see ``run``). (Inputs named "timeout" or "on_device" must be passed in ``inputs``.)"""
        self._submit(self._merge(inputs, named), timeout, snapshot=True, on_device=on_device)
        return self

    def _merge(self, inputs: Any, named: dict[str, Any]) -> dict[str, Any]:
        """``inputs`` (a mapping name -> value, or None) and the keyword inputs as one dict."""
        if inputs is None:
            return dict(named)
        if not isinstance(inputs, Mapping):
            names = [info.name for info in self._graph.inputs]
            raise InputError(f"model '{self.model.name}': inputs must be a mapping of input name to array "
                             f"(its inputs are {names}), got {type(inputs).__name__}")
        return {**inputs, **named}

    def _submit(self, given: dict[str, Any], timeout: Any, snapshot: bool = False,
                on_device: bool = False, here: bool = False) -> dict[str, Tensor]:
        """Validate and queue one run; returns its deferred outputs (also this thread's peek_output).
        ``snapshot``: the run takes copies of the caller's writable arrays (``schedule`` returns before the run
        reads them, and the caller may reuse its buffers at once); ``run`` waits, so it reads them in place.

        ``here`` (``run``, which waits anyway): where the program runs on any thread (``runs_on_any_thread``: the
        cpu backend) and no run is queued or running, the run executes on the calling thread before this returns,
        its outputs done: no hand-off to the runner thread and back (a GPT-2 decode step on 2 cores: 0.13 ms of
        3.5). Runs scheduled meanwhile queue behind it, as behind any run."""
        if self._closed:
            raise WgSentisError(f"worker for model '{self.model.name}' is closed")
        seconds = parse_timeout(timeout, f"model '{self.model.name}': schedule/run(timeout=...)")
        feeds = self.validate(given)
        if snapshot:
            feeds = {name: _snapshot(value, given[name]) for name, value in feeds.items()}
        with self._lock:
            if self._closed:
                raise WgSentisError(f"worker for model '{self.model.name}' is closed")
            # Re-compile when add_output changed the model's graph after the worker was made; queued runs
            # keep the program they were given.
            if self.model.graph is not self._graph:
                self._swap_program()
            program = self._program_for(feeds)
            control = RunControl(model=self.model.name, memory_limit=self.memory_limit, timeout=seconds,
                                 token=self._cancel_token, max_loop_iterations=self.max_loop_iterations)

            def execute() -> Any:
                control.start()
                # A readback: outputs on the host, being mapped, or (on_device) held in device memory.
                return program.execute(feeds, control, on_device=on_device)

            def run() -> Any:
                with self._exec_lock:
                    return execute()

            # Nothing queued (every run handed to the runner is done) and none running on another caller's thread.
            run_here = (here and getattr(program, "runs_on_any_thread", False)
                        and (self._last_run is None or self._last_run.done())
                        and self._exec_lock.acquire(blocking=False))
            if run_here:
                future: Future = Future()
                future.set_running_or_notify_cancel()
            else:
                future = self._runner.submit(run)
            self._last_run = future
            # One lock per run: its outputs share one readback, which must be waited on once at a time.
            readback_lock = threading.Lock()
            outputs = {
                name: Tensor(name=name, _future=future, _backend=self.backend.value, _lock=readback_lock)
                for name in program.output_names
            }
            self._outputs = outputs
        if run_here:
            try:
                future.set_result(execute())
            except BaseException as exc:  # raised where the outputs are read, as from the runner
                future.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise  # an interrupt of the calling thread itself (KeyboardInterrupt)
            finally:
                self._exec_lock.release()
        self._thread_outputs.outputs = outputs
        return outputs

    def peek_output(self, name: str | None = None) -> Tensor:
        """The deferred output ``name`` of the calling thread's last scheduled run (a thread that never
        scheduled sees the worker's last run); None: the first model output."""
        outputs = getattr(self._thread_outputs, "outputs", None) or self._outputs
        if not outputs:
            raise WgSentisError(f"model '{self.model.name}': peek_output() before schedule()")
        if name is None:
            name = next(iter(outputs))
        if name not in outputs:
            raise InputError(
                f"model '{self.model.name}' has no output '{name}'; outputs: {list(outputs)} "
                "(use model.add_output to expose an intermediate tensor)"
            )
        return outputs[name]

    def run(self, inputs: dict[str, Any] | None = None, *, timeout: float | None = None, on_device: bool = False,
            **named: Any) -> dict[str, Any]:
        """Schedule, wait and download every output: name -> numpy array (list for sequences).
        ``timeout`` as in ``schedule``. Safe to call from several threads at once: each call returns
        the outputs of its own inputs.

        ``on_device=True``: name -> ``Tensor`` whose data stays in device memory (Sentis' ``dataOnBackend``, ORT's
        IOBinding): nothing is read back unless asked (``np.asarray(t)``, ``download_to_array()``,
        ``readback_request()``), and the Tensor given as an input of this worker, or of another on the same
        device, is copied there device to device (a decoder's cache fed back step after step, an encoder's
        output into a decoder). On the cpu backend the data is on the host already. The run waits for its
        work to be submitted and its outputs to be held, not for their data."""
        outputs = self._submit(self._merge(inputs, named), timeout, on_device=on_device, here=True)
        if on_device:
            for t in outputs.values():
                t.on_device  # noqa: B018 - waits for the run, so its errors are raised here as run's are
            return dict(outputs)
        return {name: t.download_to_array() for name, t in outputs.items()}

    def stats(self) -> dict[str, Any]:
        """Where layers ran and what crossed between host and device in the last run (the program's
        ``stats()``; GPU programs add device memory, cached plans and the run's fixed costs)."""
        if self._last_run is not None:
            self._last_run.exception()  # wait for the run to be recorded
        return self._program.stats()

    # -- input validation -----------------------------------------------------------------------
    def validate(self, given: dict[str, Any]) -> dict[str, Any]:
        """``given`` (input name -> array, Tensor, TensorProto or list) checked against the model's inputs and
        converted as a run takes them; InputError names the input and what is wrong."""
        expected = {info.name: info for info in self._graph.inputs}
        # Initializers that are also graph inputs may be fed, overriding them for the run (see _program_for).
        defaults = {info.name: info for info in self.model.overridable if info.name not in expected}
        unknown = [n for n in given if n not in expected and n not in defaults]
        if unknown:
            also = f" (and the initializers it may override: {list(defaults)})" if defaults else ""
            raise InputError(
                f"model '{self.model.name}' has no input(s) {unknown}; its inputs are {list(expected)}{also}"
            )
        missing = [n for n in expected if n not in given]
        if missing:
            described = ", ".join(repr(expected[n]) for n in missing)
            raise InputError(f"model '{self.model.name}': missing input(s): {described}")
        symbols: dict[str, tuple[int, str]] = {}
        feeds: dict[str, Any] = {}
        for name, value in given.items():
            feeds[name] = self._check_one(expected.get(name) or defaults[name], value, symbols)
        return feeds

    def _check_one(self, info: TensorInfo, value: Any, symbols: dict[str, tuple[int, str]]) -> Any:
        where = f"model '{self.model.name}': input '{info.name}'"
        if isinstance(value, Tensor):
            held = value.device_value
            if held is not None and held.ctx is getattr(self._program, "ctx", None):
                return self._check_device_value(where, info, held, symbols)  # bound on the device by the program
            value = value.download_to_array()
        elif isinstance(value, onnx.TensorProto):
            value = onnx.numpy_helper.to_array(value)
        if info.kind == "map":  # ai.onnx.ml maps (DictVectorizer, CastMap) travel as dicts
            if not isinstance(value, Mapping):
                raise InputError(f"{where} expects a map (dict), got {type(value).__name__}")
            _check_map_keys(where, value, info.key_dtype)
            return _typed_map(value, info.dtype)
        if info.kind == "sequence":
            if not isinstance(value, list | tuple):
                raise InputError(f"{where} expects a sequence (list of arrays), got {type(value).__name__}")
            return [_typed_map(v, info.dtype) if isinstance(v, Mapping) else np.asarray(v) for v in value]
        if info.kind == "optional" and value is None:
            return None
        if info.kind == "optional" and isinstance(value, list | tuple):
            return [np.asarray(v) for v in value]  # an optional holding a sequence
        if isinstance(value, list | tuple) and info.dtype is not None:
            try:
                value = np.asarray(value, dtype=info.dtype)
            except (ValueError, TypeError, OverflowError) as exc:  # ragged, or values of another type
                raise InputError(f"{where} expects {info.dtype.name} values; the list given cannot be one "
                                 f"{info.dtype.name} array: {exc}") from None
        if not isinstance(value, np.ndarray | np.generic):
            raise InputError(f"{where} expects a numpy array or wgsentis Tensor, got {type(value).__name__}")
        value = np.asarray(value)
        if info.dtype is not None and value.dtype != info.dtype:
            if not (info.dtype == object and value.dtype.kind in "OUS"):
                raise InputError(f"{where} expects dtype {info.dtype.name}, got {value.dtype.name}")
            value = value.astype(object)
        self._check_shape(where, info, value.shape, symbols)
        return value

    def _check_shape(self, where: str, info: TensorInfo, shape: tuple[int, ...],
                     symbols: dict[str, tuple[int, str]], stacklevel: int = 6) -> None:
        """InputError where ``shape`` does not fit ``info``'s; a warning (once) where symbolic dims disagree,
        ``stacklevel`` frames up: the user's call of run or schedule."""
        if info.shape is not None:
            if len(shape) != len(info.shape):
                raise InputError(
                    f"{where} expects rank {len(info.shape)} shape {_fmt(info.shape)}, got shape {list(shape)}"
                )
            for axis, (want, got) in enumerate(zip(info.shape, shape, strict=True)):
                if isinstance(want, int) and want != got:
                    raise InputError(
                        f"{where} expects shape {_fmt(info.shape)}, got {list(shape)} (axis {axis})"
                    )
                if isinstance(want, str):
                    seen = symbols.setdefault(want, (got, info.name))
                    if seen[0] != got and (want, seen[1], info.name) not in self._symbol_warnings:
                        # As in ONNX Runtime, a symbolic name is checked per input, not across inputs: packages
                        # feed inputs that share a name different lengths (one per phoneme, one per character).
                        # The layers that combine them report any real mismatch; say it once per worker.
                        self._symbol_warnings.add((want, seen[1], info.name))
                        warnings.warn(
                            f"{where}: dimension '{want}' is {got} here but {seen[0]} in input '{seen[1]}'; "
                            "symbolic dimensions are not a constraint across inputs, so the run goes on",
                            SymbolicDimensionWarning, stacklevel=stacklevel)

    def _check_device_value(self, where: str, info: TensorInfo, value: Any,
                            symbols: dict[str, tuple[int, str]]) -> Any:
        """A device tensor given as ``info``'s input, checked by its dtype and shape as arrays are (no copy)."""
        if info.kind != "tensor":
            raise InputError(f"{where} expects a {info.kind}, got a device tensor")
        if info.dtype is not None and value.dtype != info.dtype:
            raise InputError(f"{where} expects dtype {info.dtype.name}, got {value.dtype.name} (a device tensor)")
        self._check_shape(where, info, value.shape, symbols, stacklevel=7)  # one frame deeper than an array's
        return value


def _snapshot(value: Any, given: Any) -> Any:
    """``value`` (a validated feed) as a scheduled run must hold it: a copy of every array that still shares
    memory with what the caller gave and that the caller can write (a read-only array cannot change under the
    run); maps and sequences copied down to their arrays."""
    if isinstance(value, np.ndarray):
        if value.flags.writeable and (value is given or np.may_share_memory(value, _arrays_of(given))):
            return value.copy()
        return value
    if isinstance(value, dict):
        return {key: v.copy() if isinstance(v, np.ndarray) else v for key, v in value.items()}
    if isinstance(value, list):
        return [_snapshot(v, v) for v in value]
    return value


def _arrays_of(given: Any) -> Any:
    """The array a caller's feed holds (np.may_share_memory's other operand), or an empty array."""
    return given if isinstance(given, np.ndarray) else np.empty(0)


def _check_map_keys(where: str, value: Mapping, key_dtype: np.dtype | None) -> None:
    """InputError where a map's keys are not of the declared key type (strings, or integers)."""
    if key_dtype is None:
        return
    strings = key_dtype.kind in "OUS"
    for key in value:
        ok = isinstance(key, str | bytes | np.str_) if strings else (
            isinstance(key, int | np.integer) and not isinstance(key, bool))
        if not ok:
            raise InputError(f"{where} expects a map with {'string' if strings else key_dtype.name} keys, got key "
                             f"{key!r} ({type(key).__name__})")


def _typed_map(value: Mapping, dtype: np.dtype | None) -> dict:
    """A map input as a dict whose numeric values have the model's value type (Python floats are float64)."""
    if dtype is None or dtype.kind not in "biuf":
        return dict(value)
    return {key: dtype.type(v) for key, v in value.items()}


def _fmt(shape: tuple[Any, ...]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"

