"""save_graph never destroys foreign data and is atomic: a reader, or a save killed at any
point, sees the old or the new complete graph, never a mix or nothing."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from graph_files import read, write

from rtsoa import GraphFormatError, load_graph, save_graph
from rtsoa.graph import atomic_save
from rtsoa.graph import io as graph_io
from rtsoa.graph.generators import generate
from rtsoa.graph.io import graph_tables, save_id

# Two graphs with the same node count whose nodes and kernels tables differ: NEW's nodes with
# OLD's other tables are well formed (so they pass validation) but are neither graph.
OLD = generate("chain", 3000, seed=1, kernels=8)
NEW = generate("chain", 3000, seed=2, kernels=4)


def same_graph(a, b):
    """Whether two ExecuteGraphs hold identical fields."""
    for name, value in a._asdict().items():
        other = getattr(b, name)
        if isinstance(value, np.ndarray):
            if value.dtype != other.dtype or not np.array_equal(value, other):
                return False
        elif value != other:
            return False
    return True


def which(path):
    """'old' or 'new': the graph at `path` (AssertionError for anything else)."""
    graph = load_graph(path)
    if same_graph(graph, OLD):
        return "old"
    assert same_graph(graph, NEW), "the graph at the path is neither the old nor the new one"
    return "new"


def leftovers(path):
    return sorted(p.name for p in path.parent.iterdir() if p.name != path.name)


def test_a_mix_of_the_two_graphs_would_pass_validation(tmp_path):
    # The premise of the tests below: only the save ids tell such a mix apart.
    mixed = tmp_path / "mixed.rtsoa"
    mixed.mkdir()
    for name, table in graph_tables(OLD).items():
        write(mixed, name, table)  # no save ids: the format before them
    write(mixed, "nodes", graph_tables(NEW)["nodes"])
    mix = load_graph(mixed)
    assert not same_graph(mix, OLD) and not same_graph(mix, NEW)


def test_a_directory_mixing_two_saves_is_refused(tmp_path):
    path = tmp_path / "g.rtsoa"
    save_graph(OLD, path)
    other = save_graph(NEW, tmp_path / "other.rtsoa")
    write(path, "nodes", read(other, "nodes"))
    with pytest.raises(GraphFormatError, match="'nodes'.*mixes tables of two graphs"):
        load_graph(path)
    with pytest.raises(GraphFormatError, match="mixes"):
        load_graph(path, validate=False)


def test_save_ids_are_the_content_digest_in_every_table(tmp_path):
    a = save_graph(OLD, tmp_path / "a.rtsoa")
    b = save_graph(OLD, tmp_path / "b.rtsoa")
    c = save_graph(NEW, tmp_path / "c.rtsoa")
    ids = {name: save_id(read(a, name)) for name in graph_tables(OLD)}
    assert len(set(ids.values())) == 1 and None not in ids.values()
    assert save_id(read(b, "nodes")) == ids["nodes"] != save_id(read(c, "nodes"))
    for file in sorted(a.iterdir()):  # equal graphs save to identical bytes
        assert (b / file.name).read_bytes() == file.read_bytes()
    # Plain pyarrow still reads every table (the id is schema metadata).
    table = pa.ipc.open_file(pa.memory_map(str(a / "nodes.arrow"))).read_all()
    assert table.num_rows == OLD.num_nodes


def test_graphs_written_before_save_ids_still_load(tmp_path):
    path = tmp_path / "legacy.rtsoa"
    path.mkdir()
    for name, table in graph_tables(OLD).items():
        write(path, name, table)  # no schema metadata
    assert same_graph(load_graph(path), OLD)
    save_graph(NEW, path)  # a legacy graph directory is replaced like any graph
    assert which(path) == "new" and leftovers(path) == []


@pytest.mark.parametrize("kind", ["directory", "file", "symlink", "mixed directory"])
def test_foreign_data_at_the_target_is_refused_and_left_intact(tmp_path, kind):
    path = tmp_path / "out.rtsoa"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("precious")
    if kind == "directory":
        path.mkdir()
        (path / "notes.txt").write_text("precious")
    elif kind == "file":
        path.write_text("precious")
    elif kind == "symlink":
        path.symlink_to(elsewhere)
    else:  # a graph directory someone added a file to
        save_graph(OLD, path)
        (path / "notes.txt").write_text("precious")
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    with pytest.raises(FileExistsError, match="not an rtsoa graph.*overwrite=True"):
        save_graph(NEW, path)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before
    assert (elsewhere / "keep.txt").read_text() == "precious"
    # Asked for explicitly, the target is replaced; a symlink itself, not what it points to.
    save_graph(NEW, path, overwrite=True)
    assert which(path) == "new" and not path.is_symlink()
    assert leftovers(path) == ["elsewhere"]
    assert (elsewhere / "keep.txt").read_text() == "precious"


def test_missing_paths_empty_directories_and_graphs_are_written(tmp_path):
    path = tmp_path / "deep" / "er" / "g.rtsoa"
    save_graph(OLD, path)
    assert which(path) == "old"
    save_graph(NEW, path)
    assert which(path) == "new" and leftovers(path) == []
    empty = tmp_path / "empty.rtsoa"
    empty.mkdir()
    save_graph(OLD, empty)
    assert which(empty) == "old"
    with pytest.raises(ValueError, match="cannot save a graph as"):
        save_graph(OLD, tmp_path / "..")


def test_the_next_save_removes_leftovers_and_nothing_else(tmp_path):
    path = tmp_path / "g.rtsoa"
    save_graph(OLD, path)
    for name in (".g.rtsoa.staging-0123456789abcdef", ".g.rtsoa.old-fedcba9876543210"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "nodes.arrow").write_bytes(b"x" * 1000)
    legacy = tmp_path / ".g.rtsoa.ab12_xyz"  # tempfile.mkdtemp staging of earlier versions
    legacy.mkdir()
    (legacy / "edges.arrow").write_bytes(b"x")
    foreign = tmp_path / ".g.rtsoa.notes"
    foreign.write_text("not ours")
    foreign_dir = tmp_path / ".g.rtsoa.zz99_abc"  # looks like a legacy name, holds other files
    foreign_dir.mkdir()
    (foreign_dir / "data.csv").write_text("not ours")
    save_graph(NEW, path)
    assert leftovers(path) == [".g.rtsoa.notes", ".g.rtsoa.zz99_abc"]
    assert which(path) == "new"


def test_replacing_without_an_exchange_call_keeps_the_old_graph_until_the_end(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(atomic_save, "_EXCHANGE", None)  # e.g. a filesystem without RENAME_EXCHANGE
    path = tmp_path / "g.rtsoa"
    save_graph(OLD, path)
    save_graph(NEW, path)
    assert which(path) == "new" and leftovers(path) == []


# -- crashes: SIGKILL at every step of a save, and at random times ------------------------


def _kill_at_step(step, path, graph, durable):
    """In a forked child: save `graph` to `path`, SIGKILLing itself before file-system step
    `step` (or after the last). Returns True if the child was killed, False if it finished."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            counter = [0]

            def tick():
                if counter[0] == step:
                    os.kill(os.getpid(), signal.SIGKILL)
                counter[0] += 1

            def counted(function):  # the gap after a step is the one before the next
                def call(*args, **kwargs):
                    tick()
                    return function(*args, **kwargs)

                return call

            for module, name in [
                (graph_io, "_write_table"),
                (atomic_save, "fsync_all"),
                (atomic_save, "fsync_path"),
                (atomic_save, "exchange"),
                (atomic_save, "remove_entry"),
                (atomic_save, "remove_leftovers"),
                (atomic_save.os, "rename"),
            ]:
                setattr(module, name, counted(getattr(module, name)))
            save_graph(graph, path, durable=durable)
        finally:
            os._exit(0)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError(f"the saving child hung at step {step}")


