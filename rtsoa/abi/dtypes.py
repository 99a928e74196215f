"""The one table of tensor element types: code, numpy type, ONNX code, item size, name.

`DType` codes are stable across graph format versions (they are stored in graph files).
Everything else rtsoa knows about an element type is derived from `DTYPES`: the item sizes
jitted code indexes by code (`ITEMSIZE`), the numpy types, the ONNX `TensorProto` codes.

The narrow types numpy lacks (bfloat16, the float8 and float4 formats, the 4- and 2-bit
integers) are `ml_dtypes`' numpy types, as `onnx.numpy_helper` reads them: one element a byte
(two for bfloat16) in memory, the 4- and 2-bit integers in the byte's low bits. ONNX packs the
4- and 2-bit types two / four to a byte in its files; `onnx.numpy_helper` packs and unpacks
them at the model boundary.

`ml_dtypes` is imported on first use of one of those types (`DTypeInfo.numpy`), not with
rtsoa: its import costs more than half a second, and most runs never see a narrow type. An
array of one cannot exist before `ml_dtypes` is imported, so `DTYPE_OF_NUMPY` finds them
without importing it.
"""

import enum
import importlib
import sys
from collections.abc import Mapping
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
    BFLOAT16 = 13
    FLOAT8E4M3FN = 14
    FLOAT8E4M3FNUZ = 15
    FLOAT8E5M2 = 16
    FLOAT8E5M2FNUZ = 17
    UINT4 = 18
    INT4 = 19
    FLOAT4E2M1 = 20
    UINT2 = 21
    INT2 = 22
    FLOAT8E8M0 = 23


class DTypeInfo(NamedTuple):
    """One row of the dtype table."""

    dtype: DType
    scalar: str  # where the numpy scalar type is: "numpy.float32", "ml_dtypes.bfloat16"
    onnx: int  # ONNX TensorProto.DataType code
    itemsize: int  # bytes per element
    name: str  # the ONNX / numpy-style name users see

    @property
    def numpy(self):
        """The numpy scalar type (`ml_dtypes`' for the narrow types: imported here, once)."""
        module, _, name = self.scalar.rpartition(".")
        return getattr(importlib.import_module(module), name)

    @property
    def narrow(self):
        """Is it one of `ml_dtypes`' types (numpy has no such type)?"""
        return self.scalar.startswith("ml_dtypes.")


DTYPES = {
    row.dtype: row
    for row in (
        DTypeInfo(DType.FLOAT32, "numpy.float32", 1, 4, "float32"),
        DTypeInfo(DType.FLOAT64, "numpy.float64", 11, 8, "float64"),
        DTypeInfo(DType.FLOAT16, "numpy.float16", 10, 2, "float16"),
        DTypeInfo(DType.INT8, "numpy.int8", 3, 1, "int8"),
        DTypeInfo(DType.INT16, "numpy.int16", 5, 2, "int16"),
        DTypeInfo(DType.INT32, "numpy.int32", 6, 4, "int32"),
        DTypeInfo(DType.INT64, "numpy.int64", 7, 8, "int64"),
        DTypeInfo(DType.UINT8, "numpy.uint8", 2, 1, "uint8"),
        DTypeInfo(DType.BOOL, "numpy.bool_", 9, 1, "bool"),
        DTypeInfo(DType.UINT16, "numpy.uint16", 4, 2, "uint16"),
        DTypeInfo(DType.UINT32, "numpy.uint32", 12, 4, "uint32"),
        DTypeInfo(DType.UINT64, "numpy.uint64", 13, 8, "uint64"),
        DTypeInfo(DType.BFLOAT16, "ml_dtypes.bfloat16", 16, 2, "bfloat16"),
        DTypeInfo(DType.FLOAT8E4M3FN, "ml_dtypes.float8_e4m3fn", 17, 1, "float8_e4m3fn"),
        DTypeInfo(DType.FLOAT8E4M3FNUZ, "ml_dtypes.float8_e4m3fnuz", 18, 1, "float8_e4m3fnuz"),
        DTypeInfo(DType.FLOAT8E5M2, "ml_dtypes.float8_e5m2", 19, 1, "float8_e5m2"),
        DTypeInfo(DType.FLOAT8E5M2FNUZ, "ml_dtypes.float8_e5m2fnuz", 20, 1, "float8_e5m2fnuz"),
        DTypeInfo(DType.UINT4, "ml_dtypes.uint4", 21, 1, "uint4"),
        DTypeInfo(DType.INT4, "ml_dtypes.int4", 22, 1, "int4"),
        DTypeInfo(DType.FLOAT4E2M1, "ml_dtypes.float4_e2m1fn", 23, 1, "float4_e2m1fn"),
        DTypeInfo(DType.UINT2, "ml_dtypes.uint2", 25, 1, "uint2"),
        DTypeInfo(DType.INT2, "ml_dtypes.int2", 26, 1, "int2"),
        DTypeInfo(DType.FLOAT8E8M0, "ml_dtypes.float8_e8m0fnu", 24, 1, "float8_e8m0fnu"),
    )
}

