"""The one table of tensor element types: code, numpy type, ONNX code, item size, name.

`DType` codes are stable across graph format versions (they are stored in graph files).
Everything else rtsoa knows about an element type is derived from `DTYPES`: the item sizes
jitted code indexes by code (`ITEMSIZE`), the numpy types, the ONNX `TensorProto` codes.
"""

import enum
from typing import NamedTuple

import numpy as np


class DType(enum.IntEnum):
    """Element types of tensors (codes are stable across format versions)."""

    UNDEFINED = 0
    FLOAT32 = 1
    FLOAT64 = 2
    FLOAT16 = 3
    INT8 = 4
    INT16 = 5
    INT32 = 6
    INT64 = 7
    UINT8 = 8
    BOOL = 9
    UINT16 = 10
    UINT32 = 11
    UINT64 = 12


class DTypeInfo(NamedTuple):
    """One row of the dtype table."""

    dtype: DType
    numpy: type  # the numpy scalar type
    onnx: int  # ONNX TensorProto.DataType code
    itemsize: int  # bytes per element
    name: str  # the ONNX / numpy-style name users see


DTYPES = {
    row.dtype: row
    for row in (
        DTypeInfo(DType.FLOAT32, np.float32, 1, 4, "float32"),
        DTypeInfo(DType.FLOAT64, np.float64, 11, 8, "float64"),
        DTypeInfo(DType.FLOAT16, np.float16, 10, 2, "float16"),
        DTypeInfo(DType.INT8, np.int8, 3, 1, "int8"),
        DTypeInfo(DType.INT16, np.int16, 5, 2, "int16"),
        DTypeInfo(DType.INT32, np.int32, 6, 4, "int32"),
        DTypeInfo(DType.INT64, np.int64, 7, 8, "int64"),
        DTypeInfo(DType.UINT8, np.uint8, 2, 1, "uint8"),
        DTypeInfo(DType.BOOL, np.bool_, 9, 1, "bool"),
        DTypeInfo(DType.UINT16, np.uint16, 4, 2, "uint16"),
        DTypeInfo(DType.UINT32, np.uint32, 12, 4, "uint32"),
        DTypeInfo(DType.UINT64, np.uint64, 13, 8, "uint64"),
    )
}

# Bytes per element by DType code, for jitted code (0 for UNDEFINED).
ITEMSIZE = np.zeros(len(DType), dtype=np.int64)
for _info in DTYPES.values():
    ITEMSIZE[_info.dtype] = _info.itemsize

# Bytes of each code's element if it is an integer or bool (0 otherwise), and whether it is a
# signed integer: what a condition or trip count tensor may hold.
INTEGER_BYTES = np.zeros(len(DType), dtype=np.int64)
INTEGER_SIGNED = np.zeros(len(DType), dtype=np.int64)
for _info in DTYPES.values():
    if np.dtype(_info.numpy).kind in "iub":
        INTEGER_BYTES[_info.dtype] = _info.itemsize
        INTEGER_SIGNED[_info.dtype] = np.dtype(_info.numpy).kind == "i"

NUMPY_DTYPES = {info.dtype: info.numpy for info in DTYPES.values()}
DTYPE_OF_NUMPY = {np.dtype(info.numpy): info.dtype for info in DTYPES.values()}
DTYPE_OF_ONNX = {info.onnx: info.dtype for info in DTYPES.values()}
DTYPE_OF_NAME = {info.name: info.dtype for info in DTYPES.values()}


def dtype_code(numpy_dtype):
    """The DType code of a numpy dtype (KeyError if rtsoa has none)."""
    return DTYPE_OF_NUMPY[np.dtype(numpy_dtype)]


def numpy_dtype(code):
    """The numpy dtype of DType `code` (KeyError if it has none: UNDEFINED, unknown codes)."""
    return np.dtype(NUMPY_DTYPES[DType(code)])
