"""Typed errors of wgsentis: every failure a user can cause names what is at fault."""

from __future__ import annotations


class WgSentisError(Exception):
    """Base class of every error wgsentis raises on purpose."""


class ModelLoadError(WgSentisError):
    """The model file or protobuf could not be read, or is malformed."""


class UnsupportedOperatorError(ModelLoadError):
    """An operator has no implementation for the model's domain and opset."""

    def __init__(self, op_type: str, domain: str, opset: int, node: str, detail: str = "") -> None:
        self.op_type, self.domain, self.opset, self.node = op_type, domain, opset, node
        where = f"domain '{domain or 'ai.onnx'}', opset {opset}"
        msg = f"operator {op_type} ({where}) used by node '{node}' is not supported"
        super().__init__(msg + (f": {detail}" if detail else ""))


class ExternalDataError(ModelLoadError):
    """An external-data reference is unsafe (outside the model folder) or inconsistent."""


class InputError(WgSentisError):
    """Inputs given to a worker do not match the model (name, shape or dtype)."""


class LayerError(WgSentisError):
    """A layer failed while running; names the layer, op and what went wrong."""

    def __init__(self, layer: str, op_type: str, detail: str) -> None:
        self.layer, self.op_type = layer, op_type
        super().__init__(f"layer '{layer}' ({op_type}): {detail}")


class DeviceError(WgSentisError):
    """A backend's device is missing, lacks a needed feature, or failed."""


class BackendNotAvailableError(DeviceError):
    """The requested backend exists by name but cannot be used in this build or on this machine."""


class TensorError(WgSentisError):
    """A tensor was used in a way its state does not allow (e.g. read after being consumed)."""


class RenderDocError(DeviceError):
    """RenderDoc is missing, was loaded too late to hook Vulkan, or a capture could not be made or written."""
