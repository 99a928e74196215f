"""String tensors as host values (rtsoa.host): Cast / CastLike to and from strings, Equal,
Identity, StringConcat, StringSplit, StringNormalizer, RegexFullMatch, ai.onnx.ml
LabelEncoder and TfIdfVectorizer, judged by onnxruntime (single thread) over what the node
suite does not cover (attributes, dtypes, zero-size and broadcast shapes); the split of a
model into host steps around its device graph; the input checks of string inputs; and the
refusals at lowering naming the op, the node and what is wrong.
"""

import numpy as np
import pytest
from onnx import TensorProto, helper

from rtsoa.errors import LoweringError, ModelInputError
from rtsoa.graph.graph import ExecuteGraph
from rtsoa.host.program import HostModel
from rtsoa.lowering import lower
from rtsoa.runtime.model import ModelExecutor
from rtsoa.testing.models import model, run_onnxruntime

STRING, FLOAT, DOUBLE = TensorProto.STRING, TensorProto.FLOAT, TensorProto.DOUBLE
INT64, BOOL = TensorProto.INT64, TensorProto.BOOL


def texts(*values, shape=None):
    """An object array of str (the numpy form of an ONNX string tensor)."""
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out.reshape(shape if shape is not None else (len(values),))


def proto(nodes, inputs, outputs, opset=20, initializers=(), ml=None):
    built = model(nodes, inputs, outputs, initializers, opset=opset)
    if ml is not None:
        built.opset_import.append(helper.make_opsetid("ai.onnx.ml", ml))
    return built


def run_rtsoa(built, feeds):
    with ModelExecutor(lower(built)) as executor:
        return executor.execute_sync(feeds)


def same_as_onnxruntime(built, feeds):
    ours, theirs = run_rtsoa(built, feeds), run_onnxruntime(built, feeds)
    assert list(ours) == list(theirs)
    for name, want in theirs.items():
        have = ours[name]
        assert have.dtype == want.dtype, name
        assert have.shape == want.shape, name
        np.testing.assert_array_equal(have, want, err_msg=name)
    return ours


def one(op, x_type, y_type, attributes=None, opset=20, inputs=("x",), outputs=("y",), ml=None):
    """A one-node model: inputs of x_type (rank unknown), outputs of y_type."""
    y_types = y_type if isinstance(y_type, tuple) else (y_type,) * len(outputs)
    x_types = x_type if isinstance(x_type, tuple) else (x_type,) * len(inputs)
    domain = "ai.onnx.ml" if ml is not None else ""
    node = helper.make_node(op, list(inputs), list(outputs), domain=domain, **(attributes or {}))
    return proto(
        [node],
        [(name, kind, None) for name, kind in zip(inputs, x_types, strict=True)],
        [(name, kind, None) for name, kind in zip(outputs, y_types, strict=True)],
        opset=opset,
        ml=ml,
    )


# -- Cast -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind", [np.float32, np.float64, np.float16, np.int8, np.int32, np.int64, np.uint8, np.bool_]
)
def test_cast_numbers_to_strings_as_onnxruntime(kind):
    values = [0.1, 1.0, -0.0, 1e10, 1e-7, 3.14159265, 123456789.0, np.nan, np.inf, -np.inf, 7]
    if np.dtype(kind).kind == "f":
        with np.errstate(over="ignore"):  # 1e10 is inf in float16
            x = np.array(values, dtype=np.float64).astype(kind)
    else:
        x = np.array([0, 1, 5, 100, 127, -3 if np.dtype(kind).kind == "i" else 3]).astype(kind)
    code = helper.np_dtype_to_tensor_dtype(np.dtype(kind))
    same_as_onnxruntime(one("Cast", code, STRING, {"to": STRING}), {"x": x})


@pytest.mark.parametrize(
    ("kind", "code"),
    [(np.float32, FLOAT), (np.float64, DOUBLE), (np.int32, TensorProto.INT32), (np.int64, INT64)]
    + [(np.uint8, TensorProto.UINT8), (np.int8, TensorProto.INT8), (np.bool_, BOOL)],
)
def test_cast_strings_to_numbers_as_onnxruntime(kind, code):
    words = ["1.5", " 2", "2 ", "1e3", "-3", "+4", "300", "-1", "12", "1.5abc", "0"]
    if np.dtype(kind).kind == "f":
        words += ["INF", "-inf", "nan", "0x10", "1e40", "infinity"]
    x = texts(*words)
    got = same_as_onnxruntime(one("Cast", STRING, code, {"to": code}), {"x": x})
    assert got["y"].dtype == kind


