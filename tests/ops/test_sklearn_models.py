"""scikit-learn models converted by skl2onnx (a dev extra), as users export them, against ONNX Runtime on every
backend: tree ensembles, linear and SVM models, nearest neighbours (Scan, TopK, ArrayFeatureExtractor), PCA and
the preprocessing transforms, classifiers with ZipMap's list of dicts as their probability output. On the GPU
backends only ZipMap (a list of dicts is a host value) and an SVM's probabilities (libsvm's iterative pairwise
coupling, docs/model-support.md) run on the host."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from helpers import BACKENDS

import wgsentis as ws

pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")
ort = pytest.importorskip("onnxruntime")

from sklearn import (  # noqa: E402  (after the skips: scikit-learn is a dev extra)
    decomposition,
    ensemble,
    impute,
    linear_model,
    neighbors,
    pipeline,
    preprocessing,
    svm,
    tree,
)
from sklearn.datasets import load_diabetes, load_iris  # noqa: E402

RNG = np.random.default_rng(8)
_IRIS = tuple(a.astype(np.float32) if a.dtype.kind == "f" else a for a in load_iris(return_X_y=True))
_DIABETES = tuple(a.astype(np.float32) for a in load_diabetes(return_X_y=True))


def _with_gaps(x: np.ndarray) -> np.ndarray:
    return np.where(RNG.random(x.shape) < 0.1, np.nan, x).astype(np.float32)


# name -> (estimator, X, y or None, layers' ops allowed on the host on a GPU backend)
CASES: dict[str, tuple[Any, np.ndarray, Any, set[str]]] = {
    "random_forest_zipmap": (ensemble.RandomForestClassifier(n_estimators=6, max_depth=4, random_state=0), *_IRIS,
                             {"ZipMap"}),
    "gradient_boosting": (ensemble.GradientBoostingClassifier(n_estimators=8, max_depth=3, random_state=0), *_IRIS,
                          {"ZipMap"}),
    "decision_tree_regressor": (tree.DecisionTreeRegressor(max_depth=6, random_state=0), *_DIABETES, set()),
    "gradient_boosting_regressor": (ensemble.GradientBoostingRegressor(n_estimators=10, random_state=0),
                                    *_DIABETES, set()),
    "scaled_logistic_regression": (pipeline.make_pipeline(preprocessing.StandardScaler(),
                                                          linear_model.LogisticRegression(max_iter=500)),
                                   *_IRIS, {"ZipMap"}),
    "linear_regression": (linear_model.LinearRegression(), *_DIABETES, set()),
    "linear_svc": (svm.LinearSVC(random_state=0), *_IRIS, {"ZipMap"}),
    "svc_probabilities": (svm.SVC(probability=True, random_state=0), *_IRIS, {"ZipMap", "SVMClassifier"}),
    "svr": (svm.SVR(), *_DIABETES, set()),
    "nearest_neighbours": (neighbors.KNeighborsClassifier(n_neighbors=3), *_IRIS, {"ZipMap"}),
    "pca": (decomposition.PCA(n_components=3, random_state=0), _DIABETES[0], None, set()),
    "minmax_binarizer": (pipeline.make_pipeline(preprocessing.MinMaxScaler(), preprocessing.Binarizer(threshold=0.5)),
                         _IRIS[0], None, set()),
    "imputer_normalizer": (pipeline.make_pipeline(impute.SimpleImputer(), preprocessing.Normalizer()),
                           _with_gaps(_IRIS[0]), None, set()),
    "one_hot_encoder": (preprocessing.OneHotEncoder(handle_unknown="ignore"), RNG.integers(0, 4, (40, 3)), None,
                        set()),
}


def _rows(value: Any) -> np.ndarray:
    """An output as an array: ZipMap's list of {label: probability} rows as (rows, labels) in label order."""
    if isinstance(value, list):
        return np.array([[row[k] for k in sorted(row)] for row in value], np.float64)
    return np.asarray(value, np.float64)


@pytest.fixture(scope="module")
def converted() -> dict[str, tuple[bytes, np.ndarray, list[Any], set[str]]]:
    """Each case fitted, converted (ai.onnx 17, ai.onnx.ml 3) and run by ONNX Runtime once."""
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, (estimator, x, y, host_ops) in CASES.items():
            estimator.fit(x, y) if y is not None else estimator.fit(x)
            model = skl2onnx.to_onnx(estimator, x[:1], target_opset={"": 17, "ai.onnx.ml": 3}).SerializeToString()
            session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
            out[name] = (model, x, session.run(None, {session.get_inputs()[0].name: x}), host_ops)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(CASES))
def test_sklearn_model_matches_onnxruntime(converted, name, backend):
    model_bytes, x, expected, host_ops = converted[name]
    model = ws.load_model(model_bytes)
    with ws.Worker(model, backend) as worker:
        got = worker.run({model.graph.inputs[0].name: x})
        placements = worker.stats().get("placements", [])
    outputs = [info.name for info in model.graph.outputs]
    for output, want in zip(outputs, expected, strict=True):
        g, w = _rows(got[output]), _rows(want)
        assert g.shape == w.shape, (output, g.shape, w.shape)
        if np.asarray(want).dtype.kind in "iub":
            np.testing.assert_array_equal(g, w, err_msg=output)  # labels, codes: exactly
        else:  # float32 scores and probabilities; ORT sums in float32 in its own order
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=5e-5 * max(1.0, np.abs(w).max()), err_msg=output)
    off_gpu = {p["op"] for p in placements if p["device"] == "fallback"}
    assert off_gpu <= host_ops, (backend, off_gpu - host_ops)
