"""A model's weights are held once in steady state (`rtsoa.graph.pages`): the constant blob of a
graph mapped from a file leaves the process's resident set once Init has uploaded it, comes
back from the file when Init runs again, and nothing that is not a read-only file mapping is
ever touched (the same advice on anonymous or written memory would zero it).

Residency is read per mapping from /proc/self/smaps, so other allocations of the process do
not blur it. Outputs are judged by onnxruntime (rtol 1e-4 / atol 1e-5, as tests/test_models.py).
"""

import mmap
import sys

import numpy as np
import pytest

from rtsoa import InferenceSession
from rtsoa.graph import pages
from rtsoa.graph.io import load_graph, save_graph
from rtsoa.graph.pages import MIN_BYTES, release_file_pages
from rtsoa.lowering import lower
from rtsoa.lowering.cache import lower_cached
from rtsoa.testing.models import mlp, run_onnxruntime

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux madvise")

RTOL, ATOL = 1e-4, 1e-5
# a 2 x 1024-wide MLP: 4 MiB of float32 weights in one blob, well above MIN_BYTES
FEATURES, HIDDEN = 256, 1024


def resident_bytes(array):
    """Resident bytes of the mapping holding `array` (its smaps `Rss`)."""
    address = array.ctypes.data
    with open("/proc/self/smaps") as lines:
        inside = False
        for line in lines:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
                low, high = (int(bound, 16) for bound in head[0].split("-"))
                inside = low <= address < high
            elif inside and head[0] == "Rss:":
                return int(head[1]) * 1024
    raise AssertionError("no mapping holds the array")


def test_a_mapped_blob_leaves_the_resident_set_and_reads_back_the_same(tmp_path):
    proto = mlp(features=FEATURES, hidden=HIDDEN, layers=2)
    save_graph(lower(proto), tmp_path / "g.rtsoa")
    blob = load_graph(tmp_path / "g.rtsoa").constants
    assert blob.nbytes >= MIN_BYTES and not blob.flags.writeable
    expected = blob.copy()  # reads every page: all resident
    assert resident_bytes(blob) >= blob.nbytes - mmap.PAGESIZE
    released = release_file_pages(blob)
    assert released >= blob.nbytes - 2 * mmap.PAGESIZE
    assert resident_bytes(blob) <= 2 * mmap.PAGESIZE  # at most the partial end pages
    np.testing.assert_array_equal(blob, expected)  # faulted back in from the file


def test_memory_that_is_not_a_read_only_file_mapping_is_never_advised(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(pages, "_madvise", lambda: lambda *a: calls.append(a) or 0)
    anonymous = np.arange(MIN_BYTES, dtype=np.uint8)
    anonymous.flags.writeable = False  # read-only, but anonymous: dropping would zero it
    path = tmp_path / "blob.bin"
    path.write_bytes(bytes(range(256)) * (MIN_BYTES // 256))
    writable = np.memmap(path, dtype=np.uint8, mode="r+")  # a file, but written through
    writable_view = writable.view()
    writable_view.flags.writeable = False  # a read-only view of a writable mapping
    small = np.memmap(path, dtype=np.uint8, mode="r", shape=(MIN_BYTES - 1,))
    for array in (anonymous, writable, writable_view, small, anonymous[::2], [1, 2, 3]):
        assert release_file_pages(array) == 0
    assert calls == []
    assert anonymous[-1] == (MIN_BYTES - 1) % 256 and writable[255] == 255
    readable = np.memmap(path, dtype=np.uint8, mode="r")
    assert release_file_pages(readable) == MIN_BYTES  # and a read-only file mapping is
    assert len(calls) == 1


def test_a_model_from_a_file_holds_its_weights_once_and_reloads_them(tmp_path, lowered_dir):
    proto = mlp(features=FEATURES, hidden=HIDDEN, layers=2)
    path = tmp_path / "m.onnx"
    path.write_bytes(proto.SerializeToString())
    x = np.linspace(-1, 1, 2 * FEATURES, dtype=np.float32).reshape(2, FEATURES)
    expected = run_onnxruntime(proto, {"x": x})["y"]
    for attempt in ("miss", "hit"):  # the lowering's own graph, then the cache entry's
        with InferenceSession(path) as session:
            blob = session.graph.constants
            assert not blob.flags.writeable, attempt  # a file's pages, not an anonymous copy
            assert session.home.released_bytes >= blob.nbytes - 2 * mmap.PAGESIZE, attempt
            assert resident_bytes(blob) <= 2 * mmap.PAGESIZE, attempt
            got = session.run(None, {"x": x})[0]
            np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)
        # Init again on a new device (DeInit freed the weights) reads them back from the file
        with InferenceSession(session.graph) as again:
            assert again.home.init_runs == 1
            np.testing.assert_allclose(again.run(None, {"x": x})[0], expected, RTOL, ATOL)
    assert lower_cached(path).constants.tobytes() == lower(proto).constants.tobytes()


def test_a_graph_built_in_memory_keeps_its_blob():
    graph = lower(mlp(features=FEATURES, hidden=HIDDEN, layers=2))
    before = graph.constants.copy()
    with InferenceSession(graph) as session:
        assert session.home.released_bytes == 0
    np.testing.assert_array_equal(graph.constants, before)