def test_cast_shapes_zero_size_and_scalar_and_cast_like():
    built = one("Cast", STRING, FLOAT, {"to": FLOAT})
    for x in (texts(shape=(0, 3)), texts("2.5", shape=())):
        same_as_onnxruntime(built, {"x": x})
    like = one("CastLike", (STRING, INT64), INT64, inputs=("x", "t"))
    feeds = {"x": texts("7", "-2", shape=(2, 1)), "t": np.zeros(1, np.int64)}
    same_as_onnxruntime(like, feeds)
    back = one("CastLike", (FLOAT, STRING), STRING, inputs=("x", "t"))
    same_as_onnxruntime(back, {"x": np.array([0.5, 2.0], np.float32), "t": texts("")})


def test_cast_of_a_string_that_is_no_number_names_the_node_and_element():
    built = one("Cast", STRING, INT64, {"to": INT64})
    built.graph.node[0].name = "parse"
    with pytest.raises(ModelInputError, match=r"Cast node 'parse' .*element 1 'abc'"):
        run_rtsoa(built, {"x": texts("1", "abc")})


def test_cast_to_string_from_a_narrow_type_is_refused_at_lowering():
    built = one("Cast", TensorProto.BFLOAT16, STRING, {"to": STRING})
    with pytest.raises(LoweringError, match=r"Cast node .*bfloat16 cannot be cast"):
        lower(built)


# -- Equal, Identity, StringConcat ----------------------------------------------------------------


def test_equal_and_concat_broadcast_and_zero_size_as_onnxruntime():
    a = texts("a", "b", "", "é", shape=(2, 2))
    b = texts("a", "", shape=(2, 1))
    equal = one("Equal", STRING, BOOL, inputs=("x", "z"), opset=19)
    concat = one("StringConcat", STRING, STRING, inputs=("x", "z"))
    identity = one("Identity", STRING, STRING)
    for feeds in ({"x": a, "z": b}, {"x": texts(shape=(0, 2)), "z": texts("q", shape=(1, 1))}):
        same_as_onnxruntime(equal, feeds)
        same_as_onnxruntime(concat, feeds)
    same_as_onnxruntime(identity, {"x": a})


def test_shapes_that_do_not_broadcast_name_the_node():
    with pytest.raises(ModelInputError, match=r"StringConcat node .*\(2,\) and \(3,\)"):
        run_rtsoa(
            one("StringConcat", STRING, STRING, inputs=("x", "z")),
            {
                "x": texts("a", "b"),
                "z": texts("a", "b", "c"),
            },
        )


def test_equal_of_a_string_and_a_number_is_refused_at_lowering():
    built = one("Equal", (STRING, INT64), BOOL, inputs=("x", "z"), opset=19)
    with pytest.raises(LoweringError, match=r"Equal node .*compares string with int64"):
        lower(built)


# -- StringSplit, StringNormalizer, RegexFullMatch ------------------------------------------------


@pytest.mark.parametrize(
    "attributes", [{}, {"delimiter": ","}, {"delimiter": "--", "maxsplit": 1}, {"maxsplit": 0}]
)
def test_string_split_as_onnxruntime(attributes):
    x = texts("a,b,,c", " x  y z ", "", "--a--b--", "one", "1,2", shape=(3, 2))
    built = one("StringSplit", STRING, (STRING, INT64), attributes, outputs=("y", "n"))
    same_as_onnxruntime(built, {"x": x})
    same_as_onnxruntime(built, {"x": texts(shape=(0,))})


@pytest.mark.parametrize(
    "attributes",
    [
        {"case_change_action": "LOWER", "stopwords": ["The", "a"]},
        {"case_change_action": "UPPER", "is_case_sensitive": 1, "stopwords": ["The", "a"]},
        {"case_change_action": "LOWER", "locale": "en_US"},
    ],
)
def test_string_normalizer_as_onnx_reference(attributes):
    # onnxruntime needs the locale installed to build the op, which this machine may lack:
    # onnx.reference judges, on single ASCII words (where it and onnxruntime agree)
    from onnx.reference import ReferenceEvaluator

    built = one("StringNormalizer", STRING, STRING, attributes, opset=10)
    for x in (texts("The", "the", "a", "Word", "A"), texts("the", "THE", shape=(1, 2))):
        [want] = ReferenceEvaluator(built).run(None, {"x": x})
        have = run_rtsoa(built, {"x": x})["y"]
        assert have.shape == want.shape
        assert have.tolist() == want.tolist()


