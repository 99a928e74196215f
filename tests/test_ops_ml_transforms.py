"""The ai.onnx.ml feature transforms and linear models on one-node models, judged by
onnxruntime; unsupported attributes and bad shapes refused at lowering naming the node."""

import numpy as np
import pytest
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator
from test_ops_ml import ml_model, refused, rtsoa_outputs, same_as_onnxruntime

from rtsoa.errors import RtsoaError

FLOAT, INT64, DOUBLE = 1, 7, 11
rng = np.random.default_rng(40)


def data(shape, dtype=np.float32, nan=False):
    x = rng.normal(size=shape) * 3
    if nan:
        x[rng.random(shape) < 0.2] = np.nan
    if np.dtype(dtype).kind == "i":
        return np.round(x).astype(dtype)
    return x.astype(dtype)


def judge(op, feeds, outputs, attributes):
    return same_as_onnxruntime(ml_model(op, feeds, outputs, attributes, 1), feeds)


def judge_by_reference(op, feeds, outputs, attributes):
    """Element types onnxruntime does not run (float64 Binarizer, Imputer): onnx.reference."""
    model = ml_model(op, feeds, outputs, attributes, 1)
    want = ReferenceEvaluator(model).run(None, feeds)
    for have, expected in zip(rtsoa_outputs(model, feeds), want, strict=True):
        assert have.dtype == expected.dtype and have.shape == expected.shape
        np.testing.assert_array_equal(have, expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_binarizer(dtype):
    x = data((4, 5), dtype)  # onnxruntime refuses NaN here
    x[0, :3] = [0.5, -0.0, 0.0]
    kind, check = (FLOAT, judge) if dtype == np.float32 else (DOUBLE, judge_by_reference)
    check("Binarizer", {"X": x}, [("Y", kind)], {"threshold": 0.5})
    check("Binarizer", {"X": x}, [("Y", kind)], {})


@pytest.mark.parametrize("shape", [(3, 5), (2, 3, 5), (5,)])
def test_array_feature_extractor_takes_the_last_axis(shape):
    feeds = {"X": data(shape), "Y": np.array([4, 0, 4, 2], dtype=np.int64)}
    judge("ArrayFeatureExtractor", feeds, [("Z", FLOAT)], {})
    feeds = {"X": data(shape, np.int64), "Y": np.array([[1], [3]], dtype=np.int64)}
    judge("ArrayFeatureExtractor", feeds, [("Z", INT64)], {})


@pytest.mark.parametrize("index", [5, -1])
def test_array_feature_extractor_index_out_of_range_fails_the_run(index):
    feeds = {"X": data((3, 5)), "Y": np.array([0, index], dtype=np.int64)}
    model = ml_model("ArrayFeatureExtractor", feeds, [("Z", FLOAT)], {}, 1)
    with pytest.raises(RtsoaError, match="Gather"):
        rtsoa_outputs(model, feeds)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32])
def test_scaler_per_feature_and_single(dtype):
    x = data((6, 3), dtype)
    judge("Scaler", {"X": x}, [("Y", FLOAT)], {"offset": [0.5, -1.0, 2.0], "scale": [2, 0.5, 3]})
    judge("Scaler", {"X": x}, [("Y", FLOAT)], {"offset": [1.5], "scale": [0.25]})


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_normalizer(norm, dtype):
    x = data((5, 4), dtype)
    x[:, 0] = np.abs(x[:, 0]) + 1  # MAX divides by the row's largest value: not 0
    judge("Normalizer", {"X": x}, [("Y", FLOAT)], {"norm": norm})


@pytest.mark.parametrize("targets", [1, 3])
def test_linear_regressor(targets):
    """onnxruntime runs float32 X only: int64 X is judged by its run of the same values."""
    x = data((7, 4))
    attributes = {"coefficients": data(4 * targets).tolist(), "targets": targets}
    attributes["intercepts"] = data(targets).tolist()
    judge("LinearRegressor", {"X": x}, [("Y", FLOAT)], attributes)
    del attributes["intercepts"]
    ints = data((7, 4), np.int64)
    model = ml_model("LinearRegressor", {"X": ints}, [("Y", FLOAT)], attributes, 1)
    (got,) = rtsoa_outputs(model, {"X": ints})
    (want,) = judge("LinearRegressor", {"X": ints.astype(np.float32)}, [("Y", FLOAT)], attributes)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_linear_classifier_of_several_classes(post):
    attributes = {"coefficients": data(12).tolist(), "intercepts": data(3).tolist()}
    attributes.update(classlabels_ints=[7, 8, 9], post_transform=post)
    judge("LinearClassifier", {"X": data((9, 4))}, [("Y", INT64), ("Z", FLOAT)], attributes)


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC"])
def test_binary_linear_classifier_on_one_margin(post):
    attributes = {"coefficients": data(4).tolist(), "intercepts": [0.1]}
    attributes.update(classlabels_ints=[3, 5], post_transform=post)
    x = data((20, 4), np.float64)
    y, _ = judge("LinearClassifier", {"X": x}, [("Y", INT64), ("Z", FLOAT)], attributes)
    assert set(y.tolist()) == {3, 5}


