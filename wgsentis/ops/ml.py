"""Numpy kernels of the ``ai.onnx.ml`` models that skl2onnx and onnxmltools emit, the tree ensembles
(ops/ml_trees.py) and the feature transforms (ops/ml_transforms.py) aside: the linear and SVM models
(LinearClassifier, LinearRegressor, SVMClassifier, SVMRegressor); the helpers every ML family shares (attribute
readers, the post transforms, label picking), which ops/ml_trees.py, ops/ml_transforms.py and the GPU programs
(ops/ml_gpu.py, ops/ml_pixel.py) import; and the size rules of the ML ops whose output can outgrow their input,
the tree ensembles' and the feature transforms' included.

Semantics follow the ONNX ai.onnx.ml specs and, where the spec is vague (binary classifiers' single score,
SOFTMAX_ZERO, PROBIT), what ONNX Runtime computes, since models exported by those converters are validated
against it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from wgsentis.ops.spec import size_rule
from wgsentis.ops.registry import register

ML_DOMAIN = "ai.onnx.ml"

POST_TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")


# ----------------------------------------------------------------------------------------------
# shared helpers
# ----------------------------------------------------------------------------------------------


def text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def choice(value: Any, allowed: tuple[str, ...], what: str) -> str:
    name = text(value).upper()
    if name not in allowed:
        raise ValueError(f"unsupported {what} {name!r} (expected one of {', '.join(allowed)})")
    return name


def as_rows(X: np.ndarray) -> np.ndarray:
    """X as a float64 (N, F) matrix: 1-D inputs are one row, as the ML ops' specs say."""
    X = np.asarray(X)
    if X.dtype.kind not in "fiub":
        raise TypeError(f"expected a numeric tensor, got {X.dtype}")
    X = X.reshape(1, -1) if X.ndim <= 1 else X.reshape(X.shape[0], -1)
    return X.astype(np.float64, copy=False)


def floats(plain: Any, tensor: Any = None) -> np.ndarray:
    """A float attribute as float64: its *_as_tensor (double) form when given, else the float list."""
    if tensor is not None:
        return np.asarray(tensor, dtype=np.float64).reshape(-1)
    if plain is None:
        return np.zeros(0)
    # The float list holds float32 values: rounding them there keeps ORT's float32 thresholds exactly.
    return np.asarray(plain, dtype=np.float32).astype(np.float64)


def ints(values: Any) -> np.ndarray:
    return np.zeros(0, dtype=np.int64) if values is None else np.asarray(values, dtype=np.int64).reshape(-1)


def class_labels(numbers: Any, strings: Any) -> tuple[np.ndarray, bool]:
    """The class labels (int64 or object array) and whether they are strings."""
    if strings is not None and len(strings):
        return object_array([text(s) for s in strings]), True
    return ints(numbers), False


