"""scikit-learn models exported by skl2onnx (ai.onnx.ml tree ensembles, Scaler, linear models,
Normalizer), trained here on small seeded data, run on rtsoa and onnxruntime: equal labels,
scores within float32 rounding."""

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
