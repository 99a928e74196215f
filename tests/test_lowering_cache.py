"""Lowered models on disk (`rtsoa.lowering.cache`): a model lowered before is served from the
cache, the same graph as lowering it again, and a fresh process running it does not import
`onnx`; anything that could make a cached graph wrong (changed external data, another
directory, a registry change, a broken or foreign entry) is a miss.

Outputs are judged by onnxruntime (rtol 1e-4 / atol 1e-5, float32, as tests/test_models.py).
"""

import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import onnx
import pytest
from subprocess_json import run_json

from rtsoa.errors import LoweringError
from rtsoa.graph.io import graph_tables
from rtsoa.lowering import cache, lower, register_converter
from rtsoa.lowering.cache import entry_key, lower_cached
from rtsoa.lowering.converters import unregister_converter
from rtsoa.runtime import load_model
from rtsoa.testing.models import mlp, model, run_onnxruntime

RTOL, ATOL = 1e-4, 1e-5
X = np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 16)


@pytest.fixture
def lowerings(monkeypatch):
    """Counts the real lowerings `lower_cached` does."""
    calls = []

    def counting(source, *args, **kwargs):
        calls.append(source)
        return lower(source, *args, **kwargs)

    monkeypatch.setattr(cache, "lower", counting)  # the lowering `lower_cached` calls
    return calls


def entries(directory):
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def run(graph_or_path, x=X):
    with load_model(graph_or_path) as executor:
        return executor.execute_sync({"x": x})["y"]


def same_tables(first, second):
    a, b = graph_tables(first), graph_tables(second)
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].equals(b[name]), name


def test_a_model_lowered_before_is_the_same_graph_and_is_not_lowered_again(
    tmp_path, lowered_dir, lowerings
):
    proto = mlp(seed=3)
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    first = lower_cached(path)
    assert len(lowerings) == 1 and len(entries(lowered_dir)) == 1
    second = lower_cached(path)
    assert len(lowerings) == 1  # served from disk
    same_tables(first, second)
    same_tables(lower(proto), second)
    want = run_onnxruntime(proto, {"x": X})["y"]
    np.testing.assert_allclose(run(second), want, rtol=RTOL, atol=ATOL)
    # bytes are keyed by their content as well, and streams by their count
    lower_cached(proto.SerializeToString())
    lower_cached(proto.SerializeToString())
    lower_cached(path, streams=2)
    assert len(lowerings) == 3 and len(entries(lowered_dir)) == 3


def test_a_fresh_process_runs_a_cached_model_without_importing_onnx(tmp_path, lowered_dir):
    proto = mlp(seed=4)
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    code = textwrap.dedent(
        """
        import json, sys
        import numpy as np
        from rtsoa.runtime import load_model
        x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 16)
        with load_model(sys.argv[1]) as executor:
            y = executor.execute_sync({"x": x})["y"]
        print(json.dumps({"onnx": "onnx" in sys.modules, "y": y.tolist()}))
        """
    )
    env = dict(os.environ, RTSOA_LOWERED_DIR=str(lowered_dir))
    first = run_json(code, path, env=env)
    second = run_json(code, path, env=env)
    assert first["onnx"] and not second["onnx"]
    want = run_onnxruntime(proto, {"x": X})["y"]
    np.testing.assert_allclose(np.array(second["y"]), want, rtol=RTOL, atol=ATOL)
    assert first["y"] == second["y"]


def save_external(proto, directory):
    """A copy of `proto` saved as directory/m.onnx with its weights in directory/weights.bin."""
    directory.mkdir(exist_ok=True)
    path = directory / "m.onnx"
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)  # save_model turns the weights it writes out into references
    (directory / "weights.bin").unlink(missing_ok=True)  # save_model appends to it
    onnx.save_model(
        copy,
        path,
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="weights.bin",
        size_threshold=0,
    )
    return path


