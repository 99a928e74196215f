"""ZipMap (ai.onnx.ml) as a host step: probabilities [N, C] become a list of N dicts {label:
probability}, judged by onnxruntime (same labels, order and float32 values); its output kind
through the model API's description, `rtsoa run --outputs` and batch jobs; bad input named."""

import hashlib
import json

import numpy as np
import pytest
from onnx import TensorProto, helper

from rtsoa.batch import Settings, collect_jobs, run_job
from rtsoa.cli import main
from rtsoa.errors import LoweringError, ModelInputError
from rtsoa.runtime.inference import InferenceSession
from rtsoa.runtime.npz import read_inputs
from rtsoa.testing.models import run_onnxruntime

ML = "ai.onnx.ml"
INT_LABELS = [7, -2, 40]
STRING_LABELS = ["émeu", "cat", "Dog"]  # not in sorted order


def zipmap_model(labels, before=None, x_shape=("N", 3)):
    """X -> [an op `before`] -> ZipMap -> Z; also the probabilities P when `before` is given."""
    key = TensorProto.STRING if isinstance(labels[0], str) else TensorProto.INT64
    name = "classlabels_strings" if key == TensorProto.STRING else "classlabels_int64s"
    nodes, source, outputs = [], "X", []
    if before is not None:
        nodes.append(helper.make_node(before, ["X"], ["P"], name="scores"))
        source = "P"
        outputs.append(helper.make_tensor_value_info("P", TensorProto.FLOAT, None))
    nodes.append(
        helper.make_node("ZipMap", [source], ["Z"], name="zip", domain=ML, **{name: labels})
    )
    maps = helper.make_sequence_type_proto(
        helper.make_map_type_proto(key, helper.make_tensor_type_proto(TensorProto.FLOAT, None))
    )
    graph = helper.make_graph(
        nodes,
        "zipmap",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(x_shape))],
        [helper.make_value_info("Z", maps)] + outputs,
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(ML, 3)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    return model


def probabilities(rows=5, seed=0):
    values = np.random.default_rng(seed).random((rows, 3)).astype(np.float32)
    return values / values.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("labels", [INT_LABELS, STRING_LABELS], ids=["int64", "string"])
def test_zipmap_gives_onnxruntimes_maps(labels):
    model = zipmap_model(labels)
    x = probabilities()
    with InferenceSession(model) as session:
        (got,) = session.run(None, {"X": x})
        (info,) = session.get_outputs()
    want = run_onnxruntime(model, {"X": x})["Z"]
    assert isinstance(got, list) and got == want  # keys and float32 values
    assert [list(row) for row in got] == [list(row) for row in want]  # the keys' order
    assert [list(row) for row in got] == [sorted(labels)] * len(x)  # sorted, not by column
    assert all(type(key) is type(labels[0]) for key in got[0])
    key = "string" if isinstance(labels[0], str) else "int64"
    assert info.name == "Z" and info.dtype is None and info.type == f"seq(map({key},tensor(float)))"


def test_zipmap_after_device_ops_and_of_one_row():
    model = zipmap_model(INT_LABELS, before="Softmax")
    x = np.random.default_rng(1).normal(size=(4, 3)).astype(np.float32)
    with InferenceSession(model) as session:
        maps, scores = session.run(None, {"X": x})
        description = session.describe()["outputs"]
    want = run_onnxruntime(model, {"X": x})
    np.testing.assert_allclose(scores, want["P"], rtol=1e-6, atol=1e-7)
    assert [list(row) for row in maps] == [list(row) for row in want["Z"]]
    for have, expected in zip(maps, want["Z"], strict=True):
        np.testing.assert_allclose(list(have.values()), list(expected.values()), rtol=1e-6)
    assert description[0] == {
        "name": "Z",
        "dtype": None,
        "shape": None,
        "type": "seq(map(int64,tensor(float)))",
    }
    one = zipmap_model(INT_LABELS, x_shape=(3,))  # [C] is one row, as onnxruntime reads it
    row = probabilities(1)[0]
    with InferenceSession(one) as session:
        assert session.run(None, {"X": row})[0] == run_onnxruntime(one, {"X": row})["Z"]


