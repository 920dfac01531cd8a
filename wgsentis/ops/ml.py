"""Numpy kernels of the ``ai.onnx.ml`` operators that skl2onnx and onnxmltools emit, the tree ensembles aside
(ops/ml_trees.py): linear and SVM models, the feature transforms (Scaler, Normalizer, Imputer, Binarizer,
OneHotEncoder, LabelEncoder, ArrayFeatureExtractor, FeatureVectorizer, CategoryMapper, DictVectorizer, CastMap)
and ZipMap; the helpers every ML family shares (attribute readers, the post transforms, label picking), which
ops/ml_trees.py and the GPU programs (ops/ml_gpu.py, ops/ml_pixel.py) import; and the size rules of the ops
whose output can outgrow their input, the tree ensembles' included.

Semantics follow the ONNX ai.onnx.ml specs and, where the spec is vague (binary classifiers' single score,
SOFTMAX_ZERO, PROBIT, CastMap's fill values), what ONNX Runtime computes, since models exported by those
converters are validated against it. Maps are Python dicts: DictVectorizer and CastMap take a dict
(DictVectorizer also a list of dicts, one per row) and ZipMap returns a sequence (list) of dicts.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from wgsentis.budget import size_rule
from wgsentis.ops.registry import register
from wgsentis.ops.tensor import check_indices

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
        return _object_array([text(s) for s in strings]), True
    return ints(numbers), False


def _object_array(values: list) -> np.ndarray:
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
    return labels[index] if labels.dtype != object else _object_array(labels[index].tolist())


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
            labels = _object_array(["0", "1"]) if strings else np.array([0, 1], dtype=np.int64)
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
        fallback = _object_array(["0", "1"]) if strings else np.array([0, 1], dtype=np.int64)
        return pick(fallback, (best > 0).astype(np.int64)), apply_post_transform(scores, post).astype(np.float32)
    return pick(labels, winner), apply_post_transform(scores, post).astype(np.float32)


# ----------------------------------------------------------------------------------------------
# feature transforms
# ----------------------------------------------------------------------------------------------


@register("Scaler", 1, domain=ML_DOMAIN)
def scaler(ctx, X, *, offset=None, scale=None):
    """(X - offset) * scale along the last axis (each of length 1 or the feature count), as float32."""
    x = np.asarray(X).astype(np.float32)
    off = np.asarray(offset if offset is not None else [0.0], dtype=np.float32)
    mul = np.asarray(scale if scale is not None else [1.0], dtype=np.float32)
    return ((x - off) * mul).astype(np.float32)


@register("Normalizer", 1, domain=ML_DOMAIN)
def normalizer(ctx, X, *, norm="MAX"):
    """Each row divided by its max, its L1 norm or its L2 norm; a row whose divisor is 0 is kept as is."""
    how = choice(norm, ("MAX", "L1", "L2"), "norm")
    x = np.asarray(X).astype(np.float32)
    rows = x.reshape(1, -1) if x.ndim <= 1 else x
    if how == "MAX":
        div = rows.max(axis=-1, keepdims=True)
    elif how == "L1":
        div = np.abs(rows).sum(axis=-1, keepdims=True)
    else:
        div = np.sqrt((rows * rows).sum(axis=-1, keepdims=True))
    out = np.where(div == 0, rows, rows / np.where(div == 0, 1, div))
    return out.reshape(x.shape).astype(np.float32)


@register("Imputer", 1, domain=ML_DOMAIN)
def imputer(ctx, X, *, imputed_value_floats=None, imputed_value_int64s=None, replaced_value_float=0.0,
            replaced_value_int64=0):
    """Replace the elements equal to the replaced value (NaN matches NaN) with the imputed value of their
    feature (the last axis), or with the single imputed value."""
    x = np.asarray(X)
    if x.dtype.kind == "f":
        values, target = np.asarray(imputed_value_floats or [], dtype=x.dtype), float(replaced_value_float)
    else:
        values, target = np.asarray(imputed_value_int64s or [], dtype=x.dtype), int(replaced_value_int64)
    if values.size == 0:
        raise ValueError("Imputer needs the imputed values of X's type")
    features = x.shape[-1] if x.ndim else 1
    if values.size not in (1, features):
        raise ValueError(f"{values.size} imputed values for {features} features")
    hit = np.isnan(x) if isinstance(target, float) and math.isnan(target) else x == target
    return np.where(hit, values, x).astype(x.dtype)


def _string_keys(X: np.ndarray) -> np.ndarray:
    return np.array([text(v) for v in X.reshape(-1).tolist()], dtype=object)


def _lookup(keys: np.ndarray, table: np.ndarray) -> np.ndarray:
    """The index of each key in ``table`` (first occurrence), -1 where absent; vectorised by sorting."""
    if table.size == 0:
        return np.full(keys.shape, -1, dtype=np.int64)
    order = np.argsort(table, kind="stable")
    ordered = table[order]
    pos = np.searchsorted(ordered, keys)
    pos_ok = np.minimum(pos, ordered.size - 1)
    found = (pos < ordered.size) & (ordered[pos_ok] == keys)
    return np.where(found, order[pos_ok], -1).astype(np.int64)


@register("OneHotEncoder", 1, domain=ML_DOMAIN)
def one_hot_encoder(ctx, X, *, cats_int64s=None, cats_strings=None, zeros=1):
    """A new last axis of len(categories) with a 1 at each element's category (numbers cast to int64)."""
    x = np.asarray(X)
    if cats_strings is not None and len(cats_strings):
        if x.dtype.kind not in "OUS":
            raise TypeError("cats_strings needs a string input")
        index = _lookup(_string_keys(x), np.array([text(c) for c in cats_strings], dtype=object))
        count = len(cats_strings)
    elif cats_int64s is not None and len(cats_int64s):
        if x.dtype.kind not in "fiub":
            raise TypeError("cats_int64s needs a numeric input")
        index = _lookup(x.reshape(-1).astype(np.int64), ints(cats_int64s))
        count = len(cats_int64s)
    else:
        raise ValueError("OneHotEncoder needs cats_int64s or cats_strings")
    if not int(zeros) and np.any(index < 0):
        bad = x.reshape(-1)[int(np.flatnonzero(index < 0)[0])]
        raise ValueError(f"value {bad!r} is not one of the categories (zeros=0)")
    out = np.zeros((index.size, count), dtype=np.float32)
    found = np.flatnonzero(index >= 0)
    out[found, index[found]] = 1.0
    return out.reshape(*x.shape, count)


