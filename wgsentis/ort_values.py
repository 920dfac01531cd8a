"""ONNX Runtime's value objects for ``wgsentis.ort``: ``OrtValue`` (a host array, a list for a sequence output, or a
wgsentis ``Tensor`` kept on the GPU) and ``IOBinding`` (inputs and output devices bound for one run).

``wgsentis.ort`` re-exports both, so clients write ``onnxruntime.OrtValue`` / ``session.io_binding()`` as with ONNX
Runtime; the session's ``run_with_iobinding`` reads a binding through ``bound_inputs`` / ``bound_outputs`` and hands
its results back with ``set_results``.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from wgsentis.ort_errors import InvalidArgument, NotImplemented
from wgsentis.tensor import Tensor


def elem_name(elem_type: int) -> str:
    """An ONNX element type as ONNX Runtime names it in type strings: 1 -> "float", 7 -> "int64"."""
    return onnx.TensorProto.DataType.Name(elem_type).lower()


def onnx_elem_type(dtype: Any) -> int:
    """The ONNX element type (TensorProto.DataType) of a numpy dtype; strings (object, str, bytes) are STRING."""
    dtype = np.dtype(dtype)
    if dtype.kind in "OUS":
        return onnx.TensorProto.STRING
    return int(onnx.helper.np_dtype_to_tensor_dtype(dtype))


def numpy_elem_name(dtype: Any) -> str:
    return elem_name(onnx_elem_type(dtype))


def dtype_of(element_type: Any) -> np.dtype:
    """The numpy dtype of an element type as ONNX Runtime takes it: a numpy type or an ONNX element type (int)."""
    if isinstance(element_type, int | np.integer) and not isinstance(element_type, bool):
        try:
            return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(element_type)))
        except (KeyError, ValueError):
            raise InvalidArgument.make(f"unknown ONNX element type {element_type}") from None
    return np.dtype(element_type)


def host_buffer(buffer_ptr: int, element_type: Any, shape: Sequence[int]) -> np.ndarray:
    """A numpy view of ``shape`` elements of ``element_type`` at host address ``buffer_ptr`` (no copy: a run reads,
    or writes, the memory as it is then, as ONNX Runtime does with a bound pointer)."""
    dtype = dtype_of(element_type)
    dims = [int(d) for d in shape]
    if not buffer_ptr:
        raise InvalidArgument.make("IOBinding: the buffer pointer is null")
    size = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    return np.frombuffer((ctypes.c_char * size).from_address(int(buffer_ptr)), dtype=dtype).reshape(dims)


def _value_type(value: Any) -> str:
    """ONNX Runtime's type string of a value a session returns: tensor(float), seq(tensor(int64)), map(...)."""
    if isinstance(value, list):
        return f"seq({_value_type(value[0])})" if value else "seq(tensor(float))"
    if isinstance(value, dict):
        key, item = next(iter(value.items()), (0, 0.0))
        key_type = "string" if isinstance(key, str) else "int64"
        return f"map({key_type},{_value_type(np.asarray(item))})"
    return f"tensor({numpy_elem_name(value.dtype)})"


