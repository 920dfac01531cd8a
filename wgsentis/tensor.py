"""Deferred tensors: a handle on a value a worker is computing, with Sentis' readback API."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from typing import Any

import numpy as np

from wgsentis.errors import TensorError


class Tensor:
    """A tensor whose data may not exist yet.

    ``Tensor(array)`` wraps host data. Tensors returned by ``Worker.peek_output`` are deferred:
    their value arrives when the scheduled work finishes. ``readback_and_clone`` blocks for it,
    ``readback_and_clone_async`` awaits it, ``readback_request`` + ``is_readback_request_done``
    poll, and ``download_to_array`` copies it out without consuming the tensor.

    A run with ``on_device=True`` leaves its outputs' data on the GPU (``on_device`` is then True once the run
    is done): ``shape`` and ``dtype`` need no copy, every host read is one copy out, made once, and the Tensor
    given as an input of a worker on the same device is bound there without crossing the host. Its device
    memory is the holder's until the Tensor is dropped; no later run writes into it.
    """

    def __init__(self, data: Any = None, *, name: str = "", _future: Future | None = None,
                 _backend: str = "cpu", _lock: threading.Lock | None = None) -> None:
        self.name = name
        self.backend = _backend
        self._future = _future
        # Shared by the outputs of one run: their readback is mapped and read once, by one thread at a time.
        self._lock = _lock or threading.Lock()
        self._value: Any = None
        self._requested = False
        if _future is None:
            if data is None:
                raise TensorError("Tensor(data): data is required (an array-like or a list of arrays)")
            self._value = data if isinstance(data, list) else np.asarray(data)

    # -- state --------------------------------------------------------------------------------
    def _resolve(self) -> Any:
        """The value on the host (a device value is copied out, once)."""
        value = self._stored()
        return value.read() if _on_device(value) else value

    def _stored(self) -> Any:
        """The value as the run left it: a host value, or a device value (``backends.gpu.device_tensors``)."""
        if self._future is not None:
            with self._lock:
                future = self._future
                if future is not None:
                    source = future.result()  # the run finished recording and submitting
                    self._value = source.wait()[self.name]  # the staging copy is mapped (GPU) or at hand (CPU)
                    self._future = None
        return self._value

    @property
    def is_ready(self) -> bool:
        """True once the value can be read on the host without waiting."""
        future = self._future  # read once: another thread may resolve the tensor meanwhile
        if future is not None:
            if not future.done():
                return False
            if future.exception() is not None or not future.result().done():
                return future.exception() is not None
        try:
            value = self._stored()  # the run's readback is done: no wait
        except Exception:
            return True  # the error is ready to be raised
        return not _on_device(value) or value.read_done()

    @property
    def on_device(self) -> bool:
        """Whether the data lives in device memory (waits for the producing run)."""
        return _on_device(self._stored())

    @property
    def device_value(self) -> Any:
        """The data held in device memory (a ``backends.gpu.device_tensors.DeviceValue``: what a worker on the same
        device binds without a copy through the host), or None where it is on the host (waits for the run)."""
        value = self._stored()
        return value if _on_device(value) else None

    @property
    def shape(self) -> tuple[int, ...]:
        """The tensor's shape (waits for the producing work when it is still running)."""
        value = self._stored()
        return tuple(value.shape) if isinstance(value, np.ndarray) or _on_device(value) else (len(value),)

    @property
    def dtype(self) -> np.dtype:
        """The element type (waits for the producing work when it is still running)."""
        value = self._stored()
        if isinstance(value, np.ndarray) or _on_device(value):
            return value.dtype
        return value[0].dtype if value else np.dtype(np.float32)

    # -- readback -----------------------------------------------------------------------------
    def readback_request(self) -> None:
        """Start bringing the data to the host without waiting for it (a device tensor's copy out starts once
        its run is done)."""
        self._requested = True
        future = self._future
        if future is None or future.done():
            value = self._stored() if future is None or future.exception() is None else None
            if _on_device(value):
                value.start_read()

    def is_readback_request_done(self) -> bool:
        """Whether a readback started by ``readback_request`` has completed."""
        if not self._requested:
            raise TensorError(f"tensor '{self.name}': is_readback_request_done() before readback_request()")
        ready = self.is_ready
        if not ready and (self._future is None or self._future.done()):
            self.readback_request()  # the run finished after the request: start a device tensor's copy out now
        return ready

    def readback_and_clone(self) -> Tensor:
        """Block until the data is on the host; return a CPU copy of it."""
        return Tensor(_copy(self._resolve()), name=self.name)

    async def readback_and_clone_async(self) -> Tensor:
        """Awaitable ``readback_and_clone``: the event loop runs while the work finishes."""
        future = self._future
        if future is not None:
            source = await asyncio.wrap_future(future)
            while not source.done():  # the GPU maps the staging buffer meanwhile; keep the loop free
                await asyncio.sleep(0.0005)
        value = self._stored()
        if _on_device(value):
            value.start_read()
            while not value.read_done():
                await asyncio.sleep(0.0005)
        return self.readback_and_clone()

    def download_to_array(self) -> Any:
        """A numpy copy of the data (a list of arrays for a sequence); the tensor stays usable."""
        return _copy(self._resolve())

    def numpy(self) -> Any:
        """Alias of ``download_to_array``."""
        return self.download_to_array()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        value = np.asarray(self._resolve())
        return value.astype(dtype) if dtype is not None else value

    def __repr__(self) -> str:
        future = self._future
        if future is not None and not (future.done() and (future.exception() is not None
                                                          or future.result().done())):
            return f"Tensor({self.name!r}, pending, backend={self.backend})"
        value = self._stored()
        if _on_device(value):
            shape = f"{value.dtype.name}{list(value.shape)}"
            return f"Tensor({self.name!r}, {shape}, on the device, backend={self.backend})"
        if isinstance(value, np.ndarray):
            return f"Tensor({self.name!r}, {value.dtype.name}{list(value.shape)}, backend={self.backend})"
        return f"Tensor({self.name!r}, sequence of {len(value)}, backend={self.backend})"


def _on_device(value: Any) -> bool:
    """Whether ``value`` is data held on a device (a ``backends.gpu.device_tensors.DeviceValue``)."""
    return hasattr(value, "start_read") and hasattr(value, "read_done")


def _copy(value: Any) -> Any:
    if isinstance(value, list):
        return [_copy(v) for v in value]
    if isinstance(value, dict):  # a map (ZipMap's items): keys are scalars, values copied
        return {k: _copy(v) if isinstance(v, list | dict | np.ndarray) else v for k, v in value.items()}
    return None if value is None else np.array(value, copy=True)
