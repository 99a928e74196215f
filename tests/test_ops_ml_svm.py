"""SVMRegressor and SVMClassifier (ai.onnx.ml) on one-node models with seeded random support
vectors, judged by onnxruntime: labels equal, scores and probabilities within float32
rounding (rtol 1e-4, atol 1e-5: the kernels sum in another order), every kernel type; labels
also judged by a NumPy model of the votes / scores where onnxruntime or onnx's reference
evaluator departs from them; inconsistent attributes refused naming the attribute."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from rtsoa.errors import LoweringError
from rtsoa.runtime.inference import InferenceSession
from rtsoa.testing.models import run_onnxruntime

ML = "ai.onnx.ml"
KERNELS = ["LINEAR", "POLY", "RBF", "SIGMOID"]
PARAMS = [0.3, 0.5, 3.0]  # gamma, coef0, degree
FEATURES = 4
RTOL, ATOL = 1e-4, 1e-5


def svm_model(op, attributes, outputs, x_type=TensorProto.FLOAT):
    node = helper.make_node(
        op, ["X"], [name for name, _ in outputs], name="svm", domain=ML, **attributes
    )
    graph = helper.make_graph(
        [node],
        "svm",
        [helper.make_tensor_value_info("X", x_type, ["N", FEATURES])],
        [helper.make_tensor_value_info(name, kind, None) for name, kind in outputs],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(ML, 3)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    return model


def samples(rows=24, seed=3):
    return np.random.default_rng(seed).normal(size=(rows, FEATURES)).astype(np.float32)


def compare(model, x, exact_labels=True):
    with InferenceSession(model) as session:
        got = session.run(None, {"X": x})
    want = run_onnxruntime(model, {"X": x})
    for output, have in zip(model.graph.output, got, strict=True):
        expected = want[output.name]
        assert have.dtype == expected.dtype and have.shape == expected.shape, output.name
        if have.dtype.kind in "iO":
            np.testing.assert_array_equal(have, expected, err_msg=output.name)
        else:
            np.testing.assert_allclose(have, expected, rtol=RTOL, atol=ATOL, err_msg=output.name)
    return got


def regressor(kernel, supports=6, seed=0, **extra):
    rng = np.random.default_rng(seed)
    attributes = {
        "kernel_type": kernel,
        "kernel_params": PARAMS,
        "n_supports": supports,
        "support_vectors": rng.normal(size=supports * FEATURES).tolist(),
        "coefficients": rng.normal(size=supports).tolist(),
        "rho": [0.25],
    }
    attributes.update(extra)
    return svm_model("SVMRegressor", attributes, [("Y", TensorProto.FLOAT)])


@pytest.mark.parametrize("kernel", KERNELS)
def test_regressor_kernels_and_the_one_class_model(kernel):
    compare(regressor(kernel), samples())
    (signs,) = compare(regressor(kernel, one_class=1), samples())
    assert set(np.unique(signs).tolist()) <= {-1.0, 1.0}


def test_linear_regressor_without_support_vectors_and_integer_input():
    attributes = {"coefficients": [0.5, -1.0, 2.0, 0.25], "rho": [-0.5], "kernel_params": PARAMS}
    compare(svm_model("SVMRegressor", attributes, [("Y", TensorProto.FLOAT)]), samples())
    x = np.arange(FEATURES * 5, dtype=np.int64).reshape(5, FEATURES) - 7
    model = svm_model("SVMRegressor", attributes, [("Y", TensorProto.FLOAT)], TensorProto.INT64)
    with InferenceSession(model) as session:  # onnxruntime takes float32 X only
        (got,) = session.run(None, {"X": x})
    expected = x @ np.array(attributes["coefficients"]) - 0.5
    np.testing.assert_allclose(got.ravel(), expected, rtol=RTOL, atol=ATOL)


def classifier_attributes(kernel, classes, seed=0, probabilities=False, per_class=None):
    rng = np.random.default_rng(seed)
    per_class = per_class or [2 + k for k in range(classes)]
    count = sum(per_class)
    pairs = classes * (classes - 1) // 2
    attributes = {
        "classlabels_ints": [10 * (k + 1) for k in range(classes)],
        "kernel_type": kernel,
        "kernel_params": PARAMS,
        "vectors_per_class": per_class,
        "support_vectors": rng.normal(size=count * FEATURES).tolist(),
        "coefficients": rng.normal(size=(classes - 1) * count).tolist(),
        "rho": rng.normal(size=pairs, scale=0.3).tolist(),
    }
    if probabilities:
        attributes["prob_a"] = rng.uniform(-3.0, -0.5, size=pairs).tolist()
        attributes["prob_b"] = rng.normal(size=pairs, scale=0.2).tolist()
    return attributes


def classifier(attributes):
    return svm_model(
        "SVMClassifier", attributes, [("Y", TensorProto.INT64), ("Z", TensorProto.FLOAT)]
    )


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("classes", [2, 4])
@pytest.mark.parametrize("probabilities", [False, True], ids=["scores", "probabilities"])
def test_classifier_labels_scores_and_probabilities(kernel, classes, probabilities):
    attributes = classifier_attributes(kernel, classes, probabilities=probabilities)
    labels, scores = compare(classifier(attributes), samples(40))
    pairs = classes * (classes - 1) // 2
    width = classes if probabilities else (2 if classes == 2 else pairs)
    assert scores.shape == (40, width)
    if probabilities:
        np.testing.assert_allclose(scores.sum(axis=1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("post", ["LOGISTIC", "SOFTMAX"])
def test_classifier_post_transforms(post):
    for classes in (2, 3):
        attributes = classifier_attributes("RBF", classes, seed=5)
        if classes == 2 and post == "SOFTMAX":  # onnxruntime ignores it there
            refused(classifier({**attributes, "post_transform": post}), "post_transform")
            continue
        compare(classifier({**attributes, "post_transform": post}), samples())


@pytest.mark.parametrize("classes", [2, 3])
def test_linear_classifier_form_without_support_vectors(classes):
    rng = np.random.default_rng(8)
    attributes = {
        "classlabels_ints": [5, 6, 7][:classes],
        "coefficients": rng.normal(size=classes * FEATURES).tolist(),
        "rho": [0.5],
        "kernel_params": PARAMS,  # onnxruntime needs them, even unused
    }
    model, x = classifier(attributes), samples()
    if classes == 3:
        compare(model, x)
        return
    with InferenceSession(model) as session:  # onnxruntime's two-class labels depart here
        labels, scores = session.run(None, {"X": x})
    np.testing.assert_allclose(scores, run_onnxruntime(model, {"X": x})["Z"], rtol=RTOL, atol=ATOL)
    expected = x.astype(np.float64) @ np.reshape(attributes["coefficients"], (2, -1)).T + 0.5
    np.testing.assert_array_equal(labels, np.array([5, 6])[expected.argmax(axis=1)])


def votes_reference(attributes, x):
    """Labels by the votes of the pairwise decision values, in float64 (the definition)."""
    per_class = attributes["vectors_per_class"]
    classes, count = len(per_class), sum(per_class)
    vectors = np.reshape(attributes["support_vectors"], (count, -1))
    coefficients = np.reshape(attributes["coefficients"], (classes - 1, count))
    kernels = x.astype(np.float64) @ vectors.T  # LINEAR
    starts = np.concatenate([[0], np.cumsum(per_class)])
    votes = np.zeros((len(x), classes), dtype=np.int64)
    k = 0
    for i in range(classes):
        for j in range(i + 1, classes):
            block_i, block_j = slice(starts[i], starts[i + 1]), slice(starts[j], starts[j + 1])
            value = kernels[:, block_i] @ coefficients[j - 1, block_i]
            value += kernels[:, block_j] @ coefficients[i, block_j] + attributes["rho"][k]
            votes[np.arange(len(x)), np.where(value > 0, i, j)] += 1
            k += 1
    return np.asarray(attributes["classlabels_ints"])[votes.argmax(axis=1)]


def test_two_classes_with_positive_coefficients_are_labelled_by_their_votes():
    """onnx's reference evaluator labels every row with the second class here; onnxruntime
    and rtsoa follow the votes, as for every other model."""
    attributes = classifier_attributes("LINEAR", 2, seed=2)
    attributes["coefficients"] = np.abs(attributes["coefficients"]).tolist()
    attributes["rho"] = [-3.0]
    x = samples(30)
    labels, _ = compare(classifier(attributes), x)
    np.testing.assert_array_equal(labels, votes_reference(attributes, x))
    assert len(set(labels.tolist())) == 2


def test_string_class_labels_come_from_a_host_step():
    attributes = classifier_attributes("RBF", 3, seed=4, probabilities=True)
    names = ["alpha", "beta", "gamma"]
    attributes["classlabels_strings"] = names
    del attributes["classlabels_ints"]
    model = svm_model(
        "SVMClassifier", attributes, [("Y", TensorProto.STRING), ("Z", TensorProto.FLOAT)]
    )
    labels, _ = compare(model, samples())
    assert set(labels.tolist()) <= set(names)


def refused(model, attribute):
    with pytest.raises(LoweringError, match=rf"node 'svm'.*'{attribute}'"):
        InferenceSession(model)


def test_inconsistent_attributes_are_refused_naming_node_and_attribute():
    base = classifier_attributes("RBF", 3, probabilities=True)
    for attribute, value in [
        ("coefficients", base["coefficients"][:-1]),
        ("support_vectors", base["support_vectors"][:-1]),
        ("vectors_per_class", [2, 3]),
        ("rho", base["rho"][:2]),
        ("prob_a", base["prob_a"][:1]),
        ("kernel_params", [0.1, 0.2]),
        ("kernel_type", "CUBIC"),
        ("post_transform", "PROBIT"),
    ]:
        refused(classifier({**base, attribute: value}), attribute)
    refused(classifier({**base, "classlabels_ints": [1]}), "classlabels_ints")
    wide = {**base, "support_vectors": base["support_vectors"] + [0.0] * sum([2, 3, 4])}
    with pytest.raises(LoweringError, match=r"node 'svm'.*X has shape.*\[N, 5\]"):
        InferenceSession(classifier(wide))
    for attribute, value in [
        ("coefficients", [1.0] * 5),
        ("support_vectors", [1.0] * 7),
        ("rho", [0.1, 0.2]),
        ("post_transform", "LOGISTIC"),
    ]:
        refused(regressor("RBF", **{attribute: value}), attribute)
