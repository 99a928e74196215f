"""External data of ONNX models given as bytes or a ModelProto (`base_dir`), and the lowered-model
cache's key for them: bytes and a ModelProto have no directory, so external data is read only
from a `base_dir` the caller names (never relative to the current directory), the key covers
the real directory it was read from, and locations outside it stay refused.

Outputs are judged by onnxruntime, as tests/test_lowering_cache.py.
"""

import os

import numpy as np
import onnx
import pytest
from test_lowering_cache import ATOL, RTOL, X, entries, lowerings, run, save_external

import rtsoa
from rtsoa.errors import LoweringError, ModelInputError
from rtsoa.lowering import import_onnx, lower
from rtsoa.lowering.cache import lower_cached
from rtsoa.runtime import load_model
from rtsoa.testing.models import mlp, run_onnxruntime

__all__ = ["lowerings"]  # a fixture shared with test_lowering_cache (lowered_dir: conftest)


def want(proto):
    return run_onnxruntime(proto, {"x": X})["y"]


def test_bytes_with_external_data_are_refused_without_base_dir(tmp_path, lowered_dir, monkeypatch):
    """The weights sit in the current directory: they are still not read, since the caller
    never named that directory (onnxruntime refuses such bytes too)."""
    path = save_external(mlp(seed=21), tmp_path / "a")
    monkeypatch.chdir(tmp_path / "a")
    data = path.read_bytes()
    proto = onnx.load(path, load_external_data=False)
    for call in (
        lambda: lower_cached(data),
        lambda: lower(data),
        lambda: import_onnx(proto),
        lambda: load_model(data),
        lambda: rtsoa.load_executor(proto),
    ):
        with pytest.raises(LoweringError, match="external file 'weights.bin'.*base_dir=") as error:
            call()
        assert "\n" not in str(error.value)
    assert entries(lowered_dir) == []


def test_base_dir_is_where_external_data_is_read_and_part_of_the_key(
    tmp_path, lowered_dir, lowerings, monkeypatch
):
    old, new = mlp(seed=22), mlp(seed=23)  # same model bytes, other weights
    first = save_external(old, tmp_path / "a")
    second = save_external(new, tmp_path / "b")
    data = first.read_bytes()
    assert second.read_bytes() == data
    monkeypatch.chdir(tmp_path / "a")
    np.testing.assert_allclose(
        run(lower_cached(data, base_dir=tmp_path / "a")), want(old), rtol=RTOL, atol=ATOL
    )
    # a later call from elsewhere naming the other directory gets that directory's weights
    monkeypatch.chdir(tmp_path / "b")
    got = run(lower_cached(data, base_dir=tmp_path / "b"))
    np.testing.assert_allclose(got, want(new), rtol=RTOL, atol=ATOL)
    assert len(lowerings) == 2 and len(entries(lowered_dir)) == 2
    got = run(lower_cached(data, base_dir=str(tmp_path / "a")))  # served, the first's weights
    np.testing.assert_allclose(got, want(old), rtol=RTOL, atol=ATOL)
    assert len(lowerings) == 2
    # the weights in the named directory change: a miss
    monkeypatch.chdir(tmp_path)  # onnx's save refuses a location that exists in the cwd
    save_external(new, tmp_path / "a")
    got = run(lower_cached(data, base_dir=tmp_path / "a"))
    np.testing.assert_allclose(got, want(new), rtol=RTOL, atol=ATOL)
    assert len(lowerings) == 3


def test_base_dir_through_the_model_api(tmp_path, lowered_dir):
    proto_weights = mlp(seed=24)
    path = save_external(proto_weights, tmp_path / "a")
    proto = onnx.load(path, load_external_data=False)
    with rtsoa.load_executor(proto, base_dir=tmp_path / "a") as executor:
        got = executor.execute_sync({"x": X})["y"]
    np.testing.assert_allclose(got, want(proto_weights), rtol=RTOL, atol=ATOL)
    assert proto.graph.initializer[0].data_location == onnx.TensorProto.EXTERNAL  # not changed
    with rtsoa.load_executor(path.read_bytes(), base_dir=tmp_path / "a") as executor:
        np.testing.assert_allclose(executor.execute_sync({"x": X})["y"], got)
    with rtsoa.load_executor(
        path.read_bytes(), base_dir=tmp_path / "a", stream_executor=True
    ) as streams:
        np.testing.assert_allclose(streams.execute_sync(0, {"x": X})["y"], got)
    with load_model(proto, base_dir=str(tmp_path / "a")) as executor:
        np.testing.assert_allclose(executor.execute_sync({"x": X})["y"], got)
    with pytest.raises(LoweringError, match="base_dir .*missing.* is not a directory"):
        load_model(proto, base_dir=tmp_path / "missing")
    graph = lower(path)
    with pytest.raises(ModelInputError, match="base_dir applies to ONNX models"):
        load_model(graph, base_dir=tmp_path)


def test_a_location_outside_base_dir_is_refused(tmp_path, lowered_dir):
    proto_weights = mlp(seed=25)
    path = save_external(proto_weights, tmp_path / "a")
    (tmp_path / "a" / "weights.bin").rename(tmp_path / "weights.bin")
    proto = onnx.load(path, load_external_data=False)
    for tensor in proto.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "../weights.bin"
    onnx.save(proto, path)
    for source, base in ((path, None), (path.read_bytes(), tmp_path / "a"), (proto, path.parent)):
        with pytest.raises(LoweringError, match="external data not readable.*outside"):
            lower_cached(source, base_dir=base)
    assert entries(lowered_dir) == []


def test_a_model_file_through_a_symlink_reads_the_link_s_directory(
    tmp_path, lowered_dir, lowerings
):
    """onnx reads external data next to the path it was given; the key is that directory's,
    not the link target's, so the target's entry is never served for the link."""
    old, new = mlp(seed=26), mlp(seed=27)
    target = save_external(old, tmp_path / "b")
    save_external(new, tmp_path / "a")
    link = tmp_path / "a" / "m.onnx"
    link.unlink()
    os.symlink(target, link)
    np.testing.assert_allclose(run(lower_cached(target)), want(old), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(run(lower(link)), want(new), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(run(lower_cached(link)), want(new), rtol=RTOL, atol=ATOL)
    assert len(entries(lowered_dir)) == 2
