"""Mapping between ONNX element types and numpy dtypes (ml_dtypes for the narrow float and int types)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from onnx import TensorProto

ONNX_TO_NUMPY: dict[int, np.dtype] = {
    TensorProto.FLOAT: np.dtype(np.float32),
    TensorProto.UINT8: np.dtype(np.uint8),
    TensorProto.INT8: np.dtype(np.int8),
    TensorProto.UINT16: np.dtype(np.uint16),
    TensorProto.INT16: np.dtype(np.int16),
    TensorProto.INT32: np.dtype(np.int32),
    TensorProto.INT64: np.dtype(np.int64),
    TensorProto.STRING: np.dtype(object),
    TensorProto.BOOL: np.dtype(np.bool_),
    TensorProto.FLOAT16: np.dtype(np.float16),
    TensorProto.DOUBLE: np.dtype(np.float64),
    TensorProto.UINT32: np.dtype(np.uint32),
    TensorProto.UINT64: np.dtype(np.uint64),
    TensorProto.COMPLEX64: np.dtype(np.complex64),
    TensorProto.COMPLEX128: np.dtype(np.complex128),
}

# Narrow types that numpy lacks: ml_dtypes supplies them, under the names onnx uses too.
_NARROW = {
    "BFLOAT16": "bfloat16",
    "FLOAT8E4M3FN": "float8_e4m3fn",
    "FLOAT8E4M3FNUZ": "float8_e4m3fnuz",
    "FLOAT8E5M2": "float8_e5m2",
    "FLOAT8E5M2FNUZ": "float8_e5m2fnuz",
    "UINT4": "uint4",
    "INT4": "int4",
    "FLOAT4E2M1": "float4_e2m1fn",
    "FLOAT8E8M0": "float8_e8m0fnu",
    "UINT2": "uint2",
    "INT2": "int2",
    "FLOAT6E2M3": "float6_e2m3fn",
    "FLOAT6E3M2": "float6_e3m2fn",
}
for _onnx_name, _ml_name in _NARROW.items():
    if hasattr(TensorProto, _onnx_name) and hasattr(ml_dtypes, _ml_name):
        ONNX_TO_NUMPY[getattr(TensorProto, _onnx_name)] = np.dtype(getattr(ml_dtypes, _ml_name))

# Element types stored packed, several per byte: their byte size is not itemsize * count.
PACKED_TYPES = frozenset(
    getattr(TensorProto, n) for n in ("UINT4", "INT4", "FLOAT4E2M1", "UINT2", "INT2", "FLOAT6E2M3", "FLOAT6E3M2")
    if hasattr(TensorProto, n)
)

NUMPY_TO_ONNX: dict[np.dtype, int] = {v: k for k, v in ONNX_TO_NUMPY.items()}


def to_numpy_dtype(elem_type: int) -> np.dtype:
    """Return the numpy dtype of an ONNX element type; raises KeyError when unknown."""
    return ONNX_TO_NUMPY[elem_type]


def onnx_type_name(elem_type: int) -> str:
    """Return the ONNX spelling of an element type, e.g. 'FLOAT'."""
    return TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() else str(elem_type)


def is_float(dtype: np.dtype) -> bool:
    """True for every floating dtype, numpy's and ml_dtypes' narrow floats alike."""
    return dtype.kind == "f" or (dtype.kind == "V" and "float" in dtype.name) or dtype.name.startswith(
        ("bfloat", "float")
    )