@register("ZipMap", 1, domain=ML_DOMAIN)
def zip_map(ctx, X, *, classlabels_int64s=None, classlabels_strings=None):
    """One dict per row of X, label -> score: a sequence of maps, returned as a list of dicts (wgsentis
    has no map tensor; a list is how it carries sequences)."""
    labels, strings = class_labels(classlabels_int64s, classlabels_strings)
    x = np.asarray(X)
    rows = x.reshape(1, -1) if x.ndim <= 1 else x.reshape(x.shape[0], -1)
    if rows.shape[1] != labels.size:
        raise ValueError(f"X has {rows.shape[1]} columns, ZipMap {labels.size} labels")
    keys = [str(k) for k in labels.tolist()] if strings else [int(k) for k in labels.tolist()]
    return [dict(zip(keys, row, strict=True)) for row in rows.astype(np.float32).tolist()]


@register("FeatureVectorizer", 1, domain=ML_DOMAIN)
def feature_vectorizer(ctx, *inputs, inputdimensions=None):
    """The inputs as (N, C) float32 blocks, each cut or zero-padded to its input dimension, side by side."""
    dims = ints(inputdimensions)
    if dims.size != len(inputs):
        raise ValueError(f"{len(inputs)} inputs but {dims.size} inputdimensions")
    blocks = []
    for value, width in zip(inputs, dims.tolist(), strict=True):
        x = np.asarray(value)
        x = x.reshape(1, -1) if x.ndim <= 1 else x.reshape(x.shape[0], -1)
        block = np.zeros((x.shape[0], width), dtype=np.float32)
        take = min(width, x.shape[1])
        block[:, :take] = x[:, :take]
        blocks.append(block)
    if len({b.shape[0] for b in blocks}) > 1:
        raise ValueError("the inputs have different row counts")
    return np.concatenate(blocks, axis=1)


