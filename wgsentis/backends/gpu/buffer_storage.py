"""How the GPU programs keep tensors in storage buffers: device inputs copied in, outputs held on the device or
copied out for a readback, uploads written (``BufferStorage``, mixed into ``program.GPUProgram``; a backend that
keeps tensors elsewhere, gpu-pixel's textures, overrides these hooks)."""

from __future__ import annotations

from typing import Any

import numpy as np

from wgsentis.backends.gpu.device_tensors import DeviceValue
from wgsentis.backends.gpu.dtypes import from_device_array, to_device_array
from wgsentis.backends.gpu.tensors import GTensor, aligned


class BufferStorage:
    """Tensor storage in storage buffers (mixed into GPUProgram, whose ``ctx``, ``backend`` and
    ``new_allocation`` it uses)."""

    ctx: Any
    backend: str

    def new_allocation(self, nbytes: int, what: str = "", layer: Any = None) -> Any:
        raise NotImplementedError

    def binds_device_value(self, value: DeviceValue, t: GTensor) -> bool:
        """Whether ``value`` can be copied device to device into ``t`` (a whole buffer allocation here)."""
        return t.chunks is None and value.binds_into(self.ctx, self.backend, None)

    def copy_device_value(self, encoder: Any, value: DeviceValue, t: GTensor) -> None:
        """Record the copy of ``value`` into ``t`` (``binds_device_value`` said it can)."""
        value.copy_into(encoder, t.alloc.buffer, t.alloc.offset)

    def detach(self, encoder: Any, t: GTensor) -> DeviceValue | None:
        """Record the copy of output ``t`` into a buffer of its own; the DeviceValue that holds it, or None where
        ``t`` cannot be held so (split into chunks: it is read back instead)."""
        if t.chunks is not None:
            return None
        usage = self.ctx.wgpu.BufferUsage
        nbytes = aligned(max(4, t.nbytes), 4)
        buffer = self.ctx.create_buffer(nbytes, usage.STORAGE | usage.COPY_SRC | usage.COPY_DST,
                                        f"wgsentis device tensor {t.name}", f"device output '{t.name}'")
        if t.nbytes:
            encoder.copy_buffer_to_buffer(t.alloc.buffer, t.alloc.offset + 4 * t.first, buffer, 0,
                                          aligned(t.nbytes, 4))
        return DeviceValue(self.ctx, self.backend, buffer, t.shape, t.dtype, nbytes, bound=t.bound, name=t.name)

    def prepare_upload(self, value: np.ndarray, what: str) -> Any:
        """``value`` checked and converted for the device (raises TooLargeForDevice where it cannot live there)."""
        return to_device_array(value, what)

    def input_tensor(self, name: str, value: np.ndarray | DeviceValue) -> GTensor:
        """A device tensor to upload ``value`` into (an input, or a fallback layer's output)."""
        return GTensor(self.new_allocation(max(4, 4 * value.size), f"tensor '{name}' {list(value.shape)}"),
                       value.shape, value.dtype, name)

    def write(self, t: GTensor, prepared: Any) -> int:
        """Upload ``prepared`` (``prepare_upload``'s result) into ``t``; returns the bytes written."""
        if prepared.nbytes:
            self.ctx.queue.write_buffer(t.alloc.buffer, t.alloc.offset, prepared)
        return int(prepared.nbytes)

    def readback_bytes(self, t: GTensor) -> int:
        """Staging bytes ``copy_out`` writes for ``t`` (a multiple of 256, where the next copy may start)."""
        return aligned(max(4, t.nbytes))

    def copy_out(self, encoder: Any, t: GTensor, staging: Any, offset: int) -> None:
        """Record the copy of ``t`` into ``staging`` at ``offset``."""
        if t.nbytes:
            encoder.copy_buffer_to_buffer(t.alloc.buffer, t.alloc.offset, staging, offset, aligned(t.nbytes, 4))

    def decode(self, t: GTensor, raw: np.ndarray) -> np.ndarray:
        """``t``'s value from the staging bytes ``copy_out`` wrote (``raw`` starts at its offset)."""
        words = raw[: t.nbytes].view(np.uint32) if t.nbytes else np.zeros(0, np.uint32)
        return from_device_array(words, t.shape, t.dtype)
