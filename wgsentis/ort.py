"""onnxruntime's Python surface over wgsentis: ``import wgsentis.ort as ort`` in place of ``import onnxruntime as ort``.

The common subset of ONNX Runtime's API (``InferenceSession``, ``SessionOptions``, ``RunOptions``, ``OrtValue``,
``IOBinding``, the provider functions and the error classes of ``onnxruntime.capi.onnxruntime_pybind11_state``)
runs models on a wgsentis ``Worker``. Execution providers name backends:

- "CPUExecutionProvider" -> the default backend, "cpu" unless ``installed(backend=...)`` / ``install(backend=...)``
  says otherwise (so that code which hard-codes the CPU provider can be moved to a GPU backend unchanged);
- "WebGPUExecutionProvider" -> "gpu-compute";
- "WgsentisGpuPixelExecutionProvider" -> "gpu-pixel";
- "WgsentisCpuExecutionProvider" -> "cpu", whatever the default.

A provider list is tried in order and the first available is taken, as ONNX Runtime does; a name that is unknown or
whose device is missing is skipped with a ``UserWarning`` (ONNX Runtime's "Specified provider ... is not in available
provider names"), and the CPU provider is used when none is left.

Errors carry ONNX Runtime's class names and message prefix ("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : ...") and
also subclass the matching wgsentis typed error, so either ``except InvalidArgument`` or ``except InputError``
catches them. See docs/ort.md for what is supported and what is not.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import os
import re
import sys
import threading
import types
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

import wgsentis
from wgsentis.ort_errors import (  # noqa: F401 - re-exported: onnxruntime's error names live here too
    DeviceReset, EPFail, ERROR_CLASSES, EngineError, Fail, InvalidArgument, InvalidGraph, InvalidIndexArgument,
    InvalidProtobuf, MissingInputs, ModelLoadCanceled, ModelLoaded, ModelRequiresCompilation, NoModel,
    NoSuchFile, NotFound, NotImplemented, OrtStatus, RunTerminated, RuntimeException, ort_errors, translate,
)
from wgsentis.ort_values import IOBinding, OrtValue, elem_name
from wgsentis.tensor import Tensor
from wgsentis.worker import Worker

# The onnxruntime release whose Python API this module follows, and is tested against: clients compare
# onnxruntime.__version__ with releases to pick a code path or refuse an old one ("requires onnxruntime>=1.15"),
# and wgsentis's own 0.x would send them down paths for a 2019 onnxruntime. get_build_info() names wgsentis.
ORT_API_VERSION = "1.32.0"
__version__ = ORT_API_VERSION

CPU_PROVIDER = "CPUExecutionProvider"
WEBGPU_PROVIDER = "WebGPUExecutionProvider"
GPU_PIXEL_PROVIDER = "WgsentisGpuPixelExecutionProvider"
WGSENTIS_CPU_PROVIDER = "WgsentisCpuExecutionProvider"
# Provider -> backend; None: the default backend (``installed(backend=...)``), "cpu" unless set.
PROVIDER_BACKENDS: dict[str, str | None] = {
    WEBGPU_PROVIDER: "gpu-compute",
    GPU_PIXEL_PROVIDER: "gpu-pixel",
    WGSENTIS_CPU_PROVIDER: "cpu",
    CPU_PROVIDER: None,
}
_default_backend = "cpu"
_installed = False  # whether an installed() is in effect (it puts the CPU provider first in the available ones)
_INFERRED_DIM = re.compile(r"unk__\d+")
_ORT_PREFIX = re.compile(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ")  # run_async's callback gets the bare message


# -- enums and options -------------------------------------------------------------------------------------------
class _OrtEnum(enum.IntEnum):
    """An IntEnum that prints as ONNX Runtime's pybind enums do: ``GraphOptimizationLevel.ORT_ENABLE_ALL``."""

    __str__ = enum.Enum.__str__