@register("CategoryMapper", 1, domain=ML_DOMAIN)
def category_mapper(ctx, X, *, cats_int64s=None, cats_strings=None, default_int64=-1, default_string="_Unused"):
    """Strings to their paired int64 (default_int64 when absent), or int64 to their paired string."""
    codes = ints(cats_int64s)
    strings = np.array([text(s) for s in (cats_strings or [])], dtype=object)
    if codes.size != strings.size:
        raise ValueError("cats_int64s and cats_strings must have the same length")
    x = np.asarray(X)
    if x.dtype.kind in "OUS":
        index = _lookup(_string_keys(x), strings)
        return np.where(index >= 0, codes[np.maximum(index, 0)] if codes.size else 0,
                        int(default_int64)).astype(np.int64).reshape(x.shape)
    index = _lookup(x.reshape(-1).astype(np.int64), codes)
    out = np.empty(index.size, dtype=object)
    out[:] = text(default_string)
    found = np.flatnonzero(index >= 0)
    out[found] = strings[index[found]]
    return out.reshape(x.shape)


@register("DictVectorizer", 1, domain=ML_DOMAIN)
def dict_vectorizer(ctx, X, *, int64_vocabulary=None, string_vocabulary=None):
    """A map (dict) to a (1, len(vocabulary)) row holding each key's value at its vocabulary index, zeros
    elsewhere; a list of maps gives one row each. Keys outside the vocabulary are ignored, as ORT does."""
    if string_vocabulary is not None and len(string_vocabulary):
        vocabulary: dict[Any, int] = {text(k): i for i, k in reversed(list(enumerate(string_vocabulary)))}
        key_of, width = text, len(string_vocabulary)
    elif int64_vocabulary is not None and len(int64_vocabulary):
        vocabulary = {int(k): i for i, k in reversed(list(enumerate(int64_vocabulary)))}
        key_of, width = int, len(int64_vocabulary)
    else:
        raise ValueError("DictVectorizer needs int64_vocabulary or string_vocabulary")
    maps = X if isinstance(X, list | tuple) else [X]
    if not all(isinstance(m, dict) for m in maps):
        raise TypeError(f"DictVectorizer expects a map (dict), got {type(X).__name__}")
    values = [v for m in maps for v in m.values()]
    dtype = np.asarray(values).dtype if values else np.float32
    if dtype.kind in "OUS":
        dtype = np.dtype(object)
    out = np.zeros((len(maps), width), dtype=dtype)
    for r, m in enumerate(maps):
        for key, value in m.items():
            col = vocabulary.get(key_of(key))
            if col is not None:
                out[r, col] = value
    return out


@register("Binarizer", 1, domain=ML_DOMAIN)
def binarizer(ctx, X, *, threshold=0.0):
    """1 where X > threshold, else 0, in X's type. A NaN is refused, as ORT refuses it (it is neither)."""
    x = np.asarray(X)
    if x.dtype.kind == "f" and np.isnan(x).any():
        raise ValueError(f"X holds a NaN at flat index {int(np.flatnonzero(np.isnan(x.reshape(-1)))[0])}")
    return (x > np.asarray(threshold, dtype=np.float32).astype(x.dtype)).astype(x.dtype)