def test_string_normalizer_changes_case_as_unicode_does_and_ignores_it_for_stop_words():
    built = one("StringNormalizer", STRING, STRING, {"case_change_action": "UPPER"}, opset=10)
    have = run_rtsoa(built, {"x": texts("straße", "ünï code", "ǆ")})["y"]
    assert have.tolist() == ["STRASSE", "ÜNÏ CODE", "Ǆ"]
    # case-insensitive stop words without a case change (onnx.reference compares them
    # exactly here; the definition and onnxruntime ignore case)
    built = one("StringNormalizer", STRING, STRING, {"stopwords": ["THE"]}, opset=10)
    assert run_rtsoa(built, {"x": texts("The", "cat", "the")})["y"].tolist() == ["cat"]


def test_string_normalizer_refusals():
    built = one("StringNormalizer", STRING, STRING, {"locale": "tr_TR"}, opset=10)
    with pytest.raises(LoweringError, match=r"StringNormalizer node .*locale 'tr_TR'"):
        lower(built)
    built = one("StringNormalizer", STRING, STRING, {}, opset=10)
    with pytest.raises(ModelInputError, match=r"StringNormalizer node .*\[C\] or \[1, C\]"):
        run_rtsoa(built, {"x": texts("a", "b", "c", "d", shape=(2, 2))})


@pytest.mark.parametrize(
    "pattern", [r"[a-z]+\d*", r"(ab|cd)+", r"\w+@\w+\.com", r".*", r"x{2,3}", r"(?i)abc"]
)
def test_regex_full_match_as_onnxruntime(pattern):
    x = texts("abc", "ab12", "abcd", "xx", "xxxx", "me@site.com", "", "ABC", "é", shape=(3, 3))
    same_as_onnxruntime(one("RegexFullMatch", STRING, BOOL, {"pattern": pattern}), {"x": x})


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        (r"a(?=b)", "lookaround"),
        (r"(a)\1", "groupref"),
        (r"[[:alpha:]]+", r"\[:alpha:\]"),
        (r"\pL+", r"\\\\p"),
        (r"(unclosed", "not a valid regular expression"),
    ],
)
def test_regex_patterns_python_reads_otherwise_are_refused(pattern, reason):
    with pytest.raises(LoweringError, match=rf"RegexFullMatch node .*{reason}"):
        lower(one("RegexFullMatch", STRING, BOOL, {"pattern": pattern}))


# -- LabelEncoder, TfIdfVectorizer ----------------------------------------------------------------


def test_label_encoder_int_to_string_and_float_keys_as_onnxruntime():
    ints = one(
        "LabelEncoder",
        INT64,
        STRING,
        {"keys_int64s": [1, 5, -2], "values_strings": ["one", "five", "minus"]},
        ml=4,
    )
    same_as_onnxruntime(ints, {"x": np.array([[1, 2], [-2, 5]], np.int64)})
    floats = one(
        "LabelEncoder",
        FLOAT,
        INT64,
        {"keys_floats": [0.5, np.nan], "values_int64s": [7, 9], "default_int64": -5},
        ml=4,
    )
    same_as_onnxruntime(floats, {"x": np.array([0.5, np.nan, 1.0, 0.0], np.float32)})


def test_label_encoder_refusals():
    both = {"keys_strings": ["a"], "keys_int64s": [1], "values_int64s": [0]}
    with pytest.raises(LoweringError, match=r"LabelEncoder node .*exactly one of"):
        lower(one("LabelEncoder", STRING, INT64, both, ml=4))
    wrong = {"keys_strings": ["a"], "values_int64s": [0]}
    with pytest.raises(LoweringError, match=r"LabelEncoder node .*input X is int64"):
        lower(one("LabelEncoder", INT64, INT64, wrong, ml=4))


TFIDF = {
    "max_gram_length": 2,
    "min_gram_length": 1,
    "max_skip_count": 1,
    "ngram_counts": [0, 3],
    "ngram_indexes": [0, 1, 2, 3, 4],
}


@pytest.mark.parametrize(
    "extra",
    [
        {"mode": "TF"},
        {"mode": "IDF", "weights": [0.5, 1.0, 2.0, 3.0, 4.0]},
        {"mode": "TFIDF", "weights": [0.5, 1.0, 2.0, 3.0, 4.0]},
        {"mode": "IDF"},
    ],
)
def test_tfidf_vectorizer_on_strings_and_ints_as_onnxruntime(extra):
    words = one(
        "TfIdfVectorizer",
        STRING,
        FLOAT,
        {**TFIDF, **extra, "pool_strings": ["a", "b", "c", "a", "b", "b", "c"]},
        opset=9,
    )
    same_as_onnxruntime(words, {"x": texts("a", "b", "a", "c", "b", "c", "a", "b", shape=(2, 4))})
    same_as_onnxruntime(words, {"x": texts("a", "x", "b")})
    numbers = one(
        "TfIdfVectorizer",
        TensorProto.INT32,
        FLOAT,
        {**TFIDF, **extra, "pool_int64s": [1, 2, 3, 1, 2, 2, 3]},
        opset=9,
    )
    same_as_onnxruntime(numbers, {"x": np.array([[1, 2, 1, 3], [2, 3, 1, 2]], np.int32)})