class GraphOptimizationLevel(_OrtEnum):
    """ONNX Runtime's levels; wgsentis always runs its own passes, so every level but ORT_DISABLE_ALL is the same."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(_OrtEnum):
    """Accepted and ignored: a Worker runs layers in order, kernels use the intra-op threads."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class ExecutionOrder(_OrtEnum):
    """Accepted and ignored: a Worker runs layers in its plan's order."""

    DEFAULT = 0
    PRIORITY_BASED = 1
    MEMORY_EFFICIENT = 2


class SessionOptions:
    """ONNX Runtime's session options, as wgsentis reads them.

    Mapped: ``intra_op_num_threads`` (0 or negative: the Worker's default) -> ``Worker(threads=...)``;
    ``graph_optimization_level`` ORT_DISABLE_ALL -> ``load_model(optimize=False)``, any other level -> wgsentis's
    passes; ``add_session_config_entry("session.intra_op.allow_spinning", "0")`` -> ``Worker(spin_wait=False)``.
    Accepted and ignored (kept, so clients can read them back): ``inter_op_num_threads``, ``execution_mode``,
    ``log_severity_level``, ``log_verbosity_level``, ``logid``, ``enable_profiling`` (``end_profiling()`` returns
    ""), ``profile_file_prefix``, ``enable_cpu_mem_arena``, ``enable_mem_pattern``, ``enable_mem_reuse``,
    ``optimized_model_filepath`` (nothing is written), ``use_deterministic_compute``, ``use_per_session_threads``,
    ``execution_order``, other config entries, ``add_free_dimension_override_by_name`` / ``_by_denotation``,
    ``set_load_cancellation_flag``. ``add_provider(name, options)`` gives the providers of a session made without
    ``providers=``. ``register_custom_ops_library`` raises NotImplemented: wgsentis has no custom-op libraries."""

    def __init__(self) -> None:
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.enable_profiling = False
        self.profile_file_prefix = "onnxruntime_profile_"
        self.enable_cpu_mem_arena = True
        self.enable_mem_pattern = True
        self.enable_mem_reuse = True
        self.optimized_model_filepath = ""
        self.use_deterministic_compute = False
        self.use_per_session_threads = True
        self.execution_order = ExecutionOrder.DEFAULT
        self._config: dict[str, str] = {}
        self._free_dimensions: dict[str, int] = {}
        self.added_providers: list[tuple[str, dict[str, str]]] = []  # add_provider's, in order

    def add_session_config_entry(self, key: str, value: str) -> None:
        self._config[str(key)] = str(value)

    def get_session_config_entry(self, key: str) -> str:
        if key not in self._config:
            raise Fail.make(f"SessionOptions does not have configuration with key: {key}")
        return self._config[key]

    def add_free_dimension_override_by_name(self, name: str, value: int) -> None:
        self._free_dimensions[str(name)] = int(value)  # kept; wgsentis resolves dims from the inputs it is given

    def add_free_dimension_override_by_denotation(self, denotation: str, value: int) -> None:
        self._free_dimensions[str(denotation)] = int(value)  # kept, as add_free_dimension_override_by_name

    def add_provider(self, provider_name: str, provider_options: Mapping[str, Any] | None = None) -> None:
        self.added_providers.append((str(provider_name), {str(k): str(v) for k, v in (provider_options or {}).items()}))

    def has_providers(self) -> bool:
        return bool(self.added_providers)

    def set_load_cancellation_flag(self, value: bool) -> None:
        """Accepted: a wgsentis load is not cancelled part way."""

    def register_custom_ops_library(self, path: str) -> None:
        raise NotImplemented.make(f"custom op libraries are not supported by wgsentis ({path})")


