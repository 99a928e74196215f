"""`rtsoa lower` and `rtsoa run` on models: outputs match onnxruntime, bad inputs are named."""

import io
import json
import zipfile

import numpy as np
import onnx
import pytest

from rtsoa.cli import main
from rtsoa.testing.models import mlp, run_onnxruntime


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    directory = tmp_path_factory.mktemp("model")
    proto = mlp(seed=3)
    path = directory / "mlp.onnx"
    onnx.save(proto, path)
    return proto, path


def _inputs(directory, **arrays):
    path = directory / "in.npz"
    np.savez(path, **arrays)
    return path


def test_lower_then_run_gives_onnxruntimes_numbers(model_file, tmp_path, capsys):
    proto, path = model_file
    lowered = tmp_path / "mlp.rtsoa"
    assert main(["lower", str(path), "-o", str(lowered), "--no-progress"]) == 0
    assert "ops lowered to" in capsys.readouterr().out
    x = np.random.default_rng(0).standard_normal((5, 16)).astype(np.float32)
    inputs = _inputs(tmp_path, x=x)
    out = tmp_path / "out.npz"
    code = main(["run", str(lowered), "--inputs", str(inputs), "--outputs", str(out), "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["hazards"] == 0
    assert summary["outputs"]["y"] == [[5, 4], "float32"]
    with np.load(out) as got:
        np.testing.assert_allclose(
            got["y"], run_onnxruntime(proto, {"x": x})["y"], rtol=1e-4, atol=1e-5
        )


@pytest.mark.parametrize(("threads", "executor"), [("1", "sequential"), ("2", "multithread")])
def test_run_threads_picks_the_executor(model_file, tmp_path, capsys, threads, executor):
    _, path = model_file
    x = np.random.default_rng(0).standard_normal((5, 16)).astype(np.float32)
    inputs = _inputs(tmp_path, x=x)
    assert main(["run", str(path), "--inputs", str(inputs), "--threads", threads, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["executor"] == executor


def test_lower_no_fuse_keeps_every_op(model_file, tmp_path, capsys):
    from rtsoa.graph.inspect import op_counts
    from rtsoa.graph.io import load_graph

    proto, path = model_file
    counts = {}
    for flag in ([], ["--no-fuse"]):
        lowered = tmp_path / f"mlp{len(flag)}.rtsoa"
        assert main(["lower", str(path), "-o", str(lowered), "--no-progress", "--json", *flag]) == 0
        assert json.loads(capsys.readouterr().out)["fused"] == (not flag)
        counts[bool(flag)] = op_counts(load_graph(lowered))
    assert counts[False] == {"MatMulBias": 2, "Gemm": 1}
    assert counts[True] == {"MatMul": 2, "Add": 2, "Relu": 2, "Gemm": 1}


def test_lower_no_winograd_keeps_the_direct_convolutions(tmp_path, capsys):
    from onnx import helper

    from rtsoa.graph.inspect import op_counts
    from rtsoa.graph.io import load_graph
    from rtsoa.testing.models import FLOAT
    from rtsoa.testing.models import model as build

    weights = (np.random.default_rng(2).standard_normal((64, 64, 3, 3)) / 24).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    proto = build([node], [("x", FLOAT, [1, 64, 14, 14])], [("y", FLOAT, None)], [("w", weights)])
    path = tmp_path / "conv.onnx"
    onnx.save(proto, path)
    counts = {}
    for flags in ([], ["--no-winograd"], ["--no-fuse"], ["--no-fuse", "--no-winograd"]):
        lowered = tmp_path / f"conv{'-'.join(flags)}.rtsoa"
        command = ["lower", str(path), "-o", str(lowered), "--no-progress", "--json", *flags]
        assert main(command) == 0
        summary = json.loads(capsys.readouterr().out)
        counts[" ".join(flags)] = (summary["winograd"], op_counts(load_graph(lowered)))
    assert counts == {
        "": (True, {"WinogradConv": 1}),
        "--no-winograd": (False, {"Conv": 1}),
        "--no-fuse": (False, {"Conv": 1}),
        "--no-fuse --no-winograd": (False, {"Conv": 1}),
    }


def _conv_file(tmp_path, seed, size):
    """(path of conv.onnx, a 64 -> 64 3 x 3 conv on size x size planes; path of its inputs)."""
    from onnx import helper

    from rtsoa.testing.models import FLOAT
    from rtsoa.testing.models import model as build

    rng = np.random.default_rng(seed)
    weights = (rng.standard_normal((64, 64, 3, 3)) / 24).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    dims = [1, 64, size, size]
    proto = build([node], [("x", FLOAT, dims)], [("y", FLOAT, None)], [("w", weights)])
    path = tmp_path / "conv.onnx"
    onnx.save(proto, path)
    x = rng.standard_normal(dims).astype(np.float32)
    return path, str(_inputs(tmp_path, x=x))


def test_run_no_winograd_lowers_the_convs_direct(tmp_path, capsys):
    """`rtsoa run model.onnx --no-winograd` computes the direct convs' bits; on a lowered
    graph the flag is an error naming what to do instead."""
    path, inputs = _conv_file(tmp_path, 3, 14)
    got = {}
    for flags in ([], ["--no-winograd"]):
        out = tmp_path / f"out{len(flags)}.npz"
        command = ["run", str(path), "--inputs", inputs, "--outputs", str(out), "--no-progress"]
        assert main([*command, *flags]) == 0
        with np.load(out) as arrays:
            got[bool(flags)] = arrays["y"]
    capsys.readouterr()
    lowered = tmp_path / "direct.rtsoa"
    assert main(["lower", str(path), "-o", str(lowered), "--no-winograd", "--no-progress"]) == 0
    out = tmp_path / "direct.npz"
    assert main(["run", str(lowered), "--inputs", inputs, "--outputs", str(out)]) == 0
    with np.load(out) as arrays:
        np.testing.assert_array_equal(got[True], arrays["y"])  # the direct conv's bits
    assert not np.array_equal(got[False], got[True])  # Winograd rounds otherwise
    scale = np.abs(got[True]).max()
    assert np.abs(got[False] - got[True]).max() <= 1e-5 * scale
    capsys.readouterr()
    assert main(["run", str(lowered), "--inputs", inputs, "--no-winograd"]) == 1
    assert "--no-winograd applies to an ONNX model" in capsys.readouterr().err


def test_run_intra_op_threads(tmp_path, capsys):
    """`rtsoa run --intra-op-threads N`: 1 computes each op whole, 2 shares a conv's parts
    (the same values within float reassociation); a bad count is a one-line error."""
    path, inputs = _conv_file(tmp_path, 5, 28)
    got = {}
    for threads in (1, 2):
        out = tmp_path / f"out{threads}.npz"
        command = ["run", str(path), "--inputs", inputs, "--outputs", str(out), "--no-progress"]
        assert main([*command, "--intra-op-threads", str(threads)]) == 0
        with np.load(out) as arrays:
            got[threads] = arrays["y"]
    scale = np.abs(got[1]).max()
    assert np.abs(got[2] - got[1]).max() <= 1e-5 * scale
    capsys.readouterr()
    assert main(["run", str(path), "--inputs", inputs, "--intra-op-threads", "0"]) == 1
    assert "intra_op_threads: 1 .. 256, got 0" in capsys.readouterr().err


def test_run_calibrates_before_the_timed_runs(tmp_path, capsys, monkeypatch):
    """With the intra-op pool left to rtsoa (two cores), the pool's timed trials come after the
    first run and before the --repeat ones, reported apart; with a thread count given there
    are none."""
    monkeypatch.setattr("rtsoa.ops.parts.os.sched_getaffinity", lambda pid: {0, 1})
    from rtsoa.runtime.resources import CALIBRATION_RUNS

    path, inputs = _conv_file(tmp_path, 7, 14)
    command = ["run", str(path), "--inputs", inputs, "--repeat", "3", "--no-progress"]
    for flags, runs, threads in (
        ([], 2 * CALIBRATION_RUNS, (1, 2)),
        (["--intra-op-threads", "1"], 0, (1,)),
    ):
        assert main([*command, *flags, "--json"]) == 0
        summary = json.loads(capsys.readouterr().out)
        assert summary["calibration_runs"] == runs and summary["repeat"] == 3
        assert summary["intra_op_threads"] in threads
    assert main(command) == 0
    assert f"{2 * CALIBRATION_RUNS} calibration run(s)" in capsys.readouterr().out


def test_run_lowers_an_onnx_file_on_the_fly(model_file, tmp_path, capsys):
    proto, path = model_file
    x = np.ones((2, 16), np.float32)
    out = tmp_path / "out.npz"
    assert (
        main(["run", str(path), "--inputs", str(_inputs(tmp_path, x=x)), "--outputs", str(out)])
        == 0
    )
    assert "hazards 0" in capsys.readouterr().out
    with np.load(out) as got:
        np.testing.assert_allclose(got["y"], run_onnxruntime(proto, {"x": x})["y"], 1e-4, 1e-5)


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({}, "missing input(s) ['x']"),
        ({"x": np.ones((2, 16), np.float32), "q": np.ones(1)}, "unexpected input(s) ['q']"),
        ({"x": np.ones((2, 16), np.int64)}, "input 'x' has dtype int64"),
        ({"x": np.ones((2, 7), np.float32)}, "input 'x' has shape (2, 7)"),
    ],
)
def test_bad_inputs_are_one_line_errors_naming_the_input(
    model_file, tmp_path, capsys, arrays, message
):
    _, path = model_file
    code = main(["run", str(path), "--inputs", str(_inputs(tmp_path, **arrays))])
    assert code == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_not_an_npz_and_not_a_model(tmp_path, capsys):
    bad = tmp_path / "in.npz"
    bad.write_text("nope")
    onnx_bad = tmp_path / "m.onnx"
    onnx_bad.write_bytes(b"\x00garbage")
    assert main(["run", str(onnx_bad)]) == 1
    assert "not a readable ONNX model" in capsys.readouterr().err
    assert main(["lower", str(tmp_path / "missing.onnx"), "-o", str(tmp_path / "o")]) == 1
    assert "no such ONNX file" in capsys.readouterr().err


def test_lower_refuses_to_overwrite_a_foreign_directory(model_file, tmp_path, capsys):
    _, path = model_file
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    assert main(["lower", str(path), "-o", str(foreign), "--no-progress"]) == 1
    assert (foreign / "notes.txt").read_text() == "keep me"
    assert "error" in capsys.readouterr().err


@pytest.mark.parametrize("damage", ["truncated", "empty", "bad member", "npy"])
def test_a_damaged_inputs_archive_is_a_one_line_error(model_file, tmp_path, capsys, damage):
    _, path = model_file
    inputs = _inputs(tmp_path, x=np.ones((2, 16), np.float32))
    data = inputs.read_bytes()
    if damage == "truncated":
        inputs.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        inputs.write_bytes(b"")
    elif damage == "bad member":  # the zip directory is intact, a member's bytes are not
        start = data.index(b"\x93NUMPY") + 200
        inputs.write_bytes(data[:start] + bytes(32) + data[start + 32 :])
    else:
        np.save(inputs.with_suffix(".npy"), np.ones((2, 16), np.float32))
        inputs = inputs.with_suffix(".npy")
    assert main(["run", str(path), "--inputs", str(inputs)]) == 1
    err = capsys.readouterr().err
    assert "not a readable .npz file" in err and err.count("\n") == 1


@pytest.mark.parametrize("names", [("file", "allow_pickle"), ("allow_pickle", "file")])
def test_inputs_and_outputs_named_like_savez_arguments_round_trip(tmp_path, capsys, names):
    """np.savez takes array names as keyword arguments: an output named `file` collided with
    its path argument (TypeError) and one named `allow_pickle` was silently dropped."""
    from onnx import helper

    from rtsoa.testing.models import FLOAT, model

    given, made = names
    proto = model(
        [helper.make_node("Neg", [given], [made])],
        [(given, FLOAT, [2, 3])],
        [(made, FLOAT, [2, 3])],
    )
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    inputs = tmp_path / "in.npz"
    member = io.BytesIO()
    np.save(member, x)
    with zipfile.ZipFile(inputs, "w") as archive:  # np.savez cannot name an array `file`
        archive.writestr(f"{given}.npy", member.getvalue())
    out = tmp_path / "out.npz"
    assert main(["run", str(path), "--inputs", str(inputs), "--outputs", str(out)]) == 0
    capsys.readouterr()
    with np.load(out) as got:
        assert got.files == [made]
        np.testing.assert_array_equal(got[made], -x)
