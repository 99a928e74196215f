"""The leaf layer `rtsoa.abi`: each status, dtype and error class defined once, statuses usable
inside jitted code, `describe` covering every code, the typed views over raw bytes."""

import ast
import importlib
import inspect
import pathlib
import subprocess
import sys

import numba
import numpy as np
import pytest

import rtsoa
from rtsoa import errors
from rtsoa.abi import dtypes, operands, status
from rtsoa.abi.status import (
    RESERVED_STATUS_BASE,
    STATUS_NOTIFY_BASE,
    STATUS_RANGES,
    DeviceStatus,
    ModelStatus,
    OpStatus,
    RuntimeStatus,
    describe,
)
from rtsoa.abi.views import array_over, itemsize, move_elements

PACKAGE = pathlib.Path(rtsoa.__file__).parent
BOUNDS = {
    DeviceStatus: (101, 199),
    OpStatus: (2001, 2099),
    ModelStatus: (2101, 2199),
    RuntimeStatus: (RESERVED_STATUS_BASE, STATUS_NOTIFY_BASE),
}


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__main__":
            continue
        yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


@pytest.mark.parametrize("enum_class", STATUS_RANGES)
def test_each_status_range_stays_in_its_bounds_and_every_code_is_described(enum_class):
    low, high = BOUNDS[enum_class]
    for member in enum_class:
        assert low <= member <= high, member
        if member is not RuntimeStatus.NOTIFY_BASE:  # notify(0): a request, not a status
            assert status.status_member(int(member)) is member
            assert describe(member), member


def test_the_ranges_do_not_overlap():
    codes = [int(member) for enum_class in STATUS_RANGES for member in enum_class]
    assert len(codes) == len(set(codes))


def test_describe_reads_like_the_error_messages():
    assert describe(0) == "ok"
    assert describe(DeviceStatus.OUT_OF_MEMORY) == "device: OUT_OF_MEMORY"
    assert describe(OpStatus.BAD_SHAPE) == "op: incompatible input shapes"
    missing = "op node: the graph's op table has no entry for its op"
    assert describe(ModelStatus.NO_OP_LIBRARY) == missing
    assert describe(STATUS_NOTIFY_BASE + 3) == "notify successor 3"
    assert "no progress" in describe(RuntimeStatus.NO_PROGRESS)  # the reserved code once missed
    assert describe(7) is None  # a user kernel's own code: rtsoa cannot say what it means
    error = errors.KernelError(int(RuntimeStatus.NO_PROGRESS), 4, "FreeMemory", -1, 9)
    assert describe(RuntimeStatus.NO_PROGRESS) in str(error)
    assert str(errors.DeviceError(DeviceStatus.INVALID_BLOCK, "x")) == "INVALID_BLOCK: x"


def test_the_int_names_are_the_enum_members():
    for enum_class, prefix in (
        (DeviceStatus, "STATUS_"),
        (OpStatus, "STATUS_OP_"),
        (ModelStatus, "STATUS_"),
        (RuntimeStatus, "STATUS_"),
    ):
        for member in enum_class:
            value = getattr(status, prefix + member.name)
            assert type(value) is int and value == member


def test_statuses_are_constants_inside_jitted_code():
    @numba.njit
    def classify(code):
        if code == DeviceStatus.OUT_OF_MEMORY:
            return np.int32(DeviceStatus.OUT_OF_MEMORY)
        if code >= RuntimeStatus.NOTIFY_BASE:
            return np.int32(code - RuntimeStatus.NOTIFY_BASE)
        return np.int32(OpStatus.BAD_SHAPE)

    assert classify(101) == 101
    assert classify(STATUS_NOTIFY_BASE + 5) == 5
    assert classify(0) == int(OpStatus.BAD_SHAPE)


def test_no_status_code_is_defined_outside_the_abi():
    found = []
    for module, path in _modules():
        if module.startswith("rtsoa.abi"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id.startswith("STATUS_"):
                        found.append(f"{module}:{node.lineno}: {target.id}")
    assert not found, "status codes belong in rtsoa.abi.status:\n" + "\n".join(found)


def test_every_exception_class_is_defined_in_rtsoa_errors():
    found = []
    for module, _ in _modules():
        for name, value in vars(importlib.import_module(module)).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__.startswith("rtsoa")
                and value.__module__ != "rtsoa.errors"
            ):
                found.append(f"{value.__module__}.{name}")
    assert not found, "exception classes belong in rtsoa.errors: " + ", ".join(sorted(set(found)))


def test_the_dtype_table_agrees_with_numpy_and_onnx():
    onnx = pytest.importorskip("onnx")
    for code, info in dtypes.DTYPES.items():
        assert np.dtype(info.numpy).itemsize == info.itemsize == dtypes.ITEMSIZE[code]
        assert onnx.helper.tensor_dtype_to_np_dtype(info.onnx) == np.dtype(info.numpy)
        assert np.dtype(info.numpy).name == info.name
        assert dtypes.dtype_code(info.numpy) == code and dtypes.numpy_dtype(code) == info.numpy
    assert set(dtypes.DTYPES) == set(dtypes.DType) - {dtypes.DType.UNDEFINED}
    assert dtypes.ITEMSIZE[dtypes.DType.UNDEFINED] == 0
    assert dtypes.DTYPE_OF_ONNX[onnx.TensorProto.FLOAT16] == dtypes.DType.FLOAT16