class RunOptions:
    """``terminate``: set True (from any thread) to stop the runs in progress with these options through the
    Worker's cancel path, and to refuse later runs with them (ONNX Runtime's Fail "Exiting due to terminate flag
    being set to true"); set it back to False to run again. ``Worker.cancel`` stops every run then queued on the
    session's worker, so runs of the same session in other threads stop too. ``log_severity_level``,
    ``log_verbosity_level``, ``logid`` and config entries are kept and ignored."""

    def __init__(self) -> None:
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.only_execute_path_to_fetches = False
        self._terminate = False
        self._lock = threading.Lock()
        self._running: list[Worker] = []
        self._config: dict[str, str] = {}

    @property
    def terminate(self) -> bool:
        return self._terminate

    @terminate.setter
    def terminate(self, value: bool) -> None:
        with self._lock:
            self._terminate = bool(value)
            running = list(self._running) if self._terminate else []
        for worker in running:
            worker.cancel()

    def add_run_config_entry(self, key: str, value: str) -> None:
        self._config[str(key)] = str(value)

    def get_run_config_entry(self, key: str) -> str:
        return self._config[key]

    @contextlib.contextmanager
    def _running_on(self, worker: Worker) -> Iterator[None]:
        with self._lock:
            if self._terminate:
                raise RunTerminated("[ONNXRuntimeError] : 1 : FAIL : Exiting due to terminate flag being set "
                                    "to true.")
            self._running.append(worker)
        try:
            yield
        finally:
            with self._lock:
                self._running.remove(worker)


# -- node args and metadata --------------------------------------------------------------------------------------
def _type_string(type_proto: onnx.TypeProto) -> str:
    """A TypeProto as ONNX Runtime prints it: tensor(float), seq(tensor(int64)), map(int64,tensor(float)) ..."""
    which = type_proto.WhichOneof("value")
    if which == "tensor_type":
        return f"tensor({elem_name(type_proto.tensor_type.elem_type)})"
    if which == "sparse_tensor_type":
        return f"sparse_tensor({elem_name(type_proto.sparse_tensor_type.elem_type)})"
    if which == "sequence_type":
        return f"seq({_type_string(type_proto.sequence_type.elem_type)})"
    if which == "map_type":
        return f"map({elem_name(type_proto.map_type.key_type)},{_type_string(type_proto.map_type.value_type)})"
    if which == "optional_type":
        return f"optional({_type_string(type_proto.optional_type.elem_type)})"
    return "undefined"


def _shape_of(type_proto: onnx.TypeProto) -> list[int | str | None]:
    """Dims as ONNX Runtime gives them: ints, a symbolic dim's name, None for an unnamed unknown one or a negative
    dim_value (exporters write -1 for "dynamic"; ONNX Runtime reports None); [] for no shape or a non-tensor type."""
    which = type_proto.WhichOneof("value")
    if which not in ("tensor_type", "sparse_tensor_type"):
        return []
    tensor = getattr(type_proto, which)
    if not tensor.HasField("shape"):
        return []
    dims: list[int | str | None] = []
    for dim in tensor.shape.dim:
        kind = dim.WhichOneof("value")
        known = kind == "dim_value" and dim.dim_value >= 0
        dims.append(dim.dim_value if known else dim.dim_param if kind == "dim_param" else None)
    return dims


class NodeArg:
    """An input or output as ONNX Runtime describes it: ``name``, ``shape``, ``type``."""

    def __init__(self, name: str, type_proto: onnx.TypeProto) -> None:
        self.name = name
        self.type = _type_string(type_proto)
        self.shape = _shape_of(type_proto)

    def __repr__(self) -> str:
        return f"NodeArg(name='{self.name}', type='{self.type}', shape={self.shape})"


class ModelMetadata:
    """``get_modelmeta()``: the model's producer, graph name, domain, descriptions, version and metadata props."""

    def __init__(self, proto: onnx.ModelProto) -> None:
        self.producer_name = proto.producer_name
        self.graph_name = proto.graph.name
        self.domain = proto.domain
        self.description = proto.doc_string
        self.graph_description = proto.graph.doc_string
        # ONNX Runtime reports an unset model_version as INT64_MAX.
        self.version = proto.model_version if proto.HasField("model_version") else 2**63 - 1
        self.custom_metadata_map = {p.key: p.value for p in proto.metadata_props}


