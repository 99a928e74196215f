"""The leaf layer: what every other layer agrees on, importing nothing else of rtsoa.

- `status`: every status code, one IntEnum per range, and `describe(code)`;
- `dtypes`: the one table of element types (code, numpy type, ONNX code, item size, name);
- `operands`: the operand-table and shape-row layouts (MAX_RANK, columns, rows);
- `views`: typed array views over raw bytes for code without reference counting;
- `registry`: `Registry`, the one shape of every name -> entry table rtsoa fills by
  registration (kernels, ops, executors, converters, fusions, job kinds, the compat table).

Exceptions live in `rtsoa.errors`, one module above this one.
"""

from rtsoa.abi.dtypes import DTYPES, DType, dtype_code, numpy_dtype
from rtsoa.abi.operands import MAX_RANK
from rtsoa.abi.status import (
    STATUS_OK,
    DeviceStatus,
    ModelStatus,
    OpStatus,
    RuntimeStatus,
    describe,
)

__all__ = [
    "DTYPES",
    "MAX_RANK",
    "STATUS_OK",
    "DType",
    "DeviceStatus",
    "ModelStatus",
    "OpStatus",
    "RuntimeStatus",
    "describe",
    "dtype_code",
    "numpy_dtype",
]