# The flushes (durable) add steps but change nothing for a killed process: the fallback is
# tested without them, to keep the test short.
@pytest.mark.parametrize("exchange, durable", [("renameat2", True), ("two renames", False)])
def test_a_save_killed_at_every_step_leaves_the_old_or_the_new_graph(
    tmp_path, monkeypatch, exchange, durable
):
    if exchange == "two renames":
        monkeypatch.setattr(atomic_save, "_EXCHANGE", None)
    path = tmp_path / "g.rtsoa"
    seen = []
    step = 0
    while True:
        save_graph(OLD, path, durable=False)  # also removes the previous crash's leftovers
        assert leftovers(path) == []
        killed = _kill_at_step(step, path, NEW, durable)
        if not killed:
            break
        if exchange == "two renames" and not path.exists():
            # The fallback's window between its two renames: the old graph is kept aside.
            (kept,) = [p for p in tmp_path.iterdir() if p.name.startswith(".g.rtsoa.old-")]
            assert which(kept) == "old"
            seen.append("old kept aside")
        else:
            seen.append(which(path))
        step += 1
    assert which(path) == "new"
    assert step >= 17  # 13 tables written, the flushes, the swap, the clean-up
    assert seen[0] == "old" and seen[-1] == "new"
    if exchange == "renameat2":
        assert set(seen) == {"old", "new"}
    save_graph(OLD, path)
    assert leftovers(path) == [] and which(path) == "old"