# -- providers ---------------------------------------------------------------------------------------------------
@functools.cache
def _gpu_ok() -> bool:
    try:
        from wgsentis.backends.gpu.device import gpu_available
    except Exception:
        return False
    return gpu_available()[0]


def get_available_providers() -> list[str]:
    """The providers usable here, in ONNX Runtime's priority order (the GPU ones only when a wgpu adapter opens).
    Under ``installed()`` the CPU provider, which runs on the backend ``installed()`` names, comes first: a client
    that passes this list as its providers, or takes its first, runs on that backend as the program asked."""
    gpu = [WEBGPU_PROVIDER, GPU_PIXEL_PROVIDER] if _gpu_ok() else []
    if _installed:
        return [CPU_PROVIDER, *gpu, WGSENTIS_CPU_PROVIDER]
    return [*gpu, WGSENTIS_CPU_PROVIDER, CPU_PROVIDER]


def get_all_providers() -> list[str]:
    return [WEBGPU_PROVIDER, GPU_PIXEL_PROVIDER, WGSENTIS_CPU_PROVIDER, CPU_PROVIDER]


def get_device() -> str:
    """"GPU" when the CPU provider maps to a GPU backend (``installed(backend=...)``), else "CPU"."""
    return "CPU" if _default_backend == "cpu" else "GPU"


def get_version_string() -> str:
    return __version__


def get_build_info() -> str:
    return f"wgsentis {wgsentis.__version__} (wgsentis.ort, onnxruntime {ORT_API_VERSION}'s API)"


def set_seed(seed: int) -> None:
    """Accepted and ignored: wgsentis's random ops (RandomNormal, RandomUniform ...) take their ``seed`` attribute."""


def set_default_logger_severity(level: int) -> None:
    """Accepted and ignored: wgsentis logs nothing of its own (warnings go through ``warnings``)."""


def set_default_logger_verbosity(level: int) -> None:
    """Accepted and ignored, as ``set_default_logger_severity``."""


def disable_telemetry_events() -> None:
    """Accepted: wgsentis sends no telemetry."""


def enable_telemetry_events() -> None:
    """Accepted: wgsentis sends no telemetry."""


def preload_dlls(*args: Any, **kwargs: Any) -> None:
    """Accepted: there are no CUDA libraries to preload."""


def _backend_of(provider: str) -> str:
    backend = PROVIDER_BACKENDS[provider]
    return _default_backend if backend is None else backend


def _adapter_of(backend: str, options: Mapping[str, str]) -> int | None:
    """The GPU a provider's ``device_id`` (CUDA's spelling) or ``deviceId`` (WebGPU's) picks: an index in
    ``wgsentis.adapters()``; None where neither is given or the backend runs on the host."""
    value = options.get("device_id", options.get("deviceId"))
    if value is None or backend == "cpu":
        return None
    try:
        index = int(value)
    except ValueError:
        index = -1
    if index < 0:
        raise InvalidArgument.make(f"provider option device_id '{value}' is not a GPU index (wgsentis.adapters())")
    return index


def _choose_provider(providers: Sequence[Any] | None, provider_options: Sequence[dict] | None
                     ) -> tuple[str, dict[str, str]]:
    """The first available provider of ``providers`` (names or (name, options) tuples) and its options."""
    if providers is None:
        return CPU_PROVIDER, {}
    if isinstance(providers, str):
        providers = [providers]
    if provider_options is not None and len(provider_options) != len(providers):
        raise ValueError("'providers' and 'provider_options' should be the same length if both are given.")
    for i, entry in enumerate(providers):
        name, options = (entry[0], dict(entry[1])) if isinstance(entry, tuple) else (entry, {})
        if provider_options is not None:
            options.update(provider_options[i])
        # Only a GPU provider's name opens a device to see whether it is available; the CPU's never does.
        if name not in PROVIDER_BACKENDS or (PROVIDER_BACKENDS[name] not in (None, "cpu") and not _gpu_ok()):
            warnings.warn(f"Specified provider '{name}' is not in available provider names."
                          f"Available providers: '{', '.join(get_available_providers())}'", stacklevel=3)
            continue
        return name, {str(k): str(v) for k, v in options.items()}
    return CPU_PROVIDER, {}


