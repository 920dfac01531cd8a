"""Host syncs of a GPU program: downloading device tensors (with the run's index fault words), and running a
fallback layer's numpy kernel between GPU segments, recorded and replayed. A mixin of ``program.GPUProgram``,
whose state (context, placer, faults, run report, control) it uses."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from wgsentis.backends.gpu.device import map_for_reading
from wgsentis.backends.gpu.dtypes import TooLargeForDevice, gpu_type_of
from wgsentis.backends.gpu.faults import index_fault
from wgsentis.backends.gpu.placement import host_of
from wgsentis.backends.gpu.readback import StagingPool
from wgsentis.backends.gpu.steps import Fallback, PlanInvalid, Transfer
from wgsentis.backends.gpu.tensors import GTensor, aligned
from wgsentis.ir import Layer, captured_names

MAX_DOWNLOAD_POOLS = 16  # staging sizes kept for fallback downloads; the oldest size goes first


class HostSync:
    """Downloads and fallback layers (mixed into GPUProgram)."""

    ctx: Any
    graph: Any
    placer: Any
    faults: Any
    last_run: Any
    control: Any
    _download_pools: dict[int, StagingPool]
    readback_bytes: Any  # the program's tensor storage (program.GPUProgram)
    copy_out: Any
    decode: Any

    def download(self, tensors: list[GTensor], encoder: Any, layer: str) -> list[np.ndarray]:
        """Submit ``encoder`` with copies of ``tensors`` into a staging buffer; wait; return host arrays.
        The run's index fault words ride along: a host layer must not compute on what a faulted index
        produced (it could fail otherwise, or not at all), so a fault raises its IndexOutOfRangeError here."""
        offsets, total = [], 0
        for t in tensors:
            offsets.append(total)
            total += self.readback_bytes(t)
        fault_at, checks = total, None
        if tensors and self.faults.run_checks:
            total += aligned(self.faults.nbytes())
        staging, pool = None, None
        if total:
            # Kept between runs, one pool per size: a plan's fallback downloads the same bytes every replay.
            pool = self._download_pools.get(total)
            if pool is None:
                if len(self._download_pools) >= MAX_DOWNLOAD_POOLS:
                    self._download_pools.pop(next(iter(self._download_pools))).close()
                pool = self._download_pools[total] = StagingPool(self.ctx, total, "wgsentis download")
            staging = pool.acquire(f"the staging buffer for the inputs of layer '{layer}'")
            for t, off in zip(tensors, offsets, strict=True):
                self.copy_out(encoder, t, staging, off)
            if tensors:
                checks = self.faults.copy_into(encoder, staging, fault_at)
        start = time.perf_counter()
        self.ctx.queue.submit([encoder.finish()])
        out = []
        if staging is not None:
            map_for_reading(staging, f"the inputs of layer '{layer}'")
            raw = np.frombuffer(staging.read_mapped(copy=True), dtype=np.uint8)
            staging.unmap()
            pool.release(staging)
            if checks is not None:
                error = index_fault(raw[fault_at:], checks[1])
                if error is not None:
                    raise error
        for t, off in zip(tensors, offsets, strict=True):
            out.append(self.decode(t, raw[off:]))
        seconds = time.perf_counter() - start
        for t in tensors:
            self.last_run.transfers.append(Transfer("download", t.name, t.nbytes, layer,
                                                    seconds / max(1, len(tensors))))
        return out

    def _fallback_inputs(self, layer: Layer, args: list[Any], encoder: Any) -> list[Any]:
        """Download the device-only arguments of a fallback layer (submitting ``encoder``)."""
        on_device = [(k, a) for k, a in enumerate(args) if isinstance(a, GTensor) and a.host is None]
        for k, a in on_device:
            a.name = a.name or (layer.inputs[k] if k < len(layer.inputs) else "")
        values = self.download([a for _, a in on_device], encoder, layer.name)
        host = [host_of(a) for a in args]
        for (k, _), v in zip(on_device, values, strict=True):
            host[k] = v
        return host

    def record_fallback(self, index: int, layer: Layer, args: list[Any], encoder: Any,
                         env: dict[str, Any]) -> tuple[tuple[Any, ...], Fallback]:
        """Fallback layer ``index`` in a run being recorded: its inputs downloaded (one sync), its kernel run on the
        host, its outputs uploaded; returns (the outputs, the plan's Fallback step that replays it)."""
        captured = {n: self.value_of(n, env) for n in sorted(captured_names(layer))}
        for n, v in captured.items():
            if isinstance(v, GTensor):
                v.name = v.name or n
        host = self._with_outer_scope(index, layer, args, captured, encoder)
        if self.control is not None:
            self.control.before_layer(layer, host)  # the host values are known now: check the budget again
        results = self.run_host(index, host)
        outputs: list[Any] = []
        targets: list[GTensor | None] = []
        for name, value in zip(layer.outputs, results, strict=False):
            target = None
            if name and isinstance(value, np.ndarray) and gpu_type_of(value.dtype) is not None:
                try:
                    target = self.upload_input(name, value, None, layer.name)
                except TooLargeForDevice:
                    target = None
            outputs.append(target if target is not None else value)
            targets.append(target)
        step = Fallback(index, list(args), targets, captured)
        for name, t in zip(layer.outputs, targets, strict=False):
            if t is not None and name not in self.placer.host_needed:
                t.host = None  # later layers must read the device copy: a replay brings new data
        return tuple(outputs), step

    def _with_outer_scope(self, index: int, layer: Layer, args: list[Any], captured: dict[str, Any],
                          encoder: Any) -> list[Any]:
        """Host values of a fallback layer's inputs and of the outer-scope tensors its subgraphs read,
        downloaded together in one sync."""
        names = list(captured)
        host = self._fallback_inputs(layer, [*args, *captured.values()], encoder)
        if names:
            self.placer.set_outer_scope(index, names, host[len(args):])
        return host[: len(args)]

    def _replay_fallback(self, step: Fallback, encoder: Any) -> None:
        layer = self.graph.layers[step.layer]
        host = self._with_outer_scope(step.layer, layer, step.args, step.captured, encoder)
        if self.control is not None:
            self.control.before_layer(layer, host)
        results = self.run_host(step.layer, host)
        for name, value, target in zip(layer.outputs, results, step.targets, strict=False):
            if target is None or not name:
                continue
            if not isinstance(value, np.ndarray) or tuple(value.shape) != target.shape or value.dtype != target.dtype:
                raise PlanInvalid(name)
            try:
                self.upload_input(name, value, target, layer.name)
            except TooLargeForDevice:
                raise PlanInvalid(name) from None  # int64 values past int32: recorded anew, kept on the host
            target.host = None