@register("ArrayFeatureExtractor", 1, domain=ML_DOMAIN)
def array_feature_extractor(ctx, X, Y):
    """X's last-axis entries at indices Y (0 .. last dim - 1, as ORT checks them); a 1-D X gives (1, k)."""
    x = np.asarray(X)
    index = np.asarray(Y).astype(np.int64, copy=False).reshape(-1)
    check_indices(ctx, index, x.shape[-1], "Y", negative_ok=False)
    selected = x[..., index]
    return selected.reshape(1, -1) if x.ndim == 1 else selected


def _typed_values(plain_floats: Any, plain_ints: Any, plain_strings: Any, tensor: Any, what: str) -> np.ndarray:
    """LabelEncoder's keys or values: float32, int64 or str (an object array), or a *_tensor's own type."""
    if tensor is not None:
        array = np.asarray(tensor).reshape(-1)
        return _string_keys(array) if array.dtype.kind in "OUS" else array
    if plain_floats is not None:
        return np.asarray(plain_floats, dtype=np.float32)
    if plain_ints is not None:
        return ints(plain_ints)
    if plain_strings is not None:
        return _string_keys(np.asarray(plain_strings, dtype=object))
    raise ValueError(f"LabelEncoder needs a {what}_* attribute")


def _encode(X: np.ndarray, keys: np.ndarray, values: np.ndarray, default: Any, nan_key: bool = False) -> np.ndarray:
    """Each element of X replaced by the value of the first equal key, else ``default``; a NaN key matches a NaN
    element where ``nan_key`` (opset 4; before it, as in ORT's kernel, NaN equals nothing)."""
    x = np.asarray(X)
    if keys.size != values.size:
        raise ValueError(f"{keys.size} keys but {values.size} values")
    if keys.dtype == object:
        if x.dtype.kind not in "OUS":
            raise TypeError(f"string keys need a string input, got {x.dtype}")
        index = _lookup(_string_keys(x), keys)
    else:
        if x.dtype.kind not in "fiub":
            raise TypeError(f"numeric keys need a numeric input, got {x.dtype}")
        flat = x.reshape(-1)
        nan_keys = np.flatnonzero(np.isnan(keys)) if keys.dtype.kind == "f" else np.zeros(0, np.int64)
        plain = np.flatnonzero(~np.isnan(keys)) if keys.dtype.kind == "f" else np.arange(keys.size)
        found = _lookup(flat.astype(keys.dtype), keys[plain])
        index = np.where(found >= 0, plain[np.maximum(found, 0)], -1)
        if nan_key and nan_keys.size and flat.dtype.kind == "f":
            index = np.where(np.isnan(flat), nan_keys[0], index)
    if values.dtype == object:
        out = np.empty(index.size, dtype=object)
        out[:] = default
        hit = np.flatnonzero(index >= 0)
        out[hit] = values[index[hit]]
        return out.reshape(x.shape)
    return np.where(index >= 0, values[np.maximum(index, 0)] if values.size else default,
                    np.asarray(default).astype(values.dtype)).astype(values.dtype).reshape(x.shape)


@register("LabelEncoder", 1, domain=ML_DOMAIN)
def label_encoder_1(ctx, X, *, classes_strings=None, default_int64=-1, default_string="_Unused"):
    """Strings to their index in classes_strings (default_int64 when absent), or int64 indices to strings."""
    classes = _string_keys(np.asarray(classes_strings or [], dtype=object))
    positions = np.arange(classes.size, dtype=np.int64)
    if np.asarray(X).dtype.kind in "OUS":
        return _encode(X, classes, positions, int(default_int64))
    return _encode(X, positions, classes, text(default_string))


def _label_default(values: np.ndarray, default_tensor: Any, default_float: Any, default_int64: Any,
                   default_string: Any) -> Any:
    """The value for a missing key: default_tensor's when given, else the default_* of the values' type."""
    if default_tensor is not None:
        value = np.asarray(default_tensor).reshape(-1)[0]
        return text(value) if values.dtype == object else value
    if values.dtype == object:
        return text(default_string)
    if values.dtype.kind == "f":
        return float(default_float)
    return int(default_int64)