# -- the session -------------------------------------------------------------------------------------------------
class InferenceSession:
    """A model on one wgsentis Worker, with ONNX Runtime's session API.

    ``path_or_bytes``: a path (str or PathLike) or the serialized model. ``providers``: see the module docstring.
    Keyword arguments ONNX Runtime takes (e.g. ``disabled_optimizers``) are accepted and ignored."""

    def __init__(self, path_or_bytes: str | os.PathLike | bytes, sess_options: SessionOptions | None = None,
                 providers: Sequence[Any] | None = None, provider_options: Sequence[dict] | None = None,
                 **kwargs: Any) -> None:
        self._sess_options = sess_options or SessionOptions()
        self._proto = self._read_proto(path_or_bytes)
        # As in ONNX Runtime: the path (None for bytes), the bytes (None for a path).
        is_bytes = isinstance(path_or_bytes, bytes | bytearray | memoryview)
        self._model_path = None if is_bytes else os.fspath(path_or_bytes)
        self._model_bytes = bytes(path_or_bytes) if is_bytes else None
        if providers is None and self._sess_options.added_providers:  # SessionOptions.add_provider's
            providers = list(self._sess_options.added_providers)
        self._provider, self._provider_options = _choose_provider(providers, provider_options)
        self.backend = _backend_of(self._provider)
        optimize = self._sess_options.graph_optimization_level != GraphOptimizationLevel.ORT_DISABLE_ALL
        threads = max(int(self._sess_options.intra_op_num_threads), 0) or None  # 0 or negative: the default
        spin = self._sess_options._config.get("session.intra_op.allow_spinning", "1") != "0"
        with ort_errors():
            source = self._model_bytes if is_bytes else self._model_path
            self._model = wgsentis.load_model(source, optimize=optimize)
            self._worker = Worker(self._model, self.backend, threads=threads, spin_wait=spin,
                                  adapter=_adapter_of(self.backend, self._provider_options))
        self._describe()

    @staticmethod
    def _read_proto(path_or_bytes: Any) -> onnx.ModelProto:
        """The ModelProto (without external data) for names, types and metadata; ONNX Runtime's load errors."""
        proto = onnx.ModelProto()
        if isinstance(path_or_bytes, bytes | bytearray | memoryview):
            data = bytes(path_or_bytes)
            label = "<bytes>"
        elif isinstance(path_or_bytes, str | os.PathLike):
            label = os.fspath(path_or_bytes)
            if not os.path.isfile(label):
                raise NoSuchFile.make(f"Load model from {label} failed:Load model {label} failed. "
                                      f"File doesn't exist")
            with open(label, "rb") as file:
                data = file.read()
        else:
            raise TypeError(f"Unable to load from type '{type(path_or_bytes)}'")
        try:
            proto.ParseFromString(data)
        except Exception:  # protobuf's DecodeError family
            raise InvalidProtobuf.make(f"Failed to load model {label} because protobuf parsing failed.") from None
        if not proto.HasField("graph"):
            raise InvalidProtobuf.make(f"Failed to load model {label}: it has no graph.")
        return proto

    def _describe(self) -> None:
        graph = self._proto.graph
        initializers = {t.name for t in graph.initializer}
        # An initializer listed as a graph input is no required input; from IR 4 on a run may override it (before,
        # it is a constant), as in ONNX Runtime.
        overridable_ok = self._proto.ir_version >= 4
        self._inputs = [NodeArg(v.name, v.type) for v in graph.input if v.name not in initializers]
        self._overridable = [NodeArg(v.name, v.type) for v in graph.input if overridable_ok and v.name in initializers]
        outputs = list(graph.output)
        if any(not _shape_of(v.type) and v.type.WhichOneof("value") in ("tensor_type", None) for v in outputs):
            # ONNX Runtime reports the inferred type of an output the model leaves undeclared.
            with contextlib.suppress(Exception):
                inferred = onnx.shape_inference.infer_shapes(self._proto)
                outputs = list(inferred.graph.output)
        self._outputs = [NodeArg(v.name, v.type) for v in outputs]
        declared = {v.name for v in graph.output if _shape_of(v.type)}
        for arg in self._outputs:
            if arg.name not in declared:
                # onnx's inference names the dims it cannot size "unk__N"; ONNX Runtime leaves them unnamed (None).
                arg.shape = [None if isinstance(d, str) and _INFERRED_DIM.fullmatch(d) else d for d in arg.shape]
        self._input_dtypes = {info.name: info.dtype for info in self._model.inputs + self._model.overridable
                              if info.kind == "tensor"}

    # -- description
    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    def get_overridable_initializers(self) -> list[NodeArg]:
        return list(self._overridable)

    def get_modelmeta(self) -> ModelMetadata:
        return ModelMetadata(self._proto)

    def get_providers(self) -> list[str]:
        return [self._provider]

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        return {self._provider: dict(self._provider_options)}

    def get_session_options(self) -> SessionOptions:
        return self._sess_options

    def end_profiling(self) -> str:
        """No ONNX Runtime profile is written (use ``wgsentis.profile``): the empty file name."""
        return ""

    def get_profiling_start_time_ns(self) -> int:
        return 0

    def set_providers(self, providers: Sequence[Any] | None = None,
                      provider_options: Sequence[dict] | None = None) -> None:
        """Move the session to another provider's backend (a new Worker)."""
        provider, options = _choose_provider(providers, provider_options)
        backend = _backend_of(provider)
        adapter = _adapter_of(backend, options)
        if backend != self.backend or adapter != self._worker.adapter:
            with ort_errors():
                worker = Worker(self._model, backend, threads=self._worker.threads, spin_wait=self._worker.spin_wait,
                                adapter=adapter)
            self._worker.close()
            self._worker, self.backend = worker, backend
        self._provider, self._provider_options = provider, options

    def disable_fallback(self) -> None:
        """Accepted: there is no provider fallback to disable."""

    def enable_fallback(self) -> None:
        """Accepted: there is no provider fallback to enable."""

    # -- running
    def _feeds(self, input_feed: Mapping[str, Any]) -> dict[str, Any]:
        names = list(input_feed.keys())  # a non-mapping fails here with AttributeError, as in ONNX Runtime
        known = {a.name for a in self._inputs} | {a.name for a in self._overridable}
        for name in names:
            if name not in known:
                raise InvalidArgument.make(f"Invalid input name: {name}")
        missing = [a.name for a in self._inputs if a.name not in input_feed]
        if missing:
            raise MissingInputs(f"Required inputs ({missing}) are missing from input feed ({names}).")
        feeds: dict[str, Any] = {}
        for name, value in input_feed.items():
            if isinstance(value, OrtValue):
                value = value.feed()
            elif isinstance(value, list | tuple | int | float | bool) and self._input_dtypes.get(name) is not None:
                # ONNX Runtime turns a Python list fed to a tensor input into an array of the input's type.
                value = np.asarray(value, dtype=self._input_dtypes[name])
            feeds[name] = value
        return feeds

    def _output_names(self, output_names: Sequence[str] | None) -> list[str]:
        all_names = [a.name for a in self._outputs]
        if not output_names:  # None or empty: every output, as in ONNX Runtime
            return all_names
        if isinstance(output_names, str):
            raise TypeError("run(): output_names must be a list of str or None, not a str")
        for name in output_names:
            if name not in all_names:
                raise InvalidArgument.make(f"Invalid output name:{name}")
        return list(output_names)

    def _execute(self, feeds: dict[str, Any], run_options: RunOptions | None, on_device: bool) -> dict[str, Any]:
        with ort_errors():
            if run_options is None:
                return self._worker.run(feeds, on_device=on_device)
            with run_options._running_on(self._worker):
                return self._worker.run(feeds, on_device=on_device)

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
            run_options: RunOptions | None = None) -> list[Any]:
        """The outputs ``output_names`` (None: all) as numpy arrays (lists/dicts for sequences and maps)."""
        names = self._output_names(output_names)
        feeds = self._feeds(input_feed)
        outputs = self._execute(feeds, run_options, on_device=False)
        return [outputs[name] for name in names]

    def run_async(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
                  callback: Callable[[list[Any], Any, str], None], user_data: Any,
                  run_options: RunOptions | None = None) -> None:
        """``run`` on another thread, then ``callback(outputs, user_data, "")``, or ``callback([], user_data,
        message)`` when the run fails, as ONNX Runtime calls it."""

        def work() -> None:
            try:
                outputs = self.run(output_names, input_feed, run_options)
            except Exception as exc:  # the callback is told, as ONNX Runtime's status string
                callback([], user_data, _ORT_PREFIX.sub("", str(exc)) or type(exc).__name__)
                return
            callback(outputs, user_data, "")

        threading.Thread(target=work, name="wgsentis.ort.run_async", daemon=True).start()

    def run_with_ort_values(self, output_names: Sequence[str] | None, input_dict_ort_values: Mapping[str, Any],
                            run_options: RunOptions | None = None) -> list[OrtValue]:
        return [OrtValue(value) for value in self.run(output_names, input_dict_ort_values, run_options)]

    def io_binding(self) -> IOBinding:
        return IOBinding(self)

    def run_with_iobinding(self, iobinding: IOBinding, run_options: RunOptions | None = None) -> None:
        names = self._output_names(list(iobinding.bound_outputs))
        feeds = self._feeds(iobinding.bound_inputs)
        on_device = self.backend != "cpu" and any(dev != "cpu" for dev in iobinding.bound_outputs.values())
        outputs = self._execute(feeds, run_options, on_device=on_device)
        results = []
        for name in names:
            device = iobinding.bound_outputs[name]
            value = outputs[name]
            if isinstance(value, Tensor) and (device == "cpu" or not value.on_device):
                value, device = value.download_to_array(), "cpu"
            elif not isinstance(value, Tensor):
                device = "cpu"
            results.append(iobinding.output_value(name, value, device))
        iobinding.set_results(results)

    def close(self) -> None:
        """Release the Worker (not in ONNX Runtime's API, where the session goes with its last reference)."""
        self._worker.close()


