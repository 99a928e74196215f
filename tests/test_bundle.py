"""Array bundles passed by reference (`rtsoa._bundle`): what jitted code sees, what it refuses."""

import gc
import pickle
import threading

import numba
import numpy as np
import pytest
from numba import njit
from numba.core import errors as numba_errors
from numba.core.registry import cpu_target

from rtsoa._bundle import BundleType, bundle_class
from rtsoa.device import Device
from rtsoa.kernels.abi import GraphArrays, ValueState, WorkerState

Pair = bundle_class(
    "Pair",
    __name__,
    {
        "counts": (np.int64, 1, True),
        "grid": (np.float64, 2, True),
        "table": (np.int32, 2, False),  # typed read-only
    },
)


def make_pair(rows=3, columns=4):
    return Pair(
        counts=np.arange(5, dtype=np.int64),
        grid=np.arange(rows * columns, dtype=np.float64).reshape(rows, columns),
        table=np.arange(6, dtype=np.int32).reshape(2, 3),
    )


@njit(cache=False)
def total(pair):
    result = 0.0
    for i in range(pair.counts.shape[0]):
        result += pair.counts[i]
    for i in range(pair.grid.shape[0]):
        for j in range(pair.grid.shape[1]):
            result += pair.grid[i, j] * (i + 1)
    for i in range(pair.table.shape[0]):
        for j in range(pair.table.shape[1]):
            result += pair.table[i, j] * 100
    return result


def python_total(pair):
    weights = np.arange(1, pair.grid.shape[0] + 1)[:, None]
    return float(pair.counts.sum() + (pair.grid * weights).sum() + pair.table.sum() * 100)


@njit(cache=False)
def bump(pair, k):
    pair.counts[k] += 7
    pair.grid[pair.grid.shape[0] - 1, pair.grid.shape[1] - 1] = -1.5


@njit(cache=False)
def write_read_only(pair):
    pair.table[0, 0] = 1


@njit(cache=False)
def shapes(pair):
    return pair.grid.shape[0], pair.grid.shape[1], pair.grid.strides[0], pair.table.size


def test_jitted_code_reads_every_field_with_its_shape_and_strides():
    for rows, columns in ((3, 4), (1, 1), (7, 2)):
        pair = make_pair(rows, columns)
        assert total(pair) == python_total(pair)
        assert shapes(pair) == (rows, columns, 8 * columns, 6)


def test_jitted_writes_reach_the_callers_arrays():
    pair = make_pair()
    bump(pair, 2)
    assert pair.counts.tolist() == [0, 1, 9, 3, 4]
    assert pair.grid[-1, -1] == -1.5


def test_a_field_typed_read_only_cannot_be_written_by_jitted_code():
    with pytest.raises(numba_errors.TypingError):
        write_read_only(make_pair())


@pytest.mark.parametrize(
    ("field", "array", "words"),
    [
        ("counts", np.arange(5, dtype=np.int32), "dtype int32, expected int64"),
        ("grid", np.zeros(4), "1 dimensions, expected 2"),
        ("grid", np.asfortranarray(np.zeros((3, 4))), "not C-contiguous"),
        ("grid", np.zeros((3, 8))[:, ::2], "not C-contiguous"),
        ("counts", np.zeros(41, np.uint8)[1:].view(np.int64), "not aligned to its item size"),
        ("counts", [1, 2, 3], "a numpy array expected, got list"),
    ],
)
def test_a_bundle_whose_array_does_not_fit_its_type_is_refused_by_name(field, array, words):
    pair = make_pair()._replace(**{field: array})
    with pytest.raises(TypeError, match=f"Pair.{field}: {words}"):
        total(pair)


def test_a_read_only_array_in_a_written_field_is_refused():
    counts = np.arange(5, dtype=np.int64)
    counts.flags.writeable = False
    with pytest.raises(TypeError, match="Pair.counts: read-only"):
        bump(make_pair()._replace(counts=counts), 0)
    table = np.arange(6, dtype=np.int32).reshape(2, 3)
    table.flags.writeable = False  # a read-only field takes read-only arrays
    pair = make_pair()._replace(table=table)
    assert total(pair) == python_total(pair)


def test_an_ndarray_subclass_fits_its_field(tmp_path):
    grid = np.memmap(tmp_path / "grid", dtype=np.float64, mode="w+", shape=(3, 4))
    grid[:] = np.arange(12).reshape(3, 4)
    pair = make_pair()._replace(grid=grid)
    assert total(pair) == python_total(pair)
    bump(pair, 0)
    grid.flush()
    assert np.fromfile(tmp_path / "grid")[-1] == -1.5


def test_a_bundle_is_immutable_and_replace_builds_a_new_one():
    pair = make_pair()
    with pytest.raises(AttributeError, match="immutable"):
        pair.counts = np.zeros(5, dtype=np.int64)
    other = pair._replace(counts=np.full(5, 10, dtype=np.int64))
    assert pair.counts.tolist() == [0, 1, 2, 3, 4]
    assert total(other) == python_total(other) != total(pair)
    assert list(pair) == [pair.counts, pair.grid, pair.table]
    assert len(pair) == 3 and pair._fields == ("counts", "grid", "table")
    with pytest.raises(TypeError, match="missing fields \\['table'\\]"):
        Pair(counts=pair.counts, grid=pair.grid)


def test_a_pickled_bundle_comes_back_usable():
    pair = make_pair()
    copy = pickle.loads(pickle.dumps(pair))
    assert type(copy) is Pair
    assert total(copy) == total(pair)
    bump(copy, 0)
    assert copy.counts[0] == 7 and pair.counts[0] == 0


def test_the_bundle_keeps_its_arrays_alive():
    pair = make_pair()
    expected = python_total(pair)
    pair = Pair(**{field: getattr(pair, field).copy() for field in pair._fields})
    gc.collect()
    for _ in range(3):
        assert total(pair) == expected


def test_threads_read_one_bundle_at_once():
    pair = make_pair(64, 64)
    expected = python_total(pair)
    results = []

    def work():
        results.extend(total(pair) for _ in range(200))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [expected] * 800


@pytest.mark.parametrize("bundle", ["device", "graph", "values", "worker"])
def test_rtsoas_bundles_reach_jitted_code_as_one_pointer(bundle):
    """The point of a bundle: one pointer argument, whatever its number of arrays."""
    classes = {"graph": GraphArrays, "values": ValueState, "worker": WorkerState}
    numba_type = (
        numba.typeof(Device(hbm_bytes=1 << 16).state)
        if bundle == "device"
        else classes[bundle].numba_type
    )
    assert isinstance(numba_type, BundleType)
    model = cpu_target.target_context.data_model_manager[numba_type]
    assert str(model.get_argument_type()) == "i8*"
    assert len(numba_type.fields) >= 2