class OrtValue:
    """A value fed to or returned by a session: a numpy array on the host, a list (a sequence output), or a wgsentis
    ``Tensor`` whose data stays on the GPU (outputs bound to a device with ``IOBinding.bind_output``). Feeding it to
    a session of the same device passes the Tensor on without a copy through the host."""

    def __init__(self, value: Any, device: str = "cpu") -> None:
        self._value = value
        self._device = device

    @staticmethod
    def ortvalue_from_numpy(array: Any, device_type: str = "cpu", device_id: int = 0) -> OrtValue:
        # Device placement of inputs is the session's: a host array goes to the worker's device when it runs.
        return OrtValue(np.asarray(array), "cpu")

    @staticmethod
    def ortvalue_from_shape_and_type(shape: Sequence[int], element_type: Any, device_type: str = "cpu",
                                     device_id: int = 0, vendor_id: Any = None, memory_info: Any = None) -> OrtValue:
        """A zero-filled host tensor; ``element_type`` a numpy type or an ONNX element type (int), as in ONNX
        Runtime. The device is ignored: the session places inputs on its backend."""
        return OrtValue(np.zeros([int(d) for d in shape], dtype=dtype_of(element_type)), "cpu")

    @staticmethod
    def ortvalue_from_numpy_with_onnx_type(data: Any, onnx_element_type: int) -> OrtValue:
        """``data`` reinterpreted (no copy) as ``onnx_element_type``, which must have the same item size."""
        array = np.asarray(data)
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(onnx_element_type)))
        if dtype.itemsize != array.dtype.itemsize:
            raise InvalidArgument.make(f"ortvalue_from_numpy_with_onnx_type: {array.dtype} ({array.dtype.itemsize} "
                                       f"bytes) cannot be read as {elem_name(int(onnx_element_type))} "
                                       f"({dtype.itemsize} bytes)")
        return OrtValue(array.view(dtype), "cpu")

    def numpy(self) -> Any:
        value = self._value
        return value.download_to_array() if isinstance(value, Tensor) else value

    def shape(self) -> list[int]:
        value = self._value
        return list(value.shape) if hasattr(value, "shape") else [len(value)]

    def device_name(self) -> str:
        return self._device

    def data_type(self) -> str:
        return _value_type(self._value)

    def element_type(self) -> int:
        """The ONNX element type (TensorProto.DataType, 1 for float) of a tensor, as ONNX Runtime 1.32 returns."""
        if not self.is_tensor():
            raise InvalidArgument.make(f"element_type() is for tensors; this OrtValue holds {self.data_type()}")
        return onnx_elem_type(self._value.dtype)

    def tensor_size_in_bytes(self) -> int:
        if not self.is_tensor():
            raise InvalidArgument.make(f"tensor_size_in_bytes() is for tensors; this OrtValue holds "
                                       f"{self.data_type()}")
        return int(np.prod(self.shape(), dtype=np.int64)) * np.dtype(self._value.dtype).itemsize

    def is_tensor(self) -> bool:
        return isinstance(self._value, np.ndarray | Tensor)

    def is_tensor_sequence(self) -> bool:
        return isinstance(self._value, list) and all(isinstance(v, np.ndarray) for v in self._value)

    def is_sparse_tensor(self) -> bool:
        return False

    def has_value(self) -> bool:
        return self._value is not None

    def data_ptr(self) -> int:
        """The host buffer's address; a device tensor's raises NotImplemented (wgpu buffers have no pointer)."""
        if not isinstance(self._value, np.ndarray):
            raise NotImplemented.make(f"data_ptr() of an OrtValue on {self._device!r} is not supported by wgsentis")
        return int(self._value.ctypes.data)

    def update_inplace(self, data: Any) -> None:
        """Copy ``data`` (an array or an OrtValue) into this host tensor, keeping its buffer."""
        if isinstance(data, OrtValue):
            data = data.numpy()
        if not isinstance(self._value, np.ndarray):
            raise NotImplemented.make(f"update_inplace() of an OrtValue on {self._device!r} is not supported by "
                                      f"wgsentis")
        data = np.asarray(data)
        if data.shape != self._value.shape or data.dtype != self._value.dtype:
            raise InvalidArgument.make(f"update_inplace(): the data is {data.dtype}{list(data.shape)}, the OrtValue "
                                       f"{self._value.dtype}{list(self._value.shape)}")
        np.copyto(self._value, data)

    def feed(self) -> Any:
        """What a session is fed for this value (the array, the list or the device Tensor itself)."""
        return self._value


