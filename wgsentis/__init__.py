"""wgsentis: run ONNX models on the CPU (numpy) and on any GPU through wgpu; profile and capture them."""

from wgsentis import errors, ops, renderdoc  # noqa: F401  (ops registers every kernel)
from wgsentis.backends.gpu.device import AdapterInfo, adapters
from wgsentis.model import Layer, Model, TensorInfo
from wgsentis.onnx_import import load_model
from wgsentis.ops.kernel_options import KernelOptions
from wgsentis.profiler import LossProfile, Profile, loss_profile, profile
from wgsentis.profiler.prune_model import prune as prune  # re-exported: ws.prune
from wgsentis.tensor import Tensor
from wgsentis.worker import BackendType, Worker

__version__ = "0.1.0"
__all__ = ["AdapterInfo", "BackendType", "KernelOptions", "Layer", "LossProfile", "Model", "Profile", "Tensor",
           "TensorInfo", "Worker", "adapters", "errors", "load_model", "loss_profile", "profile", "renderdoc"]
