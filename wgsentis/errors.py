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


class IndexOutOfRangeError(LayerError):
    """A data-driven index (Gather, Scatter, OneHot, ...) lies outside the axis it indexes, on any backend.

    ``index`` is the offending value as given, ``bound`` the size of the axis it indexes (valid indices
    are ``-bound .. bound-1``, or ``0 .. bound-1`` where the op takes no negative index:
    ``negative_ok=False``); ``what`` names the input or attribute that carried it."""

    def __init__(self, layer: str, op_type: str, index: int, bound: int, what: str = "indices",
                 negative_ok: bool = True) -> None:
        self.index, self.bound, self.what = int(index), int(bound), what
        lowest = -self.bound if negative_ok else 0
        super().__init__(layer, op_type,
                         f"{what} value {self.index} is out of range for an axis of size {self.bound} "
                         f"(valid: {lowest}..{self.bound - 1})")


class ResourceLimitError(WgSentisError):
    """A layer asked for more memory than the worker's ``memory_limit`` allows; nothing was allocated.

    Names the layer, its op, the shape and the bytes asked for (``nbytes``: the layer's own), and the limit;
    ``total``, where the refusal is of the device memory a GPU plan holds, is that memory with the layer's
    allocation included (None otherwise)."""

    def __init__(self, layer: str, op_type: str, shape: tuple[int, ...] | None, nbytes: int, limit: int,
                 detail: str = "", total: int | None = None) -> None:
        self.layer, self.op_type, self.shape, self.nbytes, self.limit = layer, op_type, shape, int(nbytes), int(limit)
        self.total = None if total is None else int(total)
        shape_text = "" if shape is None else f" of shape {list(shape)}"
        if not op_type and self.total is not None:  # not a layer's allocation: a replay's whole plan
            msg = (f"{layer}: its {self.nbytes:,} bytes bring the device memory to {self.total:,} bytes, over the "
                   f"worker's memory_limit of {self.limit:,} bytes")
        elif self.total is None:
            msg = (f"layer '{layer}' ({op_type}): output{shape_text} needs {self.nbytes:,} bytes, over the worker's "
                   f"memory_limit of {self.limit:,} bytes")
        else:
            msg = (f"layer '{layer}' ({op_type}): output{shape_text} needs {self.nbytes:,} bytes, which brings the "
                   f"device memory of the plan to {self.total:,} bytes, over the worker's memory_limit of "
                   f"{self.limit:,} bytes")
        super().__init__(msg + (f" ({detail})" if detail else "") + "; raise memory_limit or pass None to lift it")


class RunInterruptedError(WgSentisError):
    """A run stopped before it finished; ``layer`` names the layer that was running (None: before the first)."""

    def __init__(self, message: str, layer: str | None = None, op_type: str | None = None) -> None:
        self.layer, self.op_type = layer, op_type
        self.enclosing: list[str] = []  # the control-flow layers around ``layer``, innermost first
        super().__init__(message)

    def inside(self, layer: str, op_type: str) -> None:
        """Record that the interrupted layer ran inside the subgraph of ``layer`` (a Loop, Scan or If)."""
        self.enclosing.append(f"'{layer}' ({op_type})")
        self.args = (f"{self.args[0]} inside {self.enclosing[-1]}",)


class RunTimeoutError(RunInterruptedError):
    """A run took longer than its ``timeout``."""


class RunCancelledError(RunInterruptedError):
    """A run was stopped by ``Worker.cancel()``."""


class DeviceOutOfMemoryError(DeviceError):
    """The GPU could not allocate a buffer or texture; names what was being allocated and its size.

    ``what`` names the tensor, layer or buffer, ``nbytes`` the size asked for, ``reason`` the device's word."""

    def __init__(self, what: str, nbytes: int, reason: str = "") -> None:
        self.what, self.nbytes, self.reason = what, int(nbytes), reason
        super().__init__(f"the GPU could not allocate {what}: {self.nbytes:,} bytes"
                         + (f" ({reason})" if reason else ""))


class PruneError(WgSentisError):
    """``ws.prune`` produced a model that fails the ONNX checker (a bug in the pruner: nothing was written)."""


# Errors a layer's wrapper passes on unchanged rather than wrapping in a LayerError: they already name
# the layer (or the run) they concern, and their type is what a caller catches.
PASS_THROUGH_ERRORS = (LayerError, ResourceLimitError, RunInterruptedError, DeviceOutOfMemoryError)


class SymbolicDimensionWarning(UserWarning):
    """Inputs that share a symbolic dimension name were given different sizes for it. As in ONNX Runtime this is
    not an error (a name is not a constraint across inputs); the layers that combine them check their shapes."""