# Bytes per element by DType code, for jitted code (0 for UNDEFINED).
ITEMSIZE = np.zeros(len(DType), dtype=np.int64)
for _info in DTYPES.values():
    ITEMSIZE[_info.dtype] = _info.itemsize

# Bytes of each code's element if it is an integer or bool (0 otherwise), and whether it is a
# signed integer: what a condition or trip count tensor may hold (numpy's own types: the
# 4- and 2-bit integers are no such tensor).
INTEGER_BYTES = np.zeros(len(DType), dtype=np.int64)
INTEGER_SIGNED = np.zeros(len(DType), dtype=np.int64)
for _info in DTYPES.values():
    if not _info.narrow and np.dtype(_info.numpy).kind in "iub":
        INTEGER_BYTES[_info.dtype] = _info.itemsize
        INTEGER_SIGNED[_info.dtype] = np.dtype(_info.numpy).kind == "i"


class _NumpyTypes(Mapping):
    """DType -> numpy scalar type, each resolved when asked for (see `DTypeInfo.numpy`)."""

    def __getitem__(self, code):
        return DTYPES[code].numpy

    def __contains__(self, code):
        return code in DTYPES

    def __iter__(self):
        return iter(DTYPES)

    def __len__(self):
        return len(DTYPES)


class _CodesOfNumpy(Mapping):
    """numpy dtype -> DType; `ml_dtypes`' types join once it is imported (by whoever made an
    array of one), so a lookup never imports it."""

    def __init__(self):
        self._native = {
            np.dtype(info.numpy): info.dtype for info in DTYPES.values() if not info.narrow
        }
        self._all = None

    def _table(self, key):
        if key in self._native or "ml_dtypes" not in sys.modules:
            return self._native
        if self._all is None:
            self._all = {np.dtype(info.numpy): info.dtype for info in DTYPES.values()}
        return self._all

    def __getitem__(self, key):
        return self._table(key)[key]

    def __iter__(self):
        importlib.import_module("ml_dtypes")
        return iter(self._table(None))

    def __len__(self):
        return len(DTYPES)


NUMPY_DTYPES = _NumpyTypes()
DTYPE_OF_NUMPY = _CodesOfNumpy()
DTYPE_OF_ONNX = {info.onnx: info.dtype for info in DTYPES.values()}
DTYPE_OF_NAME = {info.name: info.dtype for info in DTYPES.values()}


def dtype_code(numpy_dtype):
    """The DType code of a numpy dtype (KeyError if rtsoa has none)."""
    return DTYPE_OF_NUMPY[np.dtype(numpy_dtype)]


_NUMPY_OF_CODE = {}  # DType code -> numpy dtype, filled as codes are asked for


def numpy_dtype(code):
    """The numpy dtype of DType `code` (KeyError if it has none: UNDEFINED, unknown codes).
    Memoized: the model API asks it for every input of every run."""
    known = _NUMPY_OF_CODE.get(code) if isinstance(code, int) else None
    if known is not None:
        return known
    try:
        kind = np.dtype(NUMPY_DTYPES[DType(code)])
    except ValueError:  # not a DType code at all
        raise KeyError(f"no element type has code {code!r}") from None
    _NUMPY_OF_CODE[int(code)] = kind
    return kind