# -- installing the facade as onnxruntime ------------------------------------------------------------------------
def _facade_modules(backend: str) -> dict[str, types.ModuleType]:
    """The modules ``onnxruntime`` clients import, each a view of this module."""
    this = sys.modules[__name__]
    state = types.ModuleType("onnxruntime.capi.onnxruntime_pybind11_state",
                             "wgsentis.ort's error classes and types under onnxruntime's pybind module name")
    collection = types.ModuleType("onnxruntime.capi.onnxruntime_inference_collection",
                                  "wgsentis.ort's session classes under onnxruntime's module name")
    for cls in (*ERROR_CLASSES, NodeArg, ModelMetadata, SessionOptions, RunOptions, GraphOptimizationLevel,
                ExecutionMode, ExecutionOrder, OrtValue):
        setattr(state, cls.__name__, cls)
    for cls in (InferenceSession, IOBinding, OrtValue):
        setattr(collection, cls.__name__, cls)
    state.get_available_providers = get_available_providers
    state.get_all_providers = get_all_providers
    state.get_device = get_device
    for function in (set_default_logger_severity, set_default_logger_verbosity, disable_telemetry_events,
                     enable_telemetry_events, get_version_string, get_build_info, set_seed):
        setattr(state, function.__name__, function)
    capi = types.ModuleType("onnxruntime.capi", "wgsentis.ort's capi package")
    capi.onnxruntime_pybind11_state = state
    capi.onnxruntime_inference_collection = collection
    capi._pybind_state = state
    this.capi = capi
    return {"onnxruntime": this, "onnxruntime.capi": capi, "onnxruntime.capi.onnxruntime_pybind11_state": state,
            "onnxruntime.capi._pybind_state": state,
            "onnxruntime.capi.onnxruntime_inference_collection": collection}