def test_changed_external_data_or_another_directory_is_a_miss(tmp_path, lowered_dir, lowerings):
    old, new = mlp(seed=5), mlp(seed=6)  # same layers, other weights
    path = save_external(old, tmp_path / "a")
    assert run(lower_cached(path)) == pytest.approx(run_onnxruntime(old, {"x": X})["y"], rel=1e-3)
    model_bytes = path.read_bytes()
    save_external(new, tmp_path / "a")  # weights.bin rewritten, same size
    assert path.read_bytes() == model_bytes  # only the external data changed
    got = run(lower_cached(path))
    np.testing.assert_allclose(got, run_onnxruntime(new, {"x": X})["y"], rtol=RTOL, atol=ATOL)
    assert len(lowerings) == 2
    # the same model file next to other weights, in another directory
    other = save_external(old, tmp_path / "b")
    got = run(lower_cached(other))
    np.testing.assert_allclose(got, run_onnxruntime(old, {"x": X})["y"], rtol=RTOL, atol=ATOL)
    got = run(lower_cached(path))  # and the first directory still gets its own
    np.testing.assert_allclose(got, run_onnxruntime(new, {"x": X})["y"], rtol=RTOL, atol=ATOL)
    assert len(lowerings) == 3
    record = json.loads(next(lowered_dir.glob("*/entry.json")).read_text())
    assert record["external"] and record["external"][0][0].endswith("weights.bin")


@pytest.mark.parametrize("written", ["weights.bin", "m.onnx"])
def test_a_file_written_while_it_is_lowered_is_not_kept(
    tmp_path, lowered_dir, monkeypatch, written
):
    """The weights (or the model file) change after they were read and before the lowering
    ends: that lowering is returned (it is of what was read) but not kept, since its entry
    would record the new content's hash with the old content's graph; the next call lowers
    the new content and keeps it."""
    old, new = mlp(seed=5), mlp(seed=6)
    path = save_external(old, tmp_path / "a")
    calls = []

    def rewriting(source, *args, **kwargs):
        calls.append(source)
        if len(calls) == 1:  # the first lowering: its inputs were read, now rewritten
            if written == "weights.bin":
                save_external(new, tmp_path / "a")
            else:
                path.write_bytes(path.read_bytes())  # same bytes, a new write
        return lower(source, *args, **kwargs)

    monkeypatch.setattr(cache, "lower", rewriting)
    first = run(lower_cached(path))
    np.testing.assert_allclose(first, run_onnxruntime(old, {"x": X})["y"], rtol=RTOL, atol=ATOL)
    assert entries(lowered_dir) == []
    now = new if written == "weights.bin" else old
    second = run(lower_cached(path))
    np.testing.assert_allclose(second, run_onnxruntime(now, {"x": X})["y"], rtol=RTOL, atol=ATOL)
    assert len(entries(lowered_dir)) == 1 and len(calls) == 2
    assert np.array_equal(run(lower_cached(path)), second) and len(calls) == 2  # kept


@pytest.mark.parametrize("damage", ["entry", "table", "version"])
def test_a_broken_entry_is_lowered_again_and_replaced(tmp_path, lowered_dir, lowerings, damage):
    proto = mlp(seed=7)
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    lower_cached(path)
    (entry,) = lowered_dir.iterdir()
    if damage == "entry":
        (entry / "entry.json").write_text("{not json")
    elif damage == "table":
        table = sorted((entry / "graph.rtsoa").glob("*.arrow"))[0]
        table.write_bytes(table.read_bytes()[:100])
    else:
        (entry / "entry.json").write_text(json.dumps({"version": 99, "external": []}))
    graph = lower_cached(path)
    assert len(lowerings) == 2
    want = run_onnxruntime(proto, {"x": X})["y"]
    np.testing.assert_allclose(run(graph), want, rtol=RTOL, atol=ATOL)
    lower_cached(path)  # the replaced entry is served
    assert len(lowerings) == 2 and entries(lowered_dir) == [entry.name]


