"""Tensors that stay on the device: a run's output kept in device memory of its own for whoever holds it.

``Worker.run(..., on_device=True)`` hands out ``DeviceValue``s instead of host arrays: at the end of the run each
output is copied, on the device, out of the plan's arenas into a buffer (gpu-compute) or texture (gpu-pixel) that
belongs to the value alone, so a later run never writes into it (Sentis keeps tensors on their backend until a
readback is asked; ORT's IOBinding binds outputs to device memory). Reading one is an explicit copy to the host
(``read``, or ``start_read`` then ``read``), made once: the data cannot change. Given back as an input of a program
on the same device, it is copied device to device into the plan's input (``copy_into``), never through the host.

The device memory goes with the last reference to the value; the context counts the bytes users hold
(``GPUContext.held``), which the memory budget adds to a run's own.
"""

from __future__ import annotations

import math
import threading
import weakref
from typing import Any

import numpy as np

from wgsentis.backends.gpu.device import GPUContext, map_read_async, wait_mapped
from wgsentis.backends.gpu.dtypes import from_device_array
from wgsentis.backends.gpu.tensors import aligned


class DeviceValue:
    """A tensor's data in device memory of its own: ``resource`` is a buffer (``layout`` None: 4-byte words,
    row-major) or a texture laid out by ``layout`` (gpu-pixel's TextureLayout). ``bound``: for int64, a bound on
    |value| the device's 32-bit words respect (None: any int32). ``backend`` names the storage kind, so that only
    a program keeping tensors the same way binds it without a host round trip."""

    __slots__ = ("__weakref__", "_host", "_lock", "_promise", "_staging", "backend", "bound", "ctx", "dtype",
                 "layout", "name", "nbytes", "resource", "shape")

    def __init__(self, ctx: GPUContext, backend: str, resource: Any, shape: tuple[int, ...], dtype: np.dtype,
                 nbytes: int, layout: Any = None, bound: int | None = None, name: str = "") -> None:
        self.ctx = ctx
        self.backend = backend
        self.resource = resource
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.nbytes = nbytes
        self.layout = layout
        self.bound = bound
        self.name = name
        self._host: np.ndarray | None = None
        self._promise: Any = None
        self._staging: Any = None
        self._lock = threading.Lock()
        ctx.held.add(nbytes)
        weakref.finalize(self, ctx.held.remove, nbytes)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"DeviceValue({self.name!r}, {self.dtype.name}{list(self.shape)}, {self.backend})"

    # -- reading it on the host -------------------------------------------------------------------------------
    def _staging_bytes(self) -> int:
        return self.layout.readback_bytes if self.layout is not None else aligned(max(4, 4 * self.size), 4)

    def start_read(self) -> None:
        """Start the copy to the host (a staging buffer mapped for reading) without waiting for it."""
        with self._lock:
            if self._host is not None or self._promise is not None:
                return
            usage = self.ctx.wgpu.BufferUsage
            nbytes = self._staging_bytes()
            staging = self.ctx.create_buffer(nbytes, usage.MAP_READ | usage.COPY_DST, "wgsentis device tensor read",
                                             f"the readback of device tensor '{self.name}'")
            encoder = self.ctx.device.create_command_encoder(label=f"read {self.name}")
            if self.layout is None:
                if self.size:
                    encoder.copy_buffer_to_buffer(self.resource, 0, staging, 0, aligned(4 * self.size, 4))
            else:
                layout = self.layout
                encoder.copy_texture_to_buffer({"texture": self.resource},
                                               {"buffer": staging, "offset": 0, "bytes_per_row": layout.row_bytes,
                                                "rows_per_image": layout.height}, (layout.width, layout.height, 1))
            self.ctx.queue.submit([encoder.finish()])
            self._staging = staging
            self._promise = map_read_async(staging)

    def read_done(self) -> bool:
        """Whether ``read`` would return without waiting for the device."""
        if self._host is not None:
            return True
        promise = self._promise
        return promise is not None and getattr(promise, "_state", "pending") != "pending"

    def read(self) -> np.ndarray:
        """The value on the host (read from the device once; the data cannot change). Read-only: copy to write."""
        if self._host is not None:
            return self._host
        self.start_read()
        with self._lock:
            if self._host is None:
                wait_mapped(self._promise, f"device tensor '{self.name}'")
                raw = np.frombuffer(self._staging.read_mapped(copy=True), dtype=np.uint8)
                self._staging.unmap()
                self._staging.destroy()
                self._staging = self._promise = None
                if self.layout is None:
                    words = raw.view(np.uint32) if self.size else np.zeros(0, np.uint32)
                    host = from_device_array(words, self.shape, self.dtype)
                else:
                    host = self.layout.unpack(raw).reshape(self.shape).astype(self.dtype, copy=False)
                host = np.array(host, copy=True)
                host.setflags(write=False)
                self._host = host
        return self._host

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        value = self.read()
        return value.astype(dtype) if dtype is not None else value

    # -- binding it on the device -----------------------------------------------------------------------------
    def binds_into(self, ctx: GPUContext, backend: str, layout: Any) -> bool:
        """Whether it can be copied device to device into a tensor of ``backend`` on ``ctx`` kept as ``layout``
        (None: a buffer)."""
        if ctx is not self.ctx or backend != self.backend:
            return False
        return layout == self.layout if layout is not None or self.layout is not None else True

    def copy_into(self, encoder: Any, target: Any, offset: int = 0) -> int:
        """Record the copy into ``target`` (a buffer at byte ``offset``, or a texture of the same layout); returns
        the bytes copied."""
        if self.layout is None:
            nbytes = aligned(4 * self.size, 4)
            if nbytes:
                encoder.copy_buffer_to_buffer(self.resource, 0, target, offset, nbytes)
            return nbytes
        layout = self.layout
        encoder.copy_texture_to_texture({"texture": self.resource}, {"texture": target},
                                        (layout.width, layout.height, 1))
        return layout.width * layout.height * 16
