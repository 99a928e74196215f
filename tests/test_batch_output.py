"""What `rtsoa batch -o` may name, and how the results file is written.

A FIFO, device node, socket, directory or symbolic link is refused before it is opened, with
and without --force and --resume, and left as it was; a results file is published by a new
file in the same directory, flushed, then renamed over the target (as save_graph does)."""

import os
import socket
import stat
import threading
from pathlib import Path

import pytest

from rtsoa.batch import BatchError, ResultsFile, read_results
from rtsoa.batch import results as results_module
from rtsoa.cli import main

GRAPH = str(Path(__file__).resolve().parent.parent / "datasets" / "chain-1k.rtsoa")
ROW = {"job": "a", "graph": "g", "status": "ok", "message": ""}


def _batch(target, flags, capsys):
    """`rtsoa batch` on one graph writing to `target`: (exit status, stderr). A batch that
    blocks opening a FIFO is unblocked after a while by opening the other end, and fails."""
    unblocked = []

    def unblock():
        unblocked.append(True)
        os.close(os.open(target, os.O_RDWR | os.O_NONBLOCK))  # the reader's open returns

    watchdog = None
    if stat.S_ISFIFO(os.lstat(target).st_mode):
        watchdog = threading.Timer(20, unblock)
        watchdog.start()
    try:
        code = main(["batch", GRAPH, "-o", str(target), "--no-progress", *flags])
    finally:
        if watchdog is not None:
            watchdog.cancel()
    assert not unblocked, f"rtsoa batch -o {target} {flags} blocked opening the FIFO"
    return code, capsys.readouterr().err


def _nodes(tmp_path):
    """(path, kind text, fingerprint) of every non-regular node -o must refuse."""
    fifo = tmp_path / "fifo.arrow"
    os.mkfifo(fifo)
    directory = tmp_path / "directory.arrow"
    directory.mkdir()
    results = tmp_path / "elsewhere" / "results.arrow"
    results.parent.mkdir()
    written = ResultsFile(results)
    written.add(ROW)
    written.flush()
    written.close()
    link = tmp_path / "link.arrow"
    link.symlink_to(results)  # even to a results file: the rename would replace the link
    dangling = tmp_path / "dangling.arrow"
    dangling.symlink_to(tmp_path / "nowhere.arrow")
    listening = socket.socket(socket.AF_UNIX)
    listening.bind(str(tmp_path / "socket.arrow"))
    nodes = [
        (fifo, "is a FIFO"),
        (directory, "is a directory"),
        (link, f"is a symbolic link (to {results})"),
        (dangling, "is a symbolic link"),
        (tmp_path / "socket.arrow", "is a socket"),
    ]
    try:  # a device node of our own (null's numbers), only where one may be made (root)
        os.mknod(tmp_path / "device.arrow", stat.S_IFCHR | 0o600, os.makedev(1, 3))
        nodes.append((tmp_path / "device.arrow", "is a character device"))
    except PermissionError:
        pass
    return nodes, listening


def _fingerprint(path):
    info = os.lstat(path)
    return info.st_mode, info.st_ino, info.st_rdev, info.st_mtime_ns


def test_non_regular_outputs_are_refused_before_being_opened(tmp_path, capsys):
    nodes, listening = _nodes(tmp_path)
    try:
        for target, text in nodes:
            before = _fingerprint(target)
            for flags in ([], ["--force"], ["--resume"], ["--resume", "--force"]):
                code, err = _batch(target, flags, capsys)
                assert code == 1 and err.count("\n") == 1, (target, flags, err)
                assert err.startswith(f"rtsoa batch: error: -o {target} {text}"), err
                assert _fingerprint(target) == before, (target, flags)  # left as it was
            assert not (tmp_path / f".{target.name}.lock").exists()  # nothing made next to it
    finally:
        listening.close()
    assert read_results(tmp_path / "elsewhere" / "results.arrow").num_rows == 1
    fifo = tmp_path / "fifo.arrow"
    with pytest.raises(BatchError, match="fifo.arrow is a FIFO .*, not an rtsoa batch results"):
        read_results(fifo)  # not waited on either


def test_force_replaces_a_regular_file_and_resume_reads_a_results_file(tmp_path, capsys):
    notes = tmp_path / "notes.arrow"
    notes.write_text("someone's notes")
    code, err = _batch(notes, [], capsys)
    assert code == 1 and "is not an rtsoa batch results file; refusing to replace it" in err
    code, err = _batch(notes, ["--force"], capsys)
    assert code == 0, err
    assert read_results(notes).column("status").to_pylist() == ["ok"]
    code, err = _batch(notes, ["--resume"], capsys)
    assert code == 0 and read_results(notes).num_rows == 1, err


def test_a_target_replaced_by_a_fifo_during_the_batch_is_not_written(tmp_path):
    out = tmp_path / "r.arrow"
    results = ResultsFile(out)
    os.mkfifo(out)
    results.add(ROW)
    with pytest.raises(BatchError, match=r"r.arrow is now a FIFO .*not a regular file"):
        results.flush()
    results.close()
    assert stat.S_ISFIFO(os.lstat(out).st_mode)
    assert sorted(os.listdir(tmp_path)) == [".r.arrow.lock", "r.arrow"]  # no staging file


def test_results_are_flushed_to_disk_then_renamed_over_the_target(tmp_path, monkeypatch):
    out = tmp_path / "r.arrow"
    out.write_text("old")
    old_inode = os.lstat(out).st_ino
    steps = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(descriptor):
        info = os.fstat(descriptor)
        kind = "directory" if stat.S_ISDIR(info.st_mode) else "file"
        steps.append(("fsync", kind, info.st_ino))
        real_fsync(descriptor)

    def replace(source, target):
        steps.append(("replace", os.path.dirname(source), os.lstat(source).st_ino, target))
        real_replace(source, target)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(results_module.os, "replace", replace)
    results = ResultsFile(out, force=True)
    results.add(ROW)
    results.flush()
    results.close()
    new_inode = os.lstat(out).st_ino
    assert new_inode != old_inode and read_results(out).num_rows == 1
    assert steps == [
        ("fsync", "file", new_inode),
        ("replace", str(tmp_path), new_inode, str(out)),
        ("fsync", "directory", os.lstat(tmp_path).st_ino),
    ]


def test_a_stale_entry_at_the_staging_name_is_never_followed(tmp_path):
    out = tmp_path / "r.arrow"
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    results = ResultsFile(out)
    os.symlink(victim, results._staging())  # a link where this process writes its next file
    results.add(ROW)
    results.flush()
    results.close()
    assert victim.read_text() == "keep me" and read_results(out).num_rows == 1


def test_a_link_at_the_lock_name_is_never_followed(tmp_path):
    out = tmp_path / "r.arrow"
    (tmp_path / ".r.arrow.lock").symlink_to(tmp_path / "made-elsewhere.txt")
    with pytest.raises(BatchError, match=r"r.arrow: cannot open the lock file .*\.r\.arrow\.lock"):
        ResultsFile(out)
    assert not (tmp_path / "made-elsewhere.txt").exists()