def test_tfidf_vectorizer_bad_attributes_are_refused():
    bad = {**TFIDF, "mode": "TF", "pool_int64s": [1, 2, 3, 1], "ngram_indexes": [0, 1, 2]}
    with pytest.raises(LoweringError, match=r"TfIdfVectorizer node .*not a multiple of 2"):
        lower(one("TfIdfVectorizer", INT64, FLOAT, bad, opset=9))
    with pytest.raises(LoweringError, match=r"TfIdfVectorizer node .*mode 'BM25'"):
        lower(one("TfIdfVectorizer", INT64, FLOAT, {**TFIDF, "mode": "BM25"}, opset=9))


# -- the split around the device graph ------------------------------------------------------------


def _mixed():
    """Strings parsed (prologue), a device Add, the sum formatted (epilogue) and compared."""
    nodes = [
        helper.make_node("Cast", ["s"], ["x"], to=FLOAT),
        helper.make_node("Add", ["x", "b"], ["y"]),
        helper.make_node("Cast", ["y"], ["t"], to=STRING),
        helper.make_node("StringConcat", ["t", "unit"], ["label"]),
        helper.make_node("Equal", ["label", "s"], ["same"]),
    ]
    return proto(
        nodes,
        [("s", STRING, ["n"]), ("b", FLOAT, ["n"])],
        [("y", FLOAT, ["n"]), ("label", STRING, ["n"]), ("same", BOOL, ["n"])],
        initializers=[("unit", texts(" kg"))],
    )


def test_a_model_runs_host_steps_before_and_after_its_device_graph():
    built = _mixed()
    lowered = lower(built)
    assert isinstance(lowered, HostModel)
    assert [step.op for step in lowered.program.prologue] == ["Cast"]
    assert [step.op for step in lowered.program.epilogue] == ["Cast", "StringConcat", "Equal"]
    assert lowered.program.device_inputs == ("b", "x")
    feeds = {"s": texts("1.5", "2", "1e3"), "b": np.array([1, -2, 0.25], np.float32)}
    got = same_as_onnxruntime(built, feeds)
    assert got["label"].tolist() == ["2.5 kg", "0 kg", "1000.25 kg"]


def test_a_model_without_strings_lowers_as_before():
    built = one("Relu", FLOAT, FLOAT)
    assert isinstance(lower(built), ExecuteGraph)


def test_a_string_op_between_two_device_segments_is_refused_naming_both_nodes():
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="first"),
        helper.make_node("Cast", ["r"], ["s"], to=STRING, name="format"),
        helper.make_node("Cast", ["s"], ["f"], to=FLOAT, name="parse"),
        helper.make_node("Neg", ["f"], ["y"], name="second"),
    ]
    built = proto(nodes, [("x", FLOAT, [2])], [("y", FLOAT, [2])])
    with pytest.raises(
        LoweringError, match=r"Cast node 'parse' .*between two parts .*Neg node 'second'"
    ):
        lower(built)


def test_an_op_without_string_support_is_refused_naming_the_node():
    node = helper.make_node("Concat", ["x", "x"], ["y"], axis=0, name="join")
    built = proto([node], [("x", STRING, [2])], [("y", STRING, [4])])
    with pytest.raises(LoweringError, match=r"Concat node 'join' .*'x' is a string tensor"):
        lower(built)


def test_string_values_in_a_subgraph_are_refused():
    branch = helper.make_graph(
        [helper.make_node("Identity", ["s"], ["o"])],
        "branch",
        [],
        [helper.make_tensor_value_info("o", STRING, [1])],
    )
    node = helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)
    built = proto([node], [("c", BOOL, []), ("s", STRING, [1])], [("y", STRING, [1])])
    with pytest.raises(LoweringError, match=r"string"):
        lower(built)


# -- string inputs: checks ------------------------------------------------------------------------