class installed(contextlib.ContextDecorator):  # noqa: N801 - reads as a context, like contextlib's
    """Within ``with wgsentis.ort.installed(backend="cpu"):``, ``import onnxruntime`` (and its ``capi`` submodules)
    gives this facade and the CPU provider runs on ``backend``. On exit, also when the body raises, ``sys.modules``
    holds exactly the onnxruntime modules it held before (the real ones, or none) and the default backend is
    restored. Modules that imported onnxruntime before entering keep the object they hold.

    The one-liner for a whole program: ``import wgsentis.ort; wgsentis.ort.install()`` (``install`` enters an
    ``installed`` and returns it; ``.uninstall()`` restores)."""

    def __init__(self, backend: str = "cpu") -> None:
        from wgsentis.worker import backend_of

        with ort_errors():
            self.backend = backend_of(backend).value
        self._saved: dict[str, types.ModuleType] | None = None
        self._saved_backend = "cpu"
        self._saved_installed = False

    def __enter__(self) -> installed:
        global _default_backend, _installed
        if self._saved is not None:
            raise RuntimeError("wgsentis.ort.installed is already entered")
        self._saved = {k: m for k, m in sys.modules.items() if k == "onnxruntime" or k.startswith("onnxruntime.")}
        for key in self._saved:
            del sys.modules[key]
        sys.modules.update(_facade_modules(self.backend))
        self._saved_backend, _default_backend = _default_backend, self.backend
        self._saved_installed, _installed = _installed, True
        return self

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    def uninstall(self) -> None:
        global _default_backend, _installed
        if self._saved is None:
            return
        for key in [k for k in sys.modules if k == "onnxruntime" or k.startswith("onnxruntime.")]:
            del sys.modules[key]
        sys.modules.update(self._saved)
        self._saved = None
        _default_backend, _installed = self._saved_backend, self._saved_installed