class IOBinding:
    """ONNX Runtime's IOBinding over one run of the session's Worker. Outputs bound to a device other than "cpu"
    (e.g. "cuda", "webgpu", "gpu") on a GPU backend stay device tensors (``Worker.run(on_device=True)``); on the cpu
    backend, or bound to "cpu", they are host arrays. Raw pointers (``bind_input`` / ``bind_output(...,
    buffer_ptr=...)``) and ``bind_ortvalue_output`` work for host memory ("cpu"): inputs are read from it when the
    run starts, outputs written into it; on another device they raise NotImplemented (wgpu buffers have no
    pointers)."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self.bound_inputs: dict[str, Any] = {}
        self.bound_outputs: dict[str, str] = {}  # name -> device type
        self.bound_buffers: dict[str, np.ndarray] = {}  # name -> the host memory an output is written into
        self._results: list[OrtValue] = []

    def bind_cpu_input(self, name: str, array: Any) -> None:
        self.bound_inputs[name] = np.asarray(array)

    def bind_ortvalue_input(self, name: str, value: OrtValue) -> None:
        self.bound_inputs[name] = value

    def bind_input(self, name: str, device_type: str, device_id: int, element_type: Any, shape: Sequence[int],
                   buffer_ptr: int) -> None:
        if str(device_type).lower() != "cpu":
            raise NotImplemented.make(f"IOBinding.bind_input from a {device_type} pointer is not supported by "
                                      f"wgsentis (only host memory, 'cpu'); use bind_cpu_input or bind_ortvalue_input")
        self.bound_inputs[name] = host_buffer(buffer_ptr, element_type, shape)

    def bind_output(self, name: str, device_type: str = "cpu", device_id: int = 0, element_type: Any = None,
                    shape: Sequence[int] | None = None, buffer_ptr: int | None = None) -> None:
        self.bound_buffers.pop(name, None)
        if buffer_ptr is not None:
            if element_type is None or shape is None:
                raise ValueError("`element_type` and `shape` are to be provided if pre-allocated memory is provided")
            if str(device_type).lower() != "cpu":
                raise NotImplemented.make(f"IOBinding.bind_output into a {device_type} buffer is not supported by "
                                          f"wgsentis (only host memory, 'cpu'); bind by device type instead")
            self.bound_buffers[name] = host_buffer(buffer_ptr, element_type, shape)
        self.bound_outputs[name] = str(device_type).lower()

    def bind_ortvalue_output(self, name: str, value: OrtValue) -> None:
        array = value.feed()
        if not isinstance(array, np.ndarray):
            raise NotImplemented.make(f"IOBinding.bind_ortvalue_output to an OrtValue on {value.device_name()!r} is "
                                      f"not supported by wgsentis (only host values); use bind_output")
        self.bound_buffers[name] = array
        self.bound_outputs[name] = "cpu"

    def output_value(self, name: str, value: Any, device: str) -> OrtValue:
        """The OrtValue of output ``name`` after a run: written into its bound host buffer, if it has one."""
        buffer = self.bound_buffers.get(name)
        if buffer is None:
            return OrtValue(value, device)
        value = np.asarray(value)
        if value.shape != buffer.shape or value.dtype != buffer.dtype:
            raise InvalidArgument.make(f"IOBinding: output '{name}' is {value.dtype}{list(value.shape)}, the buffer "
                                       f"bound to it {buffer.dtype}{list(buffer.shape)}")
        np.copyto(buffer, value)
        return OrtValue(buffer, "cpu")

    def clear_binding_inputs(self) -> None:
        self.bound_inputs.clear()

    def clear_binding_outputs(self) -> None:
        self.bound_outputs.clear()
        self.bound_buffers.clear()

    def synchronize_inputs(self) -> None:
        """Nothing to do: inputs are taken when the run starts."""

    def synchronize_outputs(self) -> None:
        """Nothing to do: ``run_with_iobinding`` returns once the outputs are held."""

    def set_results(self, results: list[OrtValue]) -> None:
        """The outputs of the run with this binding (the session's ``run_with_iobinding`` calls it)."""
        self._results = list(results)

    def get_outputs(self) -> list[OrtValue]:
        return list(self._results)

    def get_outputs_as_ortvaluevector(self) -> list[OrtValue]:
        return list(self._results)

    def copy_outputs_to_cpu(self) -> list[Any]:
        return [value.numpy() for value in self._results]