def test_saves_killed_at_random_times_leave_the_old_or_the_new_graph(tmp_path):
    path = tmp_path / "g.rtsoa"
    save_graph(OLD, path)
    rng = random.Random(13)
    seen = set()
    for _ in range(25):
        pid = os.fork()
        if pid == 0:
            try:
                while True:  # alternate, so every instant is inside some save
                    save_graph(NEW, path, durable=False)
                    save_graph(OLD, path, durable=False)
            finally:
                os._exit(0)
        time.sleep(rng.uniform(0.0, 0.15))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        seen.add(which(path))
    save_graph(OLD, path)
    assert leftovers(path) == []
    assert seen == {"old", "new"}


_WRITER = """
import sys
from rtsoa.graph.io import load_graph, save_graph
old, new = (load_graph(p) for p in sys.argv[1:3])
print("ready", flush=True)
while True:
    save_graph(new, sys.argv[3])
    save_graph(old, sys.argv[3])
"""


def test_a_separate_process_killed_mid_save_leaves_a_graph(tmp_path):
    old = save_graph(OLD, tmp_path / "old.rtsoa")
    new = save_graph(NEW, tmp_path / "new.rtsoa")
    path = save_graph(OLD, tmp_path / "out" / "g.rtsoa")
    for delay in (0.0, 0.1):
        child = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(old), str(new), str(path)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout.readline().strip() == "ready"
        time.sleep(delay)
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
        which(path)
    save_graph(NEW, path)
    assert leftovers(path) == [] and which(path) == "new"


def test_a_reader_never_sees_a_torn_graph_while_a_writer_saves(tmp_path):
    path = tmp_path / "g.rtsoa"
    save_graph(OLD, path)
    pid = os.fork()
    if pid == 0:
        try:
            for _ in range(60):
                save_graph(NEW, path, durable=False)
                save_graph(OLD, path, durable=False)
        finally:
            os._exit(0)
    seen = {"old": 0, "new": 0}
    try:
        while not os.waitpid(pid, os.WNOHANG)[0]:
            seen[which(path)] += 1  # any load error or torn graph fails here
    except BaseException:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    assert seen["old"] > 0 and seen["new"] > 0, seen
    assert leftovers(path) == []


def test_a_reader_retries_only_when_the_directory_changed(tmp_path, monkeypatch):
    path = save_graph(OLD, tmp_path / "g.rtsoa")
    reads = []
    real = graph_io._read_tables

    def counting(directory):
        reads.append(Path(directory))
        return real(directory)

    monkeypatch.setattr(graph_io, "_read_tables", counting)
    write(path, "nodes", read(save_graph(NEW, tmp_path / "b.rtsoa"), "nodes"))
    with pytest.raises(GraphFormatError, match="mixes"):
        load_graph(path)
    assert len(reads) == 1  # a directory that mixes saves by itself is not re-read