def test_cast_refuses_only_what_the_table_has_and_it_cannot_convert():
    from rtsoa.ops.cast import CASTABLE, encode_cast

    assert set(dtypes.DTYPES) - CASTABLE == {dtypes.DType.UINT64}
    for code, info in dtypes.DTYPES.items():
        expected = int(code) if code in CASTABLE else -1
        assert encode_cast({"to": info.onnx}, []) == [expected, 1, 0]  # round_mode "up"
    to_e8m0 = dtypes.DTYPES[dtypes.DType.FLOAT8E8M0].onnx
    assert encode_cast({"to": to_e8m0, "round_mode": "nearest"}, [])[2] == 2
    assert encode_cast({"to": to_e8m0, "round_mode": b"down"}, [])[2] == 1
    assert encode_cast({"to": to_e8m0, "round_mode": "sideways"}, [])[2] == -1  # infer refuses


def test_the_operand_layout_fits_the_worker_tables():
    from rtsoa.kernels.abi import new_worker

    worker = new_worker()
    assert worker.table.shape == (operands.OPERAND_ROWS, operands.ROW_WIDTH)
    assert operands.ROW_WIDTH == operands.COL_DIMS + operands.MAX_RANK
    assert operands.SHAPE_WIDTH == operands.SHAPE_DIMS + operands.MAX_RANK
    assert operands.MAX_OP_OPERANDS < operands.MAX_OPERANDS == operands.RESULT_ROW


@numba.njit
def _write_through_view(buffer, offset, keep):
    view = array_over(buffer, offset, keep, (2, 3), np.float32)
    for i in range(view.shape[0]):
        for j in range(view.shape[1]):
            view[i, j] = 10 * i + j
    return view.shape, view.strides, view.size, itemsize(np.float64)


def test_a_view_writes_the_bytes_numpy_reads():
    buffer = np.zeros(64, dtype=np.uint8)
    shape, strides, size, float64_size = _write_through_view(buffer, 8, np.int64(1))
    assert (shape, strides, size, float64_size) == ((2, 3), (12, 4), 6, 8)
    expected = np.array([[0, 1, 2], [10, 11, 12]], dtype=np.float32)
    np.testing.assert_array_equal(buffer[8:32].view(np.float32).reshape(2, 3), expected)
    assert not buffer[:8].any() and not buffer[32:].any()


def test_a_view_with_keep_zero_is_empty_and_writes_nothing():
    buffer = np.zeros(64, dtype=np.uint8)
    shape, _, size, _ = _write_through_view(buffer, 8, np.int64(0))
    assert shape == (0, 0) and size == 0
    assert not buffer.any()


@numba.njit
def _move(dst, d, src, s, n):
    move_elements(dst, d, src, s, n)


@pytest.mark.parametrize("kind", [np.uint8, np.float32, np.int64])
def test_move_elements_is_a_slice_assignment_that_may_overlap(kind):
    source = np.arange(1, 17).astype(kind)
    for d, s, n in [(0, 0, 16), (3, 5, 7), (2, 0, 9), (0, 2, 9), (4, 4, 0), (4, 4, -3)]:
        target = np.zeros(16, dtype=kind)
        expected = target.copy()
        expected[d : d + max(n, 0)] = source[s : s + max(n, 0)]
        _move(target, d, source, s, n)
        np.testing.assert_array_equal(target, expected)
        inplace, expected = source.copy(), source.copy()
        expected[d : d + max(n, 0)] = source[s : s + max(n, 0)].copy()
        _move(inplace, d, inplace, s, n)  # overlapping: the bytes as they were before
        np.testing.assert_array_equal(inplace, expected)


def test_move_elements_refuses_mixed_types_and_read_only_targets():
    with pytest.raises(numba.TypingError):
        _move(np.zeros(4, np.float32), 0, np.zeros(4, np.float64), 0, 4)
    read_only = np.zeros(4, np.float32)
    read_only.flags.writeable = False
    with pytest.raises(numba.TypingError):
        _move(read_only, 0, np.zeros(4, np.float32), 0, 4)


def test_starting_rtsoa_does_not_import_ml_dtypes():
    """`ml_dtypes` costs over half a second to import: rtsoa imports it when a narrow type is
    first used, and finds arrays of its types once something else has imported it."""
    code = """
import sys
import numpy as np
import rtsoa, rtsoa.cli, rtsoa.ops, rtsoa.runtime
from rtsoa.abi.dtypes import DTYPE_OF_NUMPY, NUMPY_DTYPES, DType, dtype_code
from rtsoa.runtime.checks import numpy_dtype
assert dtype_code(np.float32) == DType.FLOAT32 and numpy_dtype(DType.INT8) == np.int8
assert DType.BFLOAT16 in NUMPY_DTYPES and np.dtype(np.complex64) not in DTYPE_OF_NUMPY
assert "ml_dtypes" not in sys.modules, "imported at start"
import ml_dtypes
assert dtype_code(ml_dtypes.bfloat16) == DType.BFLOAT16
assert DTYPE_OF_NUMPY[np.dtype(ml_dtypes.int4)] == DType.INT4
assert NUMPY_DTYPES[DType.FLOAT8E5M2] is ml_dtypes.float8_e5m2
assert len(dict(DTYPE_OF_NUMPY)) == len(NUMPY_DTYPES) == len(DType) - 1
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
