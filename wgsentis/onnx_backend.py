"""The standard ``onnx.backend.base.Backend`` interface, so ONNX's own test runner drives wgsentis."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from wgsentis.errors import WgSentisError
from wgsentis.onnx_import import import_model
from wgsentis.worker import BackendType, Worker

# Device strings: "GPU" is gpu-compute; "GPU-COMPUTE" and "GPU-PIXEL" name a GPU backend (or pass backend=...).
_DEVICES = {"CPU": BackendType.CPU, "GPU": BackendType.GPU_COMPUTE, "GPU-COMPUTE": BackendType.GPU_COMPUTE,
            "GPU-PIXEL": BackendType.GPU_PIXEL}


class WgSentisRep(BackendRep):
    """A prepared model: a worker bound to a backend."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        names = [i.name for i in self.worker.model.inputs]
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            feeds = dict(zip(names, inputs, strict=False))
        outputs = self.worker.run(feeds)
        return tuple(outputs[o.name] for o in self.worker.model.outputs)


class WgSentisBackend(Backend):
    """ONNX backend over wgsentis workers; device "CPU" is the numpy backend, "GPU" (or "GPU-COMPUTE")
    gpu-compute, "GPU-PIXEL" gpu-pixel."""

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> WgSentisRep:
        backend = kwargs.pop("backend", _DEVICES.get(device.split(":")[0].upper(), BackendType.CPU))
        wg_model = import_model(model, name=model.graph.name or "model", base_dir=kwargs.pop("base_dir", None))
        return WgSentisRep(Worker(wg_model, backend, threads=kwargs.pop("threads", None)))

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU", outputs_info: Any = None,
                 **kwargs: Any) -> tuple[Any, ...]:
        raise WgSentisError("run_node is not supported: wgsentis runs whole models (use run_model)")

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.split(":")[0].upper() in _DEVICES


prepare = WgSentisBackend.prepare
run_model = WgSentisBackend.run_model
supports_device = WgSentisBackend.supports_device