def test_an_entry_others_can_write_or_own_is_not_trusted(tmp_path, lowered_dir, lowerings):
    proto = mlp(seed=8)
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    want = run_onnxruntime(proto, {"x": X})["y"]
    lower_cached(path)
    (entry,) = lowered_dir.iterdir()
    table = sorted((entry / "graph.rtsoa").glob("*.arrow"))[0]
    os.chmod(table, 0o666)
    np.testing.assert_allclose(run(lower_cached(path)), want, rtol=RTOL, atol=ATOL)
    assert len(lowerings) == 2  # not loaded; our own directory, so it was replaced
    assert os.stat(sorted((entry / "graph.rtsoa").glob("*.arrow"))[0]).st_mode & 0o022 == 0
    lower_cached(path)
    assert len(lowerings) == 2
    os.symlink(entry, lowered_dir / "link")
    assert not cache._entry_trusted(lowered_dir / "link")
    os.unlink(lowered_dir / "link")
    if hasattr(os, "getuid") and os.getuid() == 0:  # root can hand the entry to another user
        for root, dirs, files in os.walk(entry):
            for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
                os.chown(name, 4321, 4321)
        np.testing.assert_allclose(run(lower_cached(path)), want, rtol=RTOL, atol=ATOL)
        assert len(lowerings) == 3  # not loaded, and not replaced: it is someone else's
        assert os.stat(entry).st_uid == 4321
        assert cache.evict(lowered_dir, limit=0) == []  # nor ever evicted
        assert entry.exists()


def test_a_model_lowered_with_other_fusions_is_another_entry(tmp_path, lowered_dir, lowerings):
    """The fusions are part of the key: a model lowered with every fusion is not served to a
    caller that leaves the Winograd convolutions out, and each lowering is kept."""
    from onnx import helper

    from rtsoa.graph.inspect import op_counts
    from rtsoa.lowering.fuse import FUSIONS
    from rtsoa.testing.models import FLOAT

    weights = (np.random.default_rng(4).standard_normal((64, 64, 3, 3)) / 24).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    proto = model([node], [("x", FLOAT, [1, 64, 14, 14])], [("y", FLOAT, None)], [("w", weights)])
    path = tmp_path / "conv.onnx"
    onnx.save(proto, path)
    direct = tuple(name for name in FUSIONS if name != "winograd")
    assert op_counts(lower_cached(path)) == {"WinogradConv": 1}
    assert op_counts(lower_cached(path, fuse=direct)) == {"Conv": 1}
    assert op_counts(lower_cached(path, fuse=False)) == {"Conv": 1}
    assert len(lowerings) == 3 and len(entries(lowered_dir)) == 3
    assert op_counts(lower_cached(path, fuse=reversed(direct))) == {"Conv": 1}
    assert op_counts(lower_cached(path, fuse=True)) == {"WinogradConv": 1}
    assert len(lowerings) == 3  # the same fusion set in another order or form: served
    with pytest.raises(ValueError, match="unknown fusion"):
        lower_cached(path, fuse=("winograd", "wingorad"))