def install(backend: str = "cpu") -> installed:
    """Make ``import onnxruntime`` give this facade for the rest of the program (see ``installed``)."""
    handle = installed(backend)
    handle.__enter__()
    return handle


__all__ = [
    "CPU_PROVIDER", "GPU_PIXEL_PROVIDER", "ORT_API_VERSION", "PROVIDER_BACKENDS", "WEBGPU_PROVIDER",
    "WGSENTIS_CPU_PROVIDER",
    "DeviceReset", "EPFail", "EngineError", "ExecutionMode", "ExecutionOrder", "Fail", "GraphOptimizationLevel",
    "IOBinding", "InferenceSession", "InvalidArgument", "InvalidGraph", "InvalidIndexArgument", "InvalidProtobuf",
    "MissingInputs", "ModelLoadCanceled", "ModelLoaded", "ModelMetadata", "ModelRequiresCompilation", "NoModel",
    "NoSuchFile", "NodeArg", "NotFound", "NotImplemented", "OrtValue", "RunOptions", "RunTerminated",
    "RuntimeException", "SessionOptions", "disable_telemetry_events", "enable_telemetry_events", "get_all_providers",
    "get_available_providers", "get_build_info", "get_device", "get_version_string", "install", "installed",
    "preload_dlls", "set_default_logger_severity", "set_default_logger_verbosity", "set_seed",
]