@pytest.mark.parametrize("intercepts", [[0.1], [0.1, -0.2, 0.3]])
def test_linear_classifier_string_labels_come_from_a_host_step(intercepts):
    labels = ["no", "yes"] if len(intercepts) == 1 else ["a", "b", "c"]
    attributes = {"coefficients": data(4 * len(intercepts)).tolist(), "intercepts": intercepts}
    attributes["classlabels_strings"] = labels
    y, _ = judge("LinearClassifier", {"X": data((12, 4))}, [("Y", 8), ("Z", FLOAT)], attributes)
    assert set(y.tolist()) <= set(labels) and len(set(y.tolist())) > 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_imputer(dtype):
    x = data((6, 3), dtype, nan=dtype != np.int64)
    if dtype == np.int64:
        attributes = {"imputed_value_int64s": [7, 8, 9], "replaced_value_int64": 0}
    else:
        attributes = {"imputed_value_floats": [1.5, -2.0, 0.25], "replaced_value_float": np.nan}
    kind = {np.float32: FLOAT, np.float64: DOUBLE, np.int64: INT64}[dtype]
    check = judge_by_reference if dtype == np.float64 else judge
    check("Imputer", {"X": x}, [("Y", kind)], attributes)
    if dtype == np.float32:
        x[1, 1] = 2.0
        judge(
            "Imputer",
            {"X": x},
            [("Y", kind)],
            {"imputed_value_floats": [9.0], "replaced_value_float": 2.0},
        )


@pytest.mark.parametrize("shape", [(6,), (3, 2)])
def test_one_hot_encoder_of_int64_categories(shape):
    x = rng.integers(0, 6, size=shape).astype(np.int64)  # 5 is not a category: a zero row
    judge("OneHotEncoder", {"X": x}, [("Y", FLOAT)], {"cats_int64s": [4, 0, 2, 1, 3]})


def test_feature_vectorizer_puts_inputs_side_by_side():
    feeds = {"A": data((4, 2)), "B": data((4, 3)), "C": data((4, 1))}
    judge("FeatureVectorizer", feeds, [("Y", FLOAT)], {"inputdimensions": [2, 3, 1]})
    feeds = {"A": data((4, 2), np.int64), "B": data((4, 3), np.int64)}
    judge("FeatureVectorizer", feeds, [("Y", FLOAT)], {"inputdimensions": [2, 3]})


def test_unsupported_attributes_and_shapes_are_refused():
    x = {"X": data((3, 4))}
    cases = [
        ("Scaler", {"offset": [1.0, 2.0], "scale": [1.0]}, [("Y", FLOAT)], "offset has 2 values"),
        ("Normalizer", {"norm": "L3"}, [("Y", FLOAT)], "norm 'L3' is not one of"),
        (
            "LinearRegressor",
            {"coefficients": [1.0] * 4, "post_transform": "PROBIT"},
            [("Y", FLOAT)],
            "post_transform 'PROBIT'",
        ),
        (
            "LinearRegressor",
            {"coefficients": [1.0] * 6, "targets": 2},
            [("Y", FLOAT)],
            "the coefficients need [N, 3]",
        ),
        (
            "LinearClassifier",
            {
                "coefficients": [1.0] * 4,
                "intercepts": [0.0],
                "classlabels_ints": [0, 1],
                "post_transform": "SOFTMAX",
            },
            [("Y", INT64), ("Z", FLOAT)],
            "post_transform 'SOFTMAX' is not supported",
        ),
        ("Imputer", {"imputed_value_floats": [1.0, 2.0]}, [("Y", FLOAT)], "has 2 values"),
    ]
    for op, attributes, outputs, named in cases:
        refused(ml_model(op, x, outputs, attributes, 1), named)
    ints = {"X": data((3, 4), np.int64)}
    refused(
        ml_model("OneHotEncoder", ints, [("Y", FLOAT)], {"cats_int64s": [1], "zeros": 0}, 1),
        "zeros=0",
    )
    refused(ml_model("Binarizer", ints, [("Y", INT64)], {}, 1), "is int64; the op takes")
    refused(
        ml_model("FeatureVectorizer", x, [("Y", FLOAT)], {"inputdimensions": [3]}, 1),
        "inputdimensions needs [N, 3]",
    )
    feeds = {"X": data((3, 4)), "Y": np.array([1, 4], dtype=np.int64)}
    model = ml_model("ArrayFeatureExtractor", feeds, [("Z", FLOAT)], {}, 1)
    model.graph.initializer.append(numpy_helper.from_array(feeds["Y"], "Y"))
    del model.graph.input[1]  # constant indices: checked at lowering
    refused(model, "an index of [1, 4] is outside 0 .. 4")