def object_array(values: list) -> np.ndarray:
    """A 1-D object array holding each of ``values`` as one element (numpy would read nested sequences as axes)."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def logistic(x: np.ndarray) -> np.ndarray:
    # exp of -|x| never overflows; the sign picks the side, as ORT's ComputeLogistic does.
    e = 1.0 / (1.0 + np.exp(-np.abs(x)))
    return np.where(x < 0, 1.0 - e, e)


def probit(x: np.ndarray) -> np.ndarray:
    """sqrt(2) * erfinv(2x - 1) with the closed-form erfinv approximation (a = 0.147) that ORT evaluates in
    float32: its -v + sqrt(v^2 - v2) cancels, so only the same float32 steps agree with it to 1e-5."""
    f32 = np.float32
    y = np.asarray(x, dtype=f32) * f32(2) - f32(1)
    sign = np.where(y < 0, f32(-1), f32(1))
    w = (f32(1) - y) * (f32(1) + y)
    with np.errstate(divide="ignore", invalid="ignore"):
        log = np.log(w)
        v = f32(2) / (f32(3.14159) * f32(0.147)) + f32(0.5) * log
        v2 = f32(1) / f32(0.147) * log
        inv = sign * np.sqrt(-v + np.sqrt(v * v - v2))
    return (f32(1.41421356) * inv).astype(np.float64)


def _softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _softmax_zero(s: np.ndarray) -> np.ndarray:
    """Softmax over each row's non-zero scores; zero scores stay zero (ORT's SOFTMAX_ZERO)."""
    e = np.where(np.abs(s) > 1e-7, np.exp(s - s.max(axis=1, keepdims=True)), 0.0)
    return e / e.sum(axis=1, keepdims=True)


def apply_post_transform(scores: np.ndarray, name: str) -> np.ndarray:
    """Apply ``post_transform`` to (N, C) scores (C >= 2, or a regressor's targets)."""
    if name == "LOGISTIC":
        return logistic(scores)
    if name == "SOFTMAX":
        return _softmax(scores)
    if name == "SOFTMAX_ZERO":
        return _softmax_zero(scores)
    if name == "PROBIT":
        return probit(scores)
    return scores


def _binary_scores(score: np.ndarray, name: str, complement: bool) -> np.ndarray:
    """The two columns ORT writes for a classifier that computed one score per row: [1 - s, s] when the
    score is a probability (``complement``), else [-s, s], each through ``post_transform``; PROBIT keeps
    one column."""
    if name == "PROBIT":
        return probit(score)[:, None]
    if complement:
        return np.stack([1.0 - score, score], axis=1)
    if name == "LOGISTIC":
        return np.stack([logistic(-score), logistic(score)], axis=1)
    pair = np.stack([-score, score], axis=1)
    if name in ("SOFTMAX", "SOFTMAX_ZERO"):
        return apply_post_transform(pair, name)
    return pair


def pick(labels: np.ndarray, index: np.ndarray) -> np.ndarray:
    return labels[index] if labels.dtype != object else object_array(labels[index].tolist())


def base(values: np.ndarray, count: int) -> np.ndarray:
    if values.size == 0:
        return values
    if values.size not in (1, count):
        raise ValueError(f"base_values has {values.size} entries, expected {count}")
    return np.broadcast_to(values, (count,)).copy()


# ----------------------------------------------------------------------------------------------
# linear models
# ----------------------------------------------------------------------------------------------


def matrix(values: Any, rows: int, what: str) -> np.ndarray:
    flat = floats(values)
    if rows <= 0 or flat.size % rows:
        raise ValueError(f"{what} has {flat.size} entries, not a multiple of {rows}")
    return flat.reshape(rows, -1)


def _linear_scores(X: np.ndarray, coefficients: Any, intercepts: Any, count: int) -> np.ndarray:
    coef = matrix(coefficients, count, "coefficients")
    rows = as_rows(X)
    if rows.shape[1] != coef.shape[1]:
        raise ValueError(f"X has {rows.shape[1]} features, the coefficients {coef.shape[1]}")
    scores = rows @ coef.T
    bias = floats(intercepts)
    if bias.size:
        scores += base(bias, count)
    return scores


@register("LinearClassifier", 1, domain=ML_DOMAIN)
def linear_classifier(ctx, X, *, classlabels_ints=None, classlabels_strings=None, coefficients=None,
                      intercepts=None, multi_class=0, post_transform="NONE"):
    """Scores X @ coefficients.T + intercepts, one per class; a single score is a binary margin."""
    post = choice(post_transform, POST_TRANSFORMS, "post_transform")
    labels, strings = class_labels(classlabels_ints, classlabels_strings)
    bias = floats(intercepts)
    count = bias.size if bias.size else max(labels.size, 1)
    scores = _linear_scores(X, coefficients, intercepts, count)
    if count == 1:
        # One score: its sign picks the second label (or "1"/1 when there are not two labels).
        if labels.size != 2:
            labels = object_array(["0", "1"]) if strings else np.array([0, 1], dtype=np.int64)
        score = scores[:, 0]
        label = pick(labels, (score > 0).astype(np.int64))
        if (classlabels_strings and len(classlabels_strings) == 2) or (
                not strings and classlabels_ints and len(classlabels_ints) == 2):
            return label, _binary_scores(score, post, post != "LOGISTIC").astype(np.float32)
        return label, apply_post_transform(scores, post).astype(np.float32)
    if labels.size != count:
        raise ValueError(f"{count} score columns but {labels.size} class labels")
    return pick(labels, np.argmax(scores, axis=1)), apply_post_transform(scores, post).astype(np.float32)


@register("LinearRegressor", 1, domain=ML_DOMAIN)
def linear_regressor(ctx, X, *, coefficients=None, intercepts=None, post_transform="NONE", targets=1):
    """Y = X @ coefficients.T + intercepts for ``targets`` targets, then ``post_transform``."""
    post = choice(post_transform, POST_TRANSFORMS, "post_transform")
    scores = _linear_scores(X, coefficients, intercepts, int(targets))
    return apply_post_transform(scores, post).astype(np.float32)


# ----------------------------------------------------------------------------------------------
# support vector machines
# ----------------------------------------------------------------------------------------------


def _kernel(X: np.ndarray, vectors: np.ndarray, kind: str, params: Any) -> np.ndarray:
    """The kernel between every row of X and every vector: (N, vectors)."""
    gamma, coef0, degree = ([float(p) for p in params] + [0.0, 0.0, 0.0])[:3] if params else (0.0, 0.0, 0.0)
    if kind == "RBF":
        # |x - v|^2 expanded, clipped at 0 where rounding would make it negative.
        sq = (X * X).sum(axis=1)[:, None] + (vectors * vectors).sum(axis=1)[None, :] - 2.0 * (X @ vectors.T)
        return np.exp(-gamma * np.maximum(sq, 0.0))
    dot = X @ vectors.T
    if kind == "POLY":
        return (gamma * dot + coef0) ** int(degree)
    if kind == "SIGMOID":
        return np.tanh(gamma * dot + coef0)
    return dot


def _svm_inputs(X: np.ndarray, support_vectors: Any, count: int) -> tuple[np.ndarray, np.ndarray]:
    rows = as_rows(X)
    vectors = matrix(support_vectors, count, "support_vectors")
    if vectors.shape[1] != rows.shape[1]:
        raise ValueError(f"X has {rows.shape[1]} features, the support vectors {vectors.shape[1]}")
    return rows, vectors


@register("SVMRegressor", 1, domain=ML_DOMAIN)
def svm_regressor(ctx, X, *, coefficients=None, kernel_params=None, kernel_type="LINEAR", n_supports=0,
                  one_class=0, post_transform="NONE", rho=None, support_vectors=None):
    """sum_j coef_j K(x, sv_j) + rho (or a linear model when n_supports is 0); one-class gives +1/-1."""
    post = choice(post_transform, POST_TRANSFORMS, "post_transform")
    kind = choice(kernel_type, ("LINEAR", "POLY", "RBF", "SIGMOID"), "kernel_type")
    coef = floats(coefficients)
    bias = floats(rho)
    offset = bias[0] if bias.size else 0.0
    if int(n_supports) > 0:
        rows, vectors = _svm_inputs(X, support_vectors, int(n_supports))
        score = _kernel(rows, vectors, kind, kernel_params) @ coef[:vectors.shape[0]] + offset
    else:
        rows = as_rows(X)
        score = rows @ coef.reshape(-1, rows.shape[1])[0] + offset
    if int(one_class):
        score = np.where(score > 0, 1.0, -1.0)
    return apply_post_transform(score[:, None], post).astype(np.float32)


def _pairwise_probabilities(decisions: np.ndarray, prob_a: np.ndarray, prob_b: np.ndarray,
                            classes: int) -> np.ndarray:
    """Class probabilities from the one-vs-one decision values by Platt scaling and libsvm's coupling
    (Wu, Lin and Weng's second method), iterated for all rows at once; a row stops when it converges."""
    rows = decisions.shape[0]
    pair = 1.0 / (1.0 + np.exp(decisions * prob_a + prob_b))  # 1 - logistic(a d + b)
    pair = np.clip(pair, 1e-7, 1 - 1e-7)
    r = np.zeros((rows, classes, classes))
    k = 0
    for i in range(classes):
        for j in range(i + 1, classes):
            r[:, i, j] = pair[:, k]
            r[:, j, i] = 1.0 - pair[:, k]
            k += 1
    q = -r.transpose(0, 2, 1) * r  # q[t, j] = -r[j, t] r[t, j]
    diag = (r * r).sum(axis=1)  # sum over j != t of r[j, t]^2 (r's diagonal is 0)
    idx = np.arange(classes)
    q[:, idx, idx] = diag
    p = np.full((rows, classes), 1.0 / classes)
    eps = 0.005 / classes
    active = np.arange(rows)
    for _ in range(max(100, classes)):
        if active.size == 0:
            break
        qa, pa = q[active], p[active]
        qp = np.einsum("rtj,rj->rt", qa, pa)
        pqp = (pa * qp).sum(axis=1)
        done = np.abs(qp - pqp[:, None]).max(axis=1) < eps
        keep = ~done
        active, qa, pa, qp, pqp = active[keep], qa[keep], pa[keep], qp[keep], pqp[keep]
        for t in range(classes):
            diff = (pqp - qp[:, t]) / qa[:, t, t]
            pa[:, t] += diff
            pqp = (pqp + diff * (diff * qa[:, t, t] + 2 * qp[:, t])) / (1 + diff) ** 2
            pa /= (1 + diff)[:, None]
            qp = (qp + diff[:, None] * qa[:, t, :]) / (1 + diff)[:, None]
        p[active] = pa
    return p


@register("SVMClassifier", 1, domain=ML_DOMAIN)
def svm_classifier(ctx, X, *, classlabels_ints=None, classlabels_strings=None, coefficients=None,
                   kernel_params=None, kernel_type="LINEAR", post_transform="NONE", prob_a=None, prob_b=None, rho=None,
                   support_vectors=None, vectors_per_class=None):
    """One-vs-one SVC (support vectors per class, votes, optional Platt probabilities) or, without support
    vectors, a linear SVM with one score per class."""
    post = choice(post_transform, POST_TRANSFORMS, "post_transform")
    kind = choice(kernel_type, ("LINEAR", "POLY", "RBF", "SIGMOID"), "kernel_type")
    labels, strings = class_labels(classlabels_ints, classlabels_strings)
    classes = max(labels.size, 1)
    per_class = ints(vectors_per_class)
    coef = floats(coefficients)
    bias = floats(rho)
    positive = bool(coef.size == 0 or coef.min() >= 0)
    if per_class.sum() > 0:
        total = int(per_class.sum())
        rows, vectors = _svm_inputs(X, support_vectors, total)
        kernels = _kernel(rows, vectors, kind, kernel_params)
        dual = coef.reshape(-1, total)
        start = np.concatenate([[0], np.cumsum(per_class)[:-1]])
        decisions, votes = [], np.zeros((rows.shape[0], classes), dtype=np.int64)
        k = 0
        for i in range(classes):
            si = slice(int(start[i]), int(start[i] + per_class[i]))
            for j in range(i + 1, classes):
                sj = slice(int(start[j]), int(start[j] + per_class[j]))
                d = kernels[:, si] @ dual[j - 1, si] + kernels[:, sj] @ dual[i, sj] + bias[k]
                decisions.append(d)
                win = d > 0
                votes[:, i] += win
                votes[:, j] += ~win
                k += 1
        scores = np.stack(decisions, axis=1) if decisions else np.zeros((rows.shape[0], 0))
        has_proba = prob_a is not None and len(prob_a) > 0
        if has_proba:
            scores = _pairwise_probabilities(scores, floats(prob_a)[: scores.shape[1]],
                                             floats(prob_b)[: scores.shape[1]], classes)
        winner = np.argmax(votes, axis=1)
        best = votes[np.arange(votes.shape[0]), winner].astype(np.float64)
    else:
        rows = as_rows(X)
        scores = rows @ coef.reshape(classes, -1).T + (bias[0] if bias.size else 0.0)
        has_proba = False
        winner = np.argmax(scores, axis=1)
        best = scores[np.arange(scores.shape[0]), winner]
    if bias.size == 1:  # one decision function: a binary problem, as ORT labels it
        if labels.size == 2:
            if not has_proba and positive:
                winner = np.where(best >= 0.5, 1, winner)
            label = pick(labels, winner)
            if scores.shape[1] == 1:
                return label, _binary_scores(scores[:, 0], post, False).astype(np.float32)
            return label, apply_post_transform(scores, post).astype(np.float32)
        fallback = object_array(["0", "1"]) if strings else np.array([0, 1], dtype=np.int64)
        return pick(fallback, (best > 0).astype(np.int64)), apply_post_transform(scores, post).astype(np.float32)
    return pick(labels, winner), apply_post_transform(scores, post).astype(np.float32)


# ----------------------------------------------------------------------------------------------
# size rules: the ops whose output can outgrow their input (a category count, a class or target count,
# an input dimension: attributes a few bytes long can name millions)
# ----------------------------------------------------------------------------------------------


def _batch(value: Any) -> int:
    shape = tuple(value.shape)
    return shape[0] if len(shape) > 1 else 1


def _count(attrs: dict, *names: str) -> int:
    for name in names:
        value = attrs.get(name)
        if value is not None and len(value):
            return len(value)
    return 1


@size_rule("OneHotEncoder", domain=ML_DOMAIN)
def _one_hot_encoder_size(layer: Any, args: list[Any]) -> list[tuple[tuple[int, ...], int, str]]:
    shape = (*tuple(args[0].shape), _count(layer.attrs, "cats_int64s", "cats_strings"))
    return [(shape, math.prod(shape) * 4, "")]


@size_rule("TreeEnsembleRegressor", domain=ML_DOMAIN)
def _tree_regressor_size(layer: Any, args: list[Any]) -> list[tuple[tuple[int, ...], int, str]]:
    targets = int(layer.attrs.get("n_targets") or 1)
    shape = (_batch(args[0]), targets)
    return [(shape, math.prod(shape) * 4, ""), (shape, math.prod(shape) * 8, "the float64 scores")]


@size_rule("TreeEnsembleClassifier", "LinearClassifier", "SVMClassifier", domain=ML_DOMAIN)
def _classifier_size(layer: Any, args: list[Any]) -> list[tuple[tuple[int, ...], int, str]]:
    classes = _count(layer.attrs, "classlabels_int64s", "classlabels_ints", "classlabels_strings")
    rows = _batch(args[0])
    if layer.op_type == "SVMClassifier":
        classes = max(classes, classes * (classes - 1) // 2)  # one-vs-one decision values
    shape = (rows, classes)
    return [((rows,), rows * 8, ""), (shape, math.prod(shape) * 4, ""),
            (shape, math.prod(shape) * 8, "the float64 scores")]


@size_rule("LinearRegressor", domain=ML_DOMAIN)
def _linear_regressor_size(layer: Any, args: list[Any]) -> list[tuple[tuple[int, ...], int, str]]:
    shape = (_batch(args[0]), int(layer.attrs.get("targets", 1)))
    return [(shape, math.prod(shape) * 4, "")]


@size_rule("FeatureVectorizer", domain=ML_DOMAIN)
def _feature_vectorizer_size(layer: Any, args: list[Any]) -> list[tuple[tuple[int, ...], int, str]]:
    shape = (_batch(args[0]), sum(int(d) for d in layer.attrs.get("inputdimensions") or []))
    return [(shape, math.prod(shape) * 4, "")]


@size_rule("CastMap", domain=ML_DOMAIN)
def _cast_map_size(layer: Any, args: list[Any]) -> list[tuple[tuple[int, ...], int, str]]:
    sparse = text(layer.attrs.get("map_form", "DENSE")).upper() == "SPARSE"
    width = int(layer.attrs.get("max_map", 1)) if sparse else len(args[0]) if isinstance(args[0], dict) else 1
    return [((1, width), width * 8, "")]


@size_rule("DictVectorizer", domain=ML_DOMAIN)
def _dict_vectorizer_size(layer: Any, args: list[Any]) -> list[tuple[tuple[int, ...], int, str]]:
    maps = len(args[0]) if isinstance(args[0], list) else 1
    shape = (maps, _count(layer.attrs, "int64_vocabulary", "string_vocabulary"))
    return [(shape, math.prod(shape) * 8, "")]