@register("LabelEncoder", 2, domain=ML_DOMAIN)
def label_encoder_2(ctx, X, *, default_float=-0.0, default_int64=-1, default_string="_Unused", keys_floats=None,
                    keys_int64s=None, keys_strings=None, values_floats=None, values_int64s=None, values_strings=None):
    """Map keys to values: one keys_* and one values_* attribute (float32, int64 or strings)."""
    keys = _typed_values(keys_floats, keys_int64s, keys_strings, None, "keys")
    values = _typed_values(values_floats, values_int64s, values_strings, None, "values")
    return _encode(X, keys, values, _label_default(values, None, default_float, default_int64, default_string))


@register("LabelEncoder", 4, domain=ML_DOMAIN)
def label_encoder(ctx, X, *, default_float=-0.0, default_int64=-1, default_string="_Unused", default_tensor=None,
                  keys_floats=None, keys_int64s=None, keys_strings=None, keys_tensor=None, values_floats=None,
                  values_int64s=None, values_strings=None, values_tensor=None):
    """Map keys to values; keys_tensor / values_tensor / default_tensor carry any of the spec's types."""
    keys = _typed_values(keys_floats, keys_int64s, keys_strings, keys_tensor, "keys")
    values = _typed_values(values_floats, values_int64s, values_strings, values_tensor, "values")
    default = _label_default(values, default_tensor, default_float, default_int64, default_string)
    return _encode(X, keys, values, default, nan_key=True)


_CAST_MAP_TYPES = {"TO_FLOAT": np.float32, "TO_INT64": np.int64, "TO_STRING": object}


def _cast_map_value(value: Any, to: str) -> Any:
    """One map value converted as ORT converts it: floats print as C's %f, strings parse as stof/stoll do."""
    if to == "TO_STRING":
        return text(value) if isinstance(value, str | bytes) else f"{float(value):f}"
    if isinstance(value, str | bytes):
        string = text(value)
        if to == "TO_FLOAT":
            return float(string)
        try:
            return int(string)
        except ValueError:
            return int(float(string))
    return float(value) if to == "TO_FLOAT" else int(value)  # int() truncates toward zero, as a C cast


@register("CastMap", 1, domain=ML_DOMAIN)
def cast_map(ctx, X, *, cast_to="TO_FLOAT", map_form="DENSE", max_map=1):
    """A map int64 -> string|float (a dict) as a (1, n) tensor of ``cast_to``'s type: DENSE, the values in key
    order; SPARSE, a row of max_map entries with each value at its key (keys past the row are dropped, absent
    keys are 0, or "0.f" for strings, as ORT writes them)."""
    if not isinstance(X, dict):
        raise TypeError(f"CastMap expects a map (dict), got {type(X).__name__}")
    to = choice(cast_to, tuple(_CAST_MAP_TYPES), "cast_to")
    form = choice(map_form, ("DENSE", "SPARSE"), "map_form")
    items = sorted((int(k), v) for k, v in X.items())
    dtype = _CAST_MAP_TYPES[to]
    if form == "DENSE":
        values = [_cast_map_value(v, to) for _, v in items]
        out = _object_array(values) if dtype is object else np.array(values, dtype=dtype)
        return out.reshape(1, -1)
    width = int(max_map)
    if width < 0:
        raise ValueError(f"max_map must not be negative, got {width}")
    if items and items[0][0] < 0:
        raise ValueError(f"a SPARSE map's keys are indices: key {items[0][0]} is negative")
    out = _object_array(["0.f"] * width) if dtype is object else np.zeros(width, dtype=dtype)
    for key, value in items:
        if key < width:
            out[key] = _cast_map_value(value, to)
    return out.reshape(1, width)


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