def test_registries_and_user_converter_modules_are_part_of_the_key(tmp_path, monkeypatch):
    key = entry_key("digest", None, 1)
    assert entry_key("digest", None, 1) == key
    assert entry_key("digest", "/elsewhere", 1) != key
    assert entry_key("other digest", None, 1) != key
    assert entry_key("digest", None, 1, ("winograd",)) != key
    module = tmp_path / "lowering_cache_user_ops.py"
    module.write_text("def convert(ctx, node):\n    ctx.emit('Relu', node.inputs, node.outputs)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import lowering_cache_user_ops

    register_converter("CacheTestOp", domain="com.example")(lowering_cache_user_ops.convert)
    try:
        with_converter = entry_key("digest", None, 1)
        assert with_converter != key
        module.write_text(module.read_text() + "# edited\n")
        assert entry_key("digest", None, 1) != with_converter
    finally:
        unregister_converter("CacheTestOp", domain="com.example")
        sys.modules.pop("lowering_cache_user_ops", None)
    assert entry_key("digest", None, 1) == key


def test_off_switch_and_failed_lowerings_write_nothing(tmp_path, lowered_dir, monkeypatch):
    path = tmp_path / "m.onnx"
    onnx.save(mlp(seed=9), path)
    monkeypatch.setenv("RTSOA_LOWERING_CACHE", "0")
    lower_cached(path)
    assert entries(lowered_dir) == []
    monkeypatch.delenv("RTSOA_LOWERING_CACHE")
    from onnx import helper

    from rtsoa.testing.models import FLOAT

    bad = model(
        [helper.make_node("NoSuchOp", ["x"], ["y"])], [("x", FLOAT, [1])], [("y", FLOAT, [1])]
    )
    for _ in range(2):
        with pytest.raises(LoweringError, match="NoSuchOp"):
            lower_cached(bad.SerializeToString())
    assert entries(lowered_dir) == []
    with pytest.raises(LoweringError, match="no such ONNX file"):
        lower_cached(tmp_path / "missing.onnx")


def test_concurrent_processes_leave_one_whole_entry(tmp_path, lowered_dir):
    path = tmp_path / "m.onnx"
    onnx.save(mlp(seed=10, layers=6), path)
    code = "import sys; from rtsoa.lowering.cache import lower_cached; lower_cached(sys.argv[1])"
    env = dict(os.environ, RTSOA_LOWERED_DIR=str(lowered_dir))
    processes = [
        subprocess.Popen([sys.executable, "-c", code, str(path)], env=env) for _ in range(3)
    ]
    assert [p.wait(timeout=600) for p in processes] == [0, 0, 0]
    (entry,) = lowered_dir.iterdir()  # no temporary directory left behind
    assert sorted(p.name for p in entry.iterdir()) == ["entry.json", "graph.rtsoa"]
    want = run_onnxruntime(mlp(seed=10, layers=6), {"x": X})["y"]
    np.testing.assert_allclose(run(lower_cached(path)), want, rtol=RTOL, atol=ATOL)


def test_a_cache_directory_others_can_write_is_not_used(tmp_path, lowered_dir, lowerings):
    path = tmp_path / "m.onnx"
    proto = mlp(seed=11)
    onnx.save(proto, path)
    lower_cached(path)
    os.chmod(lowered_dir, 0o777)  # anyone could swap an entry between its check and its load
    graph = lower_cached(path)
    assert len(lowerings) == 2
    want = run_onnxruntime(proto, {"x": X})["y"]
    np.testing.assert_allclose(run(graph), want, rtol=RTOL, atol=ATOL)
    lower_cached(tmp_path / "m.onnx", streams=2)
    assert len(entries(lowered_dir)) == 1  # nothing written there either
    os.chmod(lowered_dir, 0o755)
    lower_cached(path)
    assert len(lowerings) == 3  # the entry is served again (the streams=2 call lowered too)


def test_least_recently_used_entries_are_evicted_beyond_the_limit(
    tmp_path, lowered_dir, lowerings, monkeypatch
):
    """Three models, room for about two: each write removes the least recently used entry
    (a hit counts as a use), never the one just written; the survivors still serve hits."""
    paths = []
    for seed in (21, 22, 23):
        path = tmp_path / f"m{seed}.onnx"
        onnx.save(mlp(seed=seed), path)
        paths.append(path)
    lower_cached(paths[0])
    (first,) = entries(lowered_dir)
    size = cache._tree_bytes(lowered_dir / first)
    monkeypatch.setenv("RTSOA_LOWERED_MAX_BYTES", str(2 * size + size // 2))
    lower_cached(paths[1])
    assert len(entries(lowered_dir)) == 2
    os.utime(lowered_dir / first / "entry.json", (1, 1))  # make it the oldest ...
    lower_cached(paths[0])  # ... then a hit makes it the most recently used
    assert len(lowerings) == 2
    lower_cached(paths[2])  # over the limit: the second model's entry goes
    assert len(lowerings) == 3 and len(entries(lowered_dir)) == 2 and first in entries(lowered_dir)
    lower_cached(paths[0])
    lower_cached(paths[2])
    assert len(lowerings) == 3  # both survivors still hit
    lower_cached(paths[1])  # evicted: lowered again
    assert len(lowerings) == 4
    want = run_onnxruntime(mlp(seed=22), {"x": X})["y"]
    np.testing.assert_allclose(run(lower_cached(paths[1])), want, rtol=RTOL, atol=ATOL)
    # a limit below one entry keeps only the entry just written
    monkeypatch.setenv("RTSOA_LOWERED_MAX_BYTES", "1")
    lower_cached(paths[2], streams=2)
    assert len(entries(lowered_dir)) == 1 and len(lowerings) == 5


def test_eviction_spares_live_writers_and_bad_limits_are_named(tmp_path, lowered_dir, monkeypatch):
    """A young temporary directory (a writer at work) stays, a stale one goes; a malformed
    limit is an error naming the variable, before anything is lowered or written."""
    lowered_dir.mkdir()
    young, stale = lowered_dir / ".tmp-youngabc", lowered_dir / ".tmp-staleabc"
    young.mkdir()
    stale.mkdir()
    (stale / "graph.rtsoa").write_bytes(b"x" * 100)
    old = time.time() - cache.STALE_SECONDS - 10
    os.utime(stale, (old, old))
    assert cache.evict(lowered_dir, limit=0) == [".tmp-staleabc"]
    assert entries(lowered_dir) == [".tmp-youngabc"]
    path = tmp_path / "m.onnx"
    onnx.save(mlp(seed=24), path)
    monkeypatch.setenv("RTSOA_LOWERED_MAX_BYTES", "lots")
    with pytest.raises(ValueError, match="RTSOA_LOWERED_MAX_BYTES"):
        lower_cached(path)
    assert entries(lowered_dir) == [".tmp-youngabc"]


def test_a_cache_directory_set_to_a_home_loses_nothing_but_entries(tmp_path, monkeypatch):
    """RTSOA_LOWERED_DIR pointed by mistake at a directory of the user's own files: eviction
    removes only what the cache writes (entries named by their key, writers' temporary
    directories, each holding only an entry's files), however tight the limit."""
    home = tmp_path / "home"
    (home / "photos").mkdir(parents=True)
    (home / "photos" / "cat.jpg").write_bytes(b"x" * 10_000)
    (home / ("a" * 64)).mkdir()  # named like an entry, but holding the user's notes
    (home / ("a" * 64) / "notes.txt").write_text("mine")
    (home / ".tmp-abcdefgh").mkdir()  # named like a writer's, but the user's
    (home / ".tmp-abcdefgh" / "mine.txt").write_text("mine")
    old = time.time() - cache.STALE_SECONDS - 10
    os.utime(home / ".tmp-abcdefgh", (old, old))
    (home / "file.txt").write_text("mine")
    monkeypatch.setenv("RTSOA_LOWERED_DIR", str(home))
    monkeypatch.setenv("RTSOA_LOWERED_MAX_BYTES", "1")
    before = sorted(p.name for p in home.iterdir())
    path = tmp_path / "m.onnx"
    onnx.save(mlp(seed=25), path)
    lower_cached(path)  # writes an entry, then evicts down to the limit
    after = sorted(p.name for p in home.iterdir())
    assert set(before) <= set(after) and len(after) == len(before) + 1
    assert (home / "photos" / "cat.jpg").stat().st_size == 10_000
    assert cache.evict(home, limit=0) == [next(iter(set(after) - set(before)))]  # the entry