def test_bad_probabilities_are_refused_naming_the_node():
    model = zipmap_model(INT_LABELS, x_shape=(None, None))
    with InferenceSession(model) as session:
        with pytest.raises(ModelInputError, match=r"ZipMap node 'zip'.*4 columns.*3 labels"):
            session.run(None, {"X": np.zeros((2, 4), np.float32)})
        with pytest.raises(ModelInputError, match=r"ZipMap node 'zip'.*2 columns.*3 labels"):
            session.run(None, {"X": np.zeros((2, 2), np.float32)})
    cube = zipmap_model(INT_LABELS, x_shape=(1, 2, 3))
    with InferenceSession(cube) as session:
        with pytest.raises(ModelInputError, match=r"ZipMap node 'zip'.*shape \(1, 2, 3\)"):
            session.run(None, {"X": np.zeros((1, 2, 3), np.float32)})


def test_zipmap_attributes_and_input_type_are_checked_at_lowering():
    with pytest.raises(LoweringError, match=r"ZipMap node 'zip'.*not distinct"):
        InferenceSession(zipmap_model([1, 2, 1]))
    both = zipmap_model(INT_LABELS)
    both.graph.node[0].attribute.append(helper.make_attribute("classlabels_strings", ["a"]))
    with pytest.raises(LoweringError, match=r"ZipMap node 'zip'.*exactly one of"):
        InferenceSession(both)
    double = zipmap_model(INT_LABELS)
    double.graph.input[0].type.tensor_type.elem_type = TensorProto.DOUBLE
    with pytest.raises(LoweringError, match=r"ZipMap node 'zip'.*float32 probabilities"):
        InferenceSession(double)
    wrong_key = zipmap_model(STRING_LABELS)  # declared int64 keys, labelled by strings
    wrong_key.graph.output[0].type.sequence_type.elem_type.map_type.key_type = TensorProto.INT64
    with pytest.raises(LoweringError, match=r"declared seq\(map\(int64.*makes seq\(map\(string"):
        InferenceSession(wrong_key)


@pytest.fixture
def string_zipmap(tmp_path):
    path = tmp_path / "zipmap.onnx"
    path.write_bytes(zipmap_model(STRING_LABELS, before="Softmax").SerializeToString())
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, X=np.random.default_rng(2).normal(size=(6, 3)).astype(np.float32))
    return path, inputs


def test_run_writes_maps_as_their_keys_and_values(string_zipmap, tmp_path, capsys):
    path, inputs = string_zipmap
    out = tmp_path / "out.npz"
    code = main(["run", str(path), "--inputs", str(inputs), "--outputs", str(out), "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["outputs"] == {"Z": [[6], "map"], "P": [[6, 3], "float32"]}
    saved = read_inputs(out)
    assert sorted(saved) == ["P", "Z.keys", "Z.values"]
    assert saved["Z.keys"].tolist() == sorted(STRING_LABELS) and saved["Z.keys"].dtype.kind == "U"
    want = run_onnxruntime(zipmap_model(STRING_LABELS, before="Softmax"), read_inputs(inputs))
    expected = np.array([list(row.values()) for row in want["Z"]], dtype=np.float32)
    np.testing.assert_allclose(saved["Z.values"], expected, rtol=1e-6)
    order = [STRING_LABELS.index(label) for label in sorted(STRING_LABELS)]
    np.testing.assert_array_equal(saved["Z.values"], saved["P"][:, order])  # the same values


def test_inspect_names_the_maps_type(string_zipmap, capsys):
    path, _ = string_zipmap
    assert main(["inspect", str(path), "--json"]) == 0
    outputs = json.loads(capsys.readouterr().out)["outputs"]
    assert outputs[0] == {"name": "Z", "dtype": "seq(map(string,tensor(float)))", "dims": None}


def test_batch_job_checksums_the_maps_as_files_hold_them(string_zipmap):
    path, inputs = string_zipmap
    (job,) = collect_jobs([str(path)])
    row = run_job(job._replace(inputs=str(inputs)), Settings())
    assert row["status"] == "ok", row["message"]
    with InferenceSession(str(path)) as session:
        maps, scores = session.run(None, read_inputs(inputs))
    digest = hashlib.sha256()
    digest.update(b"P" + scores.tobytes())
    digest.update(b"Z.keys" + b"".join(label.encode() + b"\0" for label in sorted(STRING_LABELS)))
    values = np.array([list(row.values()) for row in maps], dtype=np.float32)
    digest.update(b"Z.values" + values.tobytes())
    assert row["checksum"] == int.from_bytes(digest.digest()[:8], "little")
