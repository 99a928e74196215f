"""scikit-learn models exported by skl2onnx (ai.onnx.ml tree ensembles, Scaler, linear models,
Normalizer, support vector machines, ZipMap), trained here on small seeded data, run on rtsoa
and onnxruntime: equal labels, scores within float32 rounding."""

import warnings

import numpy as np
import pytest
from skl2onnx import to_onnx
from sklearn.ensemble import (
    GradientBoostingClassifier,
    GradientBoostingRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC, SVR, LinearSVC, LinearSVR, NuSVR, OneClassSVM

from rtsoa.runtime.inference import InferenceSession
from rtsoa.testing.models import run_onnxruntime

rng = np.random.default_rng(50)
X = rng.normal(size=(300, 6)).astype(np.float32)
TEST = rng.normal(size=(64, 6)).astype(np.float32)
TARGET = X[:, 0] * 2 + np.sin(X[:, 1]) + rng.normal(size=300) * 0.1
TWO = (X[:, 0] + X[:, 2] > 0).astype(np.int64)
THREE = np.digitize(X[:, 0] + X[:, 3], [-0.5, 0.5]).astype(np.int64)

MODELS = {
    "random_forest_regressor": lambda: RandomForestRegressor(8, max_depth=6, random_state=0),
    "gradient_boosting_regressor": lambda: GradientBoostingRegressor(n_estimators=15),
    "linear_regression_pipeline": lambda: make_pipeline(StandardScaler(), LinearRegression()),
}
CLASSIFIERS = {
    "random_forest_classifier": lambda: RandomForestClassifier(8, max_depth=6, random_state=0),
    "gradient_boosting_classifier": lambda: GradientBoostingClassifier(n_estimators=15),
    "logistic_regression_pipeline": lambda: make_pipeline(StandardScaler(), LogisticRegression()),
}


def exported(estimator, classifier):
    options = {id(estimator): {"zipmap": False}} if classifier else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return to_onnx(estimator, X[:1], options=options, target_opset={"": 17, "ai.onnx.ml": 3})


def same_results(model):
    with InferenceSession(model) as session:
        got = session.run(None, {"X": TEST})
    want = run_onnxruntime(model, {"X": TEST})
    for output, have in zip(model.graph.output, got, strict=True):
        expected = want[output.name]
        assert have.dtype == expected.dtype and have.shape == expected.shape
        if have.dtype.kind in "iO":
            np.testing.assert_array_equal(have, expected)
        else:
            np.testing.assert_allclose(have, expected, rtol=1e-5, atol=1e-6)
    return got


@pytest.mark.parametrize("name", sorted(MODELS))
def test_regressors_equal_onnxruntime(name):
    estimator = MODELS[name]().fit(X, TARGET)
    (prediction,) = same_results(exported(estimator, classifier=False))
    np.testing.assert_allclose(prediction.ravel(), estimator.predict(TEST), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", sorted(CLASSIFIERS))
@pytest.mark.parametrize("classes", [2, 3])
def test_classifiers_equal_onnxruntime_and_scikit_learn(name, classes):
    labels = TWO if classes == 2 else THREE
    estimator = CLASSIFIERS[name]().fit(X, labels)
    model = exported(estimator, classifier=True)
    predicted, probabilities = same_results(model)
    np.testing.assert_array_equal(predicted, estimator.predict(TEST))
    np.testing.assert_allclose(probabilities, estimator.predict_proba(TEST), atol=1e-5)
    assert len(set(predicted.tolist())) == classes


@pytest.mark.parametrize("name", sorted(CLASSIFIERS))
def test_classifiers_with_string_classes(name):
    """String classes: the device labels by index, a host step names the classes."""
    labels = np.array(["low", "mid", "high"], dtype=object)[THREE]
    estimator = CLASSIFIERS[name]().fit(X, labels)
    predicted, _ = same_results(exported(estimator, classifier=True))
    assert predicted.tolist() == estimator.predict(TEST).tolist()


SVM_KERNELS = ["linear", "poly", "rbf", "sigmoid"]


@pytest.mark.parametrize("kernel", SVM_KERNELS)
@pytest.mark.parametrize("probability", [False, True], ids=["votes", "probabilities"])
def test_svc_equals_onnxruntime_and_scikit_learn(kernel, probability):
    """SVC, three classes: labels are scikit-learn's; with probability=True the probabilities
    are libsvm's within 1e-3 (scikit-learn couples in float64, the ONNX model in float32)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SVC(probability=True) is deprecated in 1.9
        estimator = SVC(kernel=kernel, probability=probability, degree=2, coef0=0.5)
        estimator = estimator.set_params(random_state=0).fit(X, THREE)
    predicted, scores = same_results(exported(estimator, classifier=True))
    np.testing.assert_array_equal(predicted, estimator.predict(TEST))
    if probability:
        np.testing.assert_allclose(scores, estimator.predict_proba(TEST), atol=1e-3)


@pytest.mark.parametrize("estimator", [SVR(), NuSVR(kernel="poly", degree=2), LinearSVR()])
def test_svm_regressors_equal_onnxruntime_and_scikit_learn(estimator):
    estimator.fit(X, TARGET)
    (prediction,) = same_results(exported(estimator, classifier=False))
    np.testing.assert_allclose(prediction.ravel(), estimator.predict(TEST), rtol=1e-4, atol=1e-4)


def test_linear_svc_exports_as_a_linear_classifier():
    estimator = LinearSVC().fit(X, THREE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = to_onnx(estimator, X[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    predicted, scores = same_results(model)
    np.testing.assert_array_equal(predicted, estimator.predict(TEST))
    np.testing.assert_allclose(scores, estimator.decision_function(TEST), rtol=1e-4, atol=1e-4)


def test_one_class_svm_and_two_class_svc():
    one_class = OneClassSVM(nu=0.2, gamma=0.3).fit(X)
    label, score = same_results(exported(one_class, classifier=False))
    np.testing.assert_array_equal(label.ravel(), one_class.predict(TEST))
    np.testing.assert_allclose(score.ravel(), one_class.decision_function(TEST), atol=1e-4)
    two = SVC(kernel="rbf").fit(X, TWO)
    predicted, margins = same_results(exported(two, classifier=True))
    np.testing.assert_array_equal(predicted, two.predict(TEST))
    assert margins.shape == (len(TEST), 2)


@pytest.mark.parametrize("labels", [THREE, np.array(["no", "yes"], dtype=object)[TWO]])
def test_classifiers_with_zipmap_give_onnxruntimes_maps(labels):
    """skl2onnx's default export ends in ZipMap: a list of dicts {class: probability}."""
    estimators = [SVC(kernel="rbf", probability=True, random_state=0), LogisticRegression()]
    for estimator in estimators:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            estimator.fit(X, labels)
            model = to_onnx(estimator, X[:1], target_opset={"": 17, "ai.onnx.ml": 3})
        with InferenceSession(model) as session:
            predicted, maps = session.run(None, {"X": TEST})
        want_labels, want_maps = run_onnxruntime(model, {"X": TEST}).values()
        assert predicted.tolist() == want_labels.tolist() == estimator.predict(TEST).tolist()
        assert isinstance(maps, list) and len(maps) == len(TEST)
        for have, expected in zip(maps, want_maps, strict=True):
            assert list(have) == list(expected)  # the same labels in the same order
            np.testing.assert_allclose(list(have.values()), list(expected.values()), atol=1e-5)
