"""Bind groups made through wgpu-native's call with its descriptor filled in directly.

wgpu-py's ``create_bind_group`` checks each entry dict and builds every struct through its generic helpers
(``new_struct``: keyword checks, a weak-reference registry per struct): ~0.1 ms of host time for a dispatch's
bind group on the reference machine, about a fifth of recording a plan for a new input size (every step of a new
plan is bound where the planner laid its tensors out). Filling one zeroed entry array costs a tenth of that. The
call still goes through wgpu-py's error-capturing wrapper (``libf``), so a rejected bind group raises as before;
where this wgpu-py lacks the internals used here, the public method is used instead.
"""

from __future__ import annotations

from functools import cache
from typing import Any


@cache
def _native_api() -> Any:
    """wgpu-py's wgpu-native module, or None where it lacks what ``create_bind_group`` uses."""
    try:
        from wgpu.backends.wgpu_native import _api

        for name in ("ffi", "libf", "lib", "GPUBindGroup", "GPUBuffer", "GPUTextureView", "GPUSampler"):
            getattr(_api, name)
        _api.ffi.typeof("WGPUBindGroupEntry[]")
        _api.ffi.typeof("WGPUBindGroupDescriptor *")
        _ = _api.lib.WGPU_STRLEN, _api.lib.WGPU_WHOLE_SIZE
        return _api
    except Exception:  # any mismatch with this wgpu-py: the public method instead
        return None


def create_bind_group(device: Any, layout: Any, resources: list[Any], label: str, native: bool = True) -> Any:
    """A bind group of ``layout`` with ``resources`` at bindings 0, 1, ...: each a (buffer, offset, size) tuple,
    a {"buffer", "offset", "size"} dict, a whole GPUBuffer, a texture view or a sampler. ``native`` False: wgpu-py's
    public method, as a program made with ``native_calls=False`` asks."""
    api = _native_api() if native else None
    if api is None or not hasattr(device, "_internal"):
        return device.create_bind_group(layout=layout, entries=[
            {"binding": i, "resource": {"buffer": r[0], "offset": r[1], "size": r[2]} if isinstance(r, tuple) else r}
            for i, r in enumerate(resources)], label=label)
    ffi = api.ffi
    entries = ffi.new("WGPUBindGroupEntry[]", len(resources))  # zeroed: no chain, null handles
    for i, r in enumerate(resources):
        entry = entries[i]
        entry.binding = i
        if isinstance(r, tuple):
            entry.buffer, entry.offset, entry.size = r[0]._internal, r[1], r[2]
        elif isinstance(r, dict):
            entry.buffer = r["buffer"]._internal
            entry.offset = r.get("offset", 0)
            entry.size = r.get("size", api.lib.WGPU_WHOLE_SIZE)
        elif isinstance(r, api.GPUTextureView):
            entry.textureView = r._internal
        elif isinstance(r, api.GPUSampler):
            entry.sampler = r._internal
        elif isinstance(r, api.GPUBuffer):
            entry.buffer, entry.size = r._internal, r.size
        else:
            raise TypeError(f"unexpected bind group resource {type(r).__name__}")
    descriptor = ffi.new("WGPUBindGroupDescriptor *")
    text = ffi.new("char[]", label.encode()) if label else None  # kept alive through the call
    if text is not None:
        descriptor.label.data = text
        descriptor.label.length = api.lib.WGPU_STRLEN
    descriptor.layout = layout._internal
    descriptor.entries = entries
    descriptor.entryCount = len(resources)
    handle = api.libf.wgpuDeviceCreateBindGroup(device._internal, descriptor)
    return api.GPUBindGroup(label, handle, device)