def test_string_inputs_are_checked_with_typed_errors():
    built = proto(
        [helper.make_node("StringConcat", ["x", "z"], ["y"])],
        [("x", STRING, ["n", 2]), ("z", STRING, ["n", 2])],
        [("y", STRING, ["n", 2])],
    )
    with ModelExecutor(lower(built)) as executor:
        good = texts("a", "b", "c", "d", shape=(2, 2))
        unicode = np.array([["p", "q"], ["r", "s"]])  # <U1: accepted as strings
        assert executor.execute_sync({"x": good, "z": unicode})["y"].tolist() == [
            ["ap", "bq"],
            ["cr", "ds"],
        ]
        cases = [
            ({"x": np.zeros((2, 2)), "z": good}, r"input 'x' has dtype float64"),
            ({"x": texts("a", 1, "c", "d", shape=(2, 2)), "z": good}, r"'x' element 1 is a int"),
            ({"x": texts("a", "b"), "z": good}, r"input 'x' has rank 1, the model takes 2"),
            ({"x": good, "z": texts(*"abcdef", shape=(3, 2))}, r"symbol 'n' is 2"),
            ({"x": good}, r"missing input\(s\) \['z'\]"),
            ({"x": good, "z": good, "w": good}, r"unexpected input\(s\) \['w'\]"),
        ]
        for feeds, message in cases:
            with pytest.raises(ModelInputError, match=message):
                executor.execute_sync(feeds)
        assert executor.describe()["inputs"][0] == {
            "name": "x",
            "dtype": "object",
            "shape": ["n", 2],
        }


def test_a_numeric_input_given_strings_is_refused():
    built = one("TfIdfVectorizer", INT64, FLOAT, {**TFIDF, "mode": "TF", "pool_int64s": [1] * 7})
    built.opset_import[0].version = 9
    with pytest.raises(ModelInputError, match=r"input 'x' holds strings"):
        run_rtsoa(built, {"x": texts("1", "2")})


def test_inference_session_and_onnx_backend_take_strings():
    import rtsoa.backend
    from rtsoa.runtime.inference import InferenceSession

    built = one("StringConcat", STRING, STRING, inputs=("x", "z"))
    with InferenceSession(built) as session:
        assert session.get_inputs()[0].type == "tensor(string)"
        [y] = session.run(None, {"x": texts("a"), "z": texts("b")})
        assert y.tolist() == ["ab"]
    node = helper.make_node("StringConcat", ["x", "z"], ["y"])
    [y] = rtsoa.backend.run_node(node, [np.array(["u", "v"]), np.array(["1", "2"])])
    assert y.tolist() == ["u1", "v2"]


def test_inputs_and_constants_returned_as_outputs_are_copies():
    unit = texts(" kg")
    built = proto(
        [helper.make_node("StringConcat", ["x", "unit"], ["y"])],
        [("x", STRING, [1])],
        [("y", STRING, [1]), ("x", STRING, [1]), ("unit", STRING, [1])],
        initializers=[("unit", unit)],
    )
    x = texts("5")
    with ModelExecutor(lower(built)) as executor:
        first = executor.execute_sync({"x": x})
        assert [first[name].tolist() for name in ("y", "x", "unit")] == [["5 kg"], ["5"], [" kg"]]
        first["unit"][0] = "changed"
        first["x"][0] = "changed"
        again = executor.execute({"x": x}).result()
    assert again["y"].tolist() == ["5 kg"] and again["unit"].tolist() == [" kg"]
    assert x.tolist() == ["5"]


def test_rtsoa_lower_refuses_a_model_with_host_steps(tmp_path, capsys):
    import onnx

    from rtsoa.cli import main

    path = tmp_path / "concat.onnx"
    onnx.save(one("StringConcat", STRING, STRING, inputs=("x", "z")), path)
    assert main(["lower", str(path), "-o", str(tmp_path / "out.rtsoa"), "--no-progress"]) == 1
    assert "string values, which run as host steps" in capsys.readouterr().err
    assert not (tmp_path / "out.rtsoa").exists()


@pytest.mark.parametrize(
    "attributes",
    [
        {"value_string": "ab"},
        {"value_strings": ["ab", "c"]},
        {"value": helper.make_tensor("v", STRING, [2, 1], [b"ab", "\u00e9".encode()])},
    ],
)
def test_string_constants_as_onnxruntime(attributes):
    built = proto(
        [
            helper.make_node("Constant", [], ["c"], **attributes),
            helper.make_node("StringConcat", ["x", "c"], ["y"]),
        ],
        [("x", STRING, None)],
        [("y", STRING, None)],
    )
    same_as_onnxruntime(built, {"x": texts("q", "r")})
