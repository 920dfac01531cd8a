"""onnxruntime's error classes for ``wgsentis.ort`` (those of ``onnxruntime.capi.onnxruntime_pybind11_state``), each
also the matching wgsentis typed error, and the translation of wgsentis's errors into them: a client may catch
either ``InvalidArgument`` or ``InputError``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from wgsentis import errors as ws_errors


class OrtStatus:
    """Mixin that prefixes a message as ONNX Runtime's status does (clients match on it)."""

    code = 1
    status = "FAIL"

    @classmethod
    def make(cls, message: str) -> Any:
        return cls(f"[ONNXRuntimeError] : {cls.code} : {cls.status} : {message}")


class Fail(OrtStatus, ws_errors.WgSentisError):  # onnxruntime's names, as its clients catch them
    code, status = 1, "FAIL"


class InvalidArgument(OrtStatus, ws_errors.InputError):
    code, status = 2, "INVALID_ARGUMENT"


class NoSuchFile(OrtStatus, ws_errors.ModelLoadError):
    code, status = 3, "NO_SUCHFILE"


class NoModel(OrtStatus, ws_errors.ModelLoadError):
    code, status = 4, "NO_MODEL"


class EngineError(OrtStatus, ws_errors.WgSentisError):
    code, status = 5, "ENGINE_ERROR"


class RuntimeException(OrtStatus, ws_errors.LayerError):
    code, status = 6, "RUNTIME_EXCEPTION"

    def __init__(self, message: str, layer: str = "", op_type: str = "") -> None:
        # A plain message, as ONNX Runtime's; ``layer``/``op_type`` copied from the wgsentis error when there is one.
        self.layer, self.op_type = layer, op_type
        Exception.__init__(self, message)


class InvalidProtobuf(OrtStatus, ws_errors.ModelLoadError):
    code, status = 7, "INVALID_PROTOBUF"


class ModelLoaded(OrtStatus, ws_errors.WgSentisError):
    code, status = 8, "MODEL_LOADED"


class NotImplemented(OrtStatus, ws_errors.ModelLoadError):
    code, status = 9, "NOT_IMPLEMENTED"


class InvalidGraph(OrtStatus, ws_errors.ModelLoadError):
    code, status = 10, "INVALID_GRAPH"


class EPFail(OrtStatus, ws_errors.DeviceError):
    code, status = 11, "EP_FAIL"


class ModelLoadCanceled(OrtStatus, ws_errors.ModelLoadError):
    code, status = 12, "MODEL_LOAD_CANCELED"


class ModelRequiresCompilation(OrtStatus, ws_errors.ModelLoadError):
    code, status = 13, "MODEL_REQUIRES_COMPILATION"


class NotFound(OrtStatus, ws_errors.WgSentisError):
    code, status = 14, "NOT_FOUND"


class DeviceReset(OrtStatus, ws_errors.DeviceError):
    code, status = 15, "DEVICE_RESET"


class RunTerminated(Fail, ws_errors.RunCancelledError):
    """A run stopped by ``RunOptions.terminate``: ONNX Runtime's Fail, and wgsentis's RunCancelledError."""


class InvalidIndexArgument(InvalidArgument, ws_errors.IndexOutOfRangeError):
    """A data-driven index out of range: ONNX Runtime's InvalidArgument, and wgsentis's IndexOutOfRangeError."""

    def __init__(self, message: str, source: ws_errors.IndexOutOfRangeError | None = None) -> None:
        self.layer, self.op_type = (source.layer, source.op_type) if source else ("", "")
        self.index, self.bound, self.what = (source.index, source.bound, source.what) if source else (0, 0, "")
        Exception.__init__(self, message)


class MissingInputs(ValueError, ws_errors.InputError):  # noqa: N818
    """Required inputs absent from the feed: ONNX Runtime raises a plain ValueError for this, before running."""


ERROR_CLASSES = (Fail, InvalidArgument, NoSuchFile, NoModel, EngineError, RuntimeException, InvalidProtobuf,
                 ModelLoaded, NotImplemented, InvalidGraph, EPFail, ModelLoadCanceled, ModelRequiresCompilation,
                 NotFound, DeviceReset)


def translate(exc: BaseException) -> BaseException:
    """The ONNX Runtime error for a wgsentis error (the original kept as ``__cause__`` by the caller)."""
    if isinstance(exc, OrtStatus):
        return exc
    message = str(exc)
    if isinstance(exc, ws_errors.RunCancelledError):
        return RunTerminated(f"[ONNXRuntimeError] : 1 : FAIL : Exiting due to terminate flag being set to true. "
                             f"({message})", exc.layer, exc.op_type)
    if isinstance(exc, ws_errors.IndexOutOfRangeError):
        return InvalidIndexArgument(f"[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : {message}", exc)
    if isinstance(exc, ws_errors.UnsupportedOperatorError):
        return NotImplemented.make(message)
    if isinstance(exc, ws_errors.ModelLoadError):
        return InvalidGraph.make(message)
    if isinstance(exc, ws_errors.InputError):
        return InvalidArgument.make(message)
    if isinstance(exc, ws_errors.LayerError | ws_errors.ResourceLimitError):
        out = RuntimeException.make(message)
        out.layer, out.op_type = getattr(exc, "layer", ""), getattr(exc, "op_type", "")
        return out
    if isinstance(exc, ws_errors.DeviceError):
        return EPFail.make(message)
    if isinstance(exc, ws_errors.WgSentisError):
        return Fail.make(message)
    return exc


@contextlib.contextmanager
def ort_errors() -> Iterator[None]:
    try:
        yield
    except ws_errors.WgSentisError as exc:
        translated = translate(exc)
        if translated is exc:
            raise
        raise translated from exc


__all__ = [
    "ERROR_CLASSES", "DeviceReset", "EPFail", "EngineError", "Fail", "InvalidArgument", "InvalidGraph",
    "InvalidIndexArgument", "InvalidProtobuf", "MissingInputs", "ModelLoadCanceled", "ModelLoaded",
    "ModelRequiresCompilation", "NoModel", "NoSuchFile", "NotFound", "NotImplemented", "OrtStatus",
    "RunTerminated", "RuntimeException", "ort_errors", "translate",
]
