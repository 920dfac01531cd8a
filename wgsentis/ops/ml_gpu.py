"""gpu-compute programs of the ai.onnx.ml operators but the tree ensembles (those are ops/ml_trees_gpu.py's), and
the host preparation that the gpu-pixel programs (ops/ml_pixel.py) share with them.

The linear and SVM models (LinearRegressor, LinearClassifier, SVMRegressor, SVMClassifier) are resolved once
more from the layer's attributes by ``score_model`` into what both GPU backends run: an optional kernel stage
(an SVM's kernel between each row and each support vector), a dense score stage (Y = A W^T + B: the linear
coefficients, an SVM's dual coefficients laid over its support vectors one row per one-vs-one pair) and a
finish (the post transform, the int64 label by argmax or one-vs-one votes, the binary rules of ORT that the
numpy kernels follow); all in float32, where the numpy kernels sum in float64 and ORT in float32: the
results agree with both to float32 rounding. String labels and SVM probabilities (libsvm's iterative pairwise
coupling) stay on the numpy kernel. The feature transforms (Scaler, Binarizer, Imputer, OneHotEncoder) are one
broadcast map each (quant_gpu.map3, which also draws on gpu-pixel), ArrayFeatureExtractor is the backend's
Gather (indices computed on the device checked where read, negatives out of range), Normalizer and
FeatureVectorizer have their own small programs. The gpu-pixel builders are in ops/ml_pixel.py, from the same
host preparation. ``POSTS`` (the shaders' post transform codes) and ``rows_of`` serve the tree ensembles'
programs too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from wgsentis.backends.gpu.shader_gen import snippet
from wgsentis.backends.gpu.tensors import GTensor, loop_passes
from wgsentis.ops import ml, ml_transforms
from wgsentis.ops import indexing_gpu
from wgsentis.ops.quant_gpu import map3
from wgsentis.ops.registry import GPU_COMPUTE, GPU_PIXEL, register
from wgsentis.ops.tensor_gpu import MAX_RANK, device_tensor

# The shaders' POST codes (ml_rows.wgsl, tree_finish.wgsl): the tree ensembles' programs use them too.
POSTS = {"NONE": 0, "SOFTMAX": 1, "LOGISTIC": 2, "SOFTMAX_ZERO": 3, "PROBIT": 4}

# ----------------------------------------------------------------------------------------------
# linear and SVM models
# ----------------------------------------------------------------------------------------------

KERNELS = {"LINEAR": 0, "POLY": 1, "RBF": 2, "SIGMOID": 3}  # ml_dot.wgsl's KERNEL
WIN_NONE, WIN_ARGMAX, WIN_VOTES = 0, 1, 2  # ml_rows.wgsl's WIN
# ml_rows.wgsl's flags
F_ONE_CLASS, F_BINARY, F_COMPLEMENT, F_BEST_SIGN, F_HALF = 1, 2, 4, 8, 16
_INT32 = (-(2**31), 2**31 - 1)


@dataclass
class ScoreModel:
    """A linear or SVM layer as the GPU programs run it, for X of ``features`` columns: the kernel stage
    (``vectors`` (V, F) and its kernel, or None), the score stage (``weights`` (C, V or F), ``bias`` (C,)) and
    the finish (ml_rows.wgsl: WIN, flags, post transform, the int32 label table)."""

    features: int
    vectors: np.ndarray | None
    kernel: int
    gamma: float
    coef0: float
    degree: int
    weights: np.ndarray
    bias: np.ndarray
    win: int
    flags: int
    post: int
    classes: int
    out_columns: int
    labels: np.ndarray  # int32; one word where the model has no label output

    @property
    def columns(self) -> int:
        return self.weights.shape[0]

    @property
    def labelled(self) -> bool:
        return self.win != WIN_NONE

    def fits(self, rec) -> bool:
        """Whether every stage's loops run on the device (``loops_fit``)."""
        inner = self.vectors.shape[0] if self.vectors is not None else self.features
        finish = (3 * loop_passes(self.columns) + loop_passes(self.out_columns)
                  + loop_passes(self.classes, self.classes, self.classes))
        return (rec.loops_fit(loop_passes(self.features, 4) + loop_passes(self.degree))
                and rec.loops_fit(loop_passes(inner, 4)) and rec.loops_fit(finish))


def _f32(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.float32)


def _label_table(labels: np.ndarray) -> np.ndarray | None:
    """int64 labels as int32 words, or None past the int32 range (or strings: the numpy kernel answers)."""
    if labels.dtype == object or labels.size == 0:
        return None
    if labels.min() < _INT32[0] or labels.max() > _INT32[1]:
        return None
    return labels.astype(np.int32)


def _post_code(attrs: dict[str, Any]) -> int:
    return POSTS[ml.choice(attrs.get("post_transform", "NONE"), ml.POST_TRANSFORMS, "post_transform")]


def _kernel_params(attrs: dict[str, Any]) -> tuple[int, float, float, int]:
    kind = ml.choice(attrs.get("kernel_type", "LINEAR"), tuple(KERNELS), "kernel_type")
    params = attrs.get("kernel_params")
    gamma, coef0, degree = ([float(p) for p in params] + [0.0, 0.0, 0.0])[:3] if params else (0.0, 0.0, 0.0)
    if kind == "POLY" and (degree < 0 or degree != int(degree) or degree > 64):
        raise ValueError("a POLY degree the GPU does not raise by repeated products")
    return KERNELS[kind], gamma, coef0, int(degree)


def _linear_regressor(attrs: dict[str, Any], features: int) -> ScoreModel:
    targets = int(attrs.get("targets", 1))
    coef = ml.matrix(attrs.get("coefficients"), targets, "coefficients")
    bias = ml.floats(attrs.get("intercepts"))
    bias = ml.base(bias, targets) if bias.size else np.zeros(targets)
    if coef.shape[1] != features:
        raise ValueError("feature count")
    return ScoreModel(features, None, 0, 0.0, 0.0, 0, _f32(coef), _f32(bias), WIN_NONE, 0, _post_code(attrs), 0,
                      targets, np.zeros(1, np.int32))


def _linear_classifier(attrs: dict[str, Any], features: int) -> ScoreModel:
    post = _post_code(attrs)
    labels, strings = ml.class_labels(attrs.get("classlabels_ints"), attrs.get("classlabels_strings"))
    if strings:
        raise ValueError("string labels stay on the host")
    bias = ml.floats(attrs.get("intercepts"))
    count = bias.size if bias.size else max(labels.size, 1)
    coef = ml.matrix(attrs.get("coefficients"), count, "coefficients")
    if coef.shape[1] != features:
        raise ValueError("feature count")
    bias = ml.base(bias, count) if bias.size else np.zeros(count)
    flags, out = 0, count
    if count == 1:
        two = labels.size == 2
        table = labels if two else np.array([0, 1], dtype=np.int64)
        flags = F_BEST_SIGN
        if two:
            flags |= F_BINARY | (F_COMPLEMENT if post != POSTS["LOGISTIC"] else 0)
            out = 1 if post == POSTS["PROBIT"] else 2
    else:
        if labels.size != count:
            raise ValueError("label count")
        table = labels
    words = _label_table(table)
    if words is None:
        raise ValueError("labels past int32")
    return ScoreModel(features, None, 0, 0.0, 0.0, 0, _f32(coef), _f32(bias), WIN_ARGMAX, flags, post, 0, out, words)


def _svm_regressor(attrs: dict[str, Any], features: int) -> ScoreModel:
    kernel, gamma, coef0, degree = _kernel_params(attrs)
    coef = ml.floats(attrs.get("coefficients"))
    rho = ml.floats(attrs.get("rho"))
    offset = np.array([rho[0] if rho.size else 0.0])
    supports = int(attrs.get("n_supports", 0))
    flags = F_ONE_CLASS if int(attrs.get("one_class", 0)) else 0
    if supports > 0:
        vectors = ml.matrix(attrs.get("support_vectors"), supports, "support_vectors")
        if vectors.shape[1] != features or coef.size < supports:
            raise ValueError("shapes")
        return ScoreModel(features, _f32(vectors), kernel, gamma, coef0, degree, _f32(coef[:supports][None, :]),
                          _f32(offset), WIN_NONE, flags, _post_code(attrs), 0, 1, np.zeros(1, np.int32))
    weights = coef.reshape(-1, features)[:1]
    return ScoreModel(features, None, 0, 0.0, 0.0, 0, _f32(weights), _f32(offset), WIN_NONE, flags,
                      _post_code(attrs), 0, 1, np.zeros(1, np.int32))


def _svm_classifier(attrs: dict[str, Any], features: int) -> ScoreModel:
    post = _post_code(attrs)
    kernel, gamma, coef0, degree = _kernel_params(attrs)
    labels, strings = ml.class_labels(attrs.get("classlabels_ints"), attrs.get("classlabels_strings"))
    if strings or labels.size == 0:
        raise ValueError("string or no labels")
    if attrs.get("prob_a") is not None and len(attrs["prob_a"]):
        raise ValueError("probabilities (pairwise coupling) stay on the host")
    classes = labels.size
    per_class = ml.ints(attrs.get("vectors_per_class"))
    coef = ml.floats(attrs.get("coefficients"))
    bias = ml.floats(attrs.get("rho"))
    positive = bool(coef.size == 0 or coef.min() >= 0)
    vectors = None
    if per_class.sum() > 0:
        total = int(per_class.sum())
        vectors = ml.matrix(attrs.get("support_vectors"), total, "support_vectors")
        if vectors.shape[1] != features or per_class.size < classes:
            raise ValueError("shapes")
        dual = coef.reshape(-1, total)
        start = np.concatenate([[0], np.cumsum(per_class)[:-1]])
        pairs = classes * (classes - 1) // 2
        if bias.size < pairs or dual.shape[0] < classes - 1:
            raise ValueError("too few rho or coefficients")
        weights, k = np.zeros((pairs, total)), 0
        for i in range(classes):
            si = slice(int(start[i]), int(start[i] + per_class[i]))
            for j in range(i + 1, classes):
                sj = slice(int(start[j]), int(start[j] + per_class[j]))
                weights[k, si] = dual[j - 1, si]
                weights[k, sj] = dual[i, sj]
                k += 1
        offsets, win = bias[:pairs], WIN_VOTES
    else:
        weights = coef.reshape(classes, -1)
        if weights.shape[1] != features:
            raise ValueError("feature count")
        offsets, win = np.full(classes, bias[0] if bias.size else 0.0), WIN_ARGMAX
    flags, out, table = 0, weights.shape[0], labels
    if bias.size == 1:  # one decision function: a binary problem, as ORT labels it
        if labels.size == 2:
            flags |= F_HALF if positive else 0
            if weights.shape[0] == 1:
                flags |= F_BINARY
                out = 1 if post == POSTS["PROBIT"] else 2
        else:
            flags |= F_BEST_SIGN
            table = np.array([0, 1], dtype=np.int64)
    words = _label_table(table)
    if words is None:
        raise ValueError("labels past int32")
    return ScoreModel(features, None if vectors is None else _f32(vectors), kernel, gamma, coef0, degree,
                      _f32(weights), _f32(offsets), win, flags, post, classes, out, words)


_SCORE_MODELS = {"LinearRegressor": _linear_regressor, "LinearClassifier": _linear_classifier,
                 "SVMRegressor": _svm_regressor, "SVMClassifier": _svm_classifier}


def score_model(rec, layer, features: int) -> ScoreModel | None:
    """The layer's ScoreModel for X of ``features`` columns, its arrays kept once per program (so their uploads
    are too); None where the GPU declines it or the attributes are invalid (the numpy kernel then runs, and
    reports them)."""
    try:
        model = _SCORE_MODELS[layer.op_type](layer.attrs, features)
    except (ValueError, TypeError, KeyError, IndexError):
        return None
    for name in ("vectors", "weights", "bias", "labels"):
        value = getattr(model, name)
        if value is not None:
            setattr(model, name, rec.derived(("ml_scores", layer.op_type, features, name), (layer.attrs,),
                                             lambda v=value: v))
    return model


def rows_of(X: Any) -> tuple[int, int] | None:
    """(rows, features) of X read as the ML ops' (N, F) matrix: 1-D is one row; None for a scalar."""
    shape = tuple(X.shape)
    if not shape:
        return None
    rows = shape[0] if len(shape) > 1 else 1
    return rows, math.prod(shape) // rows if rows else 0


def _score_build(rec, layer, X) -> Any:
    """Record a linear or SVM layer: the kernel stage, the scores, the finish."""
    x = device_tensor(rec, X)
    dims = rows_of(X)
    if x is None or x.dtype != np.float32 or dims is None or dims[0] == 0:
        return NotImplemented
    rows, features = dims
    model = score_model(rec, layer, features)
    if model is None or not model.fits(rec):
        return NotImplemented
    a = rec.view(x, (rows, features))
    if model.vectors is not None:
        count = model.vectors.shape[0]
        kernels = rec.alloc((rows, count), np.float32)
        zeros = rec.derived(("ml_zeros", count), (), lambda: np.zeros(count, np.float32))
        rec.dispatch("compute/ml_dot.wgsl", [a, rec.upload(model.vectors, f"{layer.name}.vectors"),
                                             rec.upload(zeros, "zeros")], [kernels],
                     [rows * count, count, features, model.gamma, model.coef0, model.degree], rows * count,
                     constants={"KERNEL": model.kernel},
                     loops=loop_passes(features) + loop_passes(model.degree))
        a = kernels
    inner = a.shape[1]
    scores = rec.alloc((rows, model.columns), np.float32)
    rec.dispatch("compute/ml_dot.wgsl", [a, rec.upload(model.weights, f"{layer.name}.weights"),
                                         rec.upload(model.bias, f"{layer.name}.bias")], [scores],
                 [rows * model.columns, model.columns, inner, 1.0, 0.0, 1], rows * model.columns,
                 constants={"KERNEL": 0}, loops=loop_passes(inner))
    y = rec.alloc((rows, model.out_columns), np.float32)
    label = rec.alloc((rows,), np.int64) if model.labelled else rec.alloc((1,), np.int32)
    rec.dispatch("compute/ml_finish.wgsl", [scores, rec.upload(model.labels, f"{layer.name}.labels")], [y, label],
                 [rows, model.columns, model.classes, model.flags, model.out_columns], rows,
                 constants={"POST": model.post, "WIN": model.win})
    return (label, y) if model.labelled else y


@register("LinearRegressor", 1, domain=ml.ML_DOMAIN, backend=GPU_COMPUTE)
def linear_regressor(rec, layer, X, **attrs):
    return _score_build(rec, layer, X)


@register("LinearClassifier", 1, domain=ml.ML_DOMAIN, backend=GPU_COMPUTE)
def linear_classifier(rec, layer, X, **attrs):
    return _score_build(rec, layer, X)


@register("SVMRegressor", 1, domain=ml.ML_DOMAIN, backend=GPU_COMPUTE)
def svm_regressor(rec, layer, X, **attrs):
    return _score_build(rec, layer, X)


@register("SVMClassifier", 1, domain=ml.ML_DOMAIN, backend=GPU_COMPUTE)
def svm_classifier(rec, layer, X, **attrs):
    return _score_build(rec, layer, X)


# ----------------------------------------------------------------------------------------------
# feature transforms (the elementwise ones shared with gpu-pixel: ops/ml_pixel.py registers them there)
# ----------------------------------------------------------------------------------------------


def _f32_input(X: Any) -> bool:
    return getattr(X, "dtype", None) == np.float32 and 0 < len(X.shape) <= MAX_RANK


def _int_input(X: Any) -> bool:
    return getattr(X, "dtype", None) in (np.dtype(np.int32), np.dtype(np.int64)) and 0 < len(X.shape) <= MAX_RANK


def _along_last(values: np.ndarray, X: Any) -> bool:
    """Whether a per-feature attribute (one value, or one per entry of X's last axis) broadcasts onto X."""
    return values.ndim == 1 and values.size in (1, X.shape[-1])


def scaler_map(rec, layer, X, offset=None, scale=None) -> Any:
    """(X - offset) * scale in float32, both broadcast along X's last axis (float32 X only)."""
    if not _f32_input(X):
        return NotImplemented
    off = rec.derived(("scaler", "offset"), (layer.attrs,), lambda: np.asarray(
        offset if offset is not None else [0.0], dtype=np.float32).reshape(-1))
    mul = rec.derived(("scaler", "scale"), (layer.attrs,), lambda: np.asarray(
        scale if scale is not None else [1.0], dtype=np.float32).reshape(-1))
    if not (_along_last(off, X) and _along_last(mul, X)):
        return NotImplemented
    return map3(rec, [X, off, mul], "(a - b) * c", np.float32)


# The numpy kernel's error for a NaN, as LayerError wraps it (the device raises it through a value fault).
BINARIZER_NAN_ERROR = "ValueError: X holds a NaN at flat index {index}"


def binarizer_map(rec, layer, X, threshold=0.0) -> Any:
    """1 where X > threshold (threshold as X's type), else 0. A NaN is refused with the numpy kernel's (and ORT's)
    error: the program records it in the fault buffer (a value check), raised when the run's outputs are read."""
    if _f32_input(X):
        x = device_tensor(rec, X)
        if x is None or x.size >= (1 << 30):
            return NotImplemented
        slot = rec.check_indices([1], "values", value_error=BINARIZER_NAN_ERROR)
        th = float(np.float32(threshold))
        if rec.program.backend == GPU_PIXEL:
            t = rec.tensor(x)
            return rec.map([t], t.shape, np.float32, t.layout.axis if t.shape else 0, "pixel/body/ml_binarize.wgsl",
                           [slot, th], faults=True)
        y = rec.alloc(x.shape, np.float32)
        rec.dispatch("compute/ml_binarize.wgsl", [x], [y], [x.size, th, slot], x.size, workgroup=256, faults=True)
        return y
    if _int_input(X):
        value = int(np.asarray(threshold, dtype=np.float32).astype(np.int64))
        if not _INT32[0] <= value <= _INT32[1]:
            return NotImplemented
        th = rec.derived(("binarizer",), (layer.attrs,), lambda: np.array([value], dtype=np.int32))
        return map3(rec, [X, th], snippet("common/expr/ml_binarize_int.wgsl"), X.dtype)
    return NotImplemented


def imputer_map(rec, layer, X, imputed_value_floats=None, imputed_value_int64s=None, replaced_value_float=0.0,
                replaced_value_int64=0) -> Any:
    """The elements equal to the replaced value (NaN matches NaN) replaced by their feature's imputed value."""
    if _f32_input(X):
        values = rec.derived(("imputer",), (layer.attrs,), lambda: np.asarray(
            imputed_value_floats or [], dtype=np.float32))
        target = float(replaced_value_float)
        if math.isnan(target):
            expr, inputs = "common/expr/ml_impute_nan.wgsl", [X, values]
        else:
            replaced = rec.derived(("imputer", "replaced"), (layer.attrs,),
                                   lambda: np.array([target], dtype=np.float32))
            inputs, expr = [X, replaced, values], "common/expr/ml_impute.wgsl"
    elif _int_input(X):
        values = rec.derived(("imputer",), (layer.attrs,), lambda: np.asarray(
            imputed_value_int64s or [], dtype=np.int64))
        target = int(replaced_value_int64)
        if not _INT32[0] <= target <= _INT32[1] or (values.size and (
                values.min() < _INT32[0] or values.max() > _INT32[1])):
            return NotImplemented
        replaced = rec.derived(("imputer", "replaced", X.dtype.str), (layer.attrs,),
                               lambda: np.array([target], dtype=X.dtype))
        typed = rec.derived(("imputer", X.dtype.str), (values,), lambda: values.astype(X.dtype))
        inputs, expr = [X, replaced, typed], "common/expr/ml_impute.wgsl"
    else:
        return NotImplemented
    if values.size == 0 or not _along_last(values, X):
        return NotImplemented
    return map3(rec, inputs, snippet(expr), X.dtype)


def reshaped(rec, x: Any, shape: tuple[int, ...]) -> Any:
    """``x`` (a host array or a device tensor of either backend) read as ``shape``."""
    if isinstance(x, np.ndarray):
        return x.reshape(shape)
    if rec.program.backend == GPU_PIXEL:
        return rec.reshape(x, shape)
    return rec.view(x, shape)


def one_hot_map(rec, layer, X, cats_int64s=None, cats_strings=None, zeros=1) -> Any:
    """int32/int64 X against integer categories (zeros=1: an unknown value gives a row of zeros; zeros=0: it is
    refused, through a value check over X, with the numpy kernel's error naming its flat index). A category
    that repeats an earlier one never matches, as the numpy kernel's first-occurrence lookup has it."""
    if not _int_input(X) or not cats_int64s or (cats_strings and len(cats_strings)):
        return NotImplemented
    if not int(zeros) and (getattr(X, "size", 0) >= (1 << 30) or not rec.loops_fit(loop_passes(len(cats_int64s)))):
        return NotImplemented
    if len(X.shape) + 1 > MAX_RANK:
        return NotImplemented

    def table() -> np.ndarray:
        cats = ml.ints(cats_int64s)
        _, first = np.unique(cats, return_index=True)
        usable = np.zeros(cats.size, dtype=bool)
        usable[first] = True
        usable &= (cats >= _INT32[0]) & (cats <= _INT32[1])  # device integers never hold another value
        return np.stack([np.where(usable, cats, 0), usable]).astype(np.int32)

    words = rec.derived(("one_hot",), (layer.attrs,), table)
    cats = rec.derived(("one_hot", "cats"), (words,), lambda: words[0].copy())
    usable = rec.derived(("one_hot", "usable"), (words,), lambda: words[1].copy())
    if not int(zeros) and X.size:
        _refuse_unknown(rec, X, words)
    x = reshaped(rec, X, (*X.shape, 1))
    return map3(rec, [x, cats, usable], snippet("common/expr/ml_one_hot.wgsl"), np.float32)


def _refuse_unknown(rec, X, words: np.ndarray) -> None:
    """OneHotEncoder zeros=0's value check: every element of X must be a usable category (``words``: the
    categories, then their usable flags); the smallest flat index that is none is raised with the numpy
    kernel's error."""
    slot = rec.check_indices([1], "values", value_error="ValueError: " + ml_transforms.ONE_HOT_UNKNOWN_ERROR)
    count = words.shape[1]
    if rec.program.backend == GPU_PIXEL:
        t = rec.tensor(X)
        cats = rec.tensor(rec.derived(("one_hot", "cats"), (words,), lambda: words[0].copy()))
        usable = rec.tensor(rec.derived(("one_hot", "usable"), (words,), lambda: words[1].copy()))
        rec.map([t, cats, usable], t.shape, np.int32, t.layout.axis if t.shape else 0,
                "pixel/body/ml_category_check.wgsl", [slot, count], faults=True)
        return
    x = device_tensor(rec, X)
    table = device_tensor(rec, rec.derived(("one_hot", "table"), (words,), lambda: words.reshape(-1).copy()))
    rec.dispatch("compute/ml_category_check.wgsl", [x, table], [], [x.size, count, slot], x.size, workgroup=256,
                 faults=True, loops=loop_passes(count))


def feature_indices(rec, layer, X, Y) -> np.ndarray | GTensor | None:
    """ArrayFeatureExtractor's indices: host-known ones flat int64, all within X's last axis; indices computed on
    the device as their tensor, which the gather checks where it reads them (negatives are out of range too, as
    the numpy kernel has it: ``gather_along(..., negative_ok=False)``); None where the GPU programs decline."""
    if getattr(X, "dtype", None) not in (np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.int64)) or \
            not X.shape:
        return None
    host = Y.host if isinstance(Y, GTensor) else Y
    if host is None:
        ok = isinstance(Y, GTensor) and Y.dtype.kind in "iu" and Y.size > 0 and Y.alloc is not None
        return Y if ok else None
    if not isinstance(host, np.ndarray) or host.dtype.kind not in "iu":
        return None
    index = rec.derived(("feature_indices",), (host,), lambda: host.reshape(-1).astype(np.int64))
    if index.size == 0 or index.min() < 0 or index.max() >= X.shape[-1]:
        return None
    return index


def vectorizer_widths(inputs: tuple[Any, ...], dims: Any) -> list[tuple[int, int, int]] | None:
    """FeatureVectorizer's (rows, input columns, width) per input, all float32 with the same row count, or None."""
    widths = ml.ints(dims).tolist()
    if len(widths) != len(inputs) or not inputs or any(w < 0 for w in widths):
        return None
    parts = []
    for value, width in zip(inputs, widths, strict=True):
        dims_of = rows_of(value) if getattr(value, "dtype", None) == np.float32 else None
        if dims_of is None:
            return None
        parts.append((*dims_of, width))
    if len({p[0] for p in parts}) != 1 or parts[0][0] == 0 or sum(widths) == 0:
        return None
    return parts


@register("Scaler", 1, domain=ml.ML_DOMAIN, backend=GPU_COMPUTE)
def scaler(rec, layer, X, *, offset=None, scale=None, **attrs):
    return scaler_map(rec, layer, X, offset, scale)


@register("Binarizer", 1, domain=ml.ML_DOMAIN, backend=GPU_COMPUTE)
def binarizer(rec, layer, X, *, threshold=0.0, **attrs):
    return binarizer_map(rec, layer, X, threshold)


@register("Imputer", 1, domain=ml.ML_DOMAIN, backend=GPU_COMPUTE)
def imputer(rec, layer, X, **attrs):
    return imputer_map(rec, layer, X, **attrs)


@register("OneHotEncoder", 1, domain=ml.ML_DOMAIN, backend=GPU_COMPUTE)
def one_hot_encoder(rec, layer, X, **attrs):
    return one_hot_map(rec, layer, X, **attrs)


@register("ArrayFeatureExtractor", 1, domain=ml.ML_DOMAIN, backend=GPU_COMPUTE)
def array_feature_extractor(rec, layer, X, Y, **attrs):
    index = feature_indices(rec, layer, X, Y)
    if index is None:
        return NotImplemented
    if isinstance(index, GTensor):
        index = rec.view(index, (index.size,))
    y = indexing_gpu.gather_along(rec, layer, X, index, -1, negative_ok=False, what="Y")
    if y is NotImplemented or len(X.shape) != 1:
        return y
    return rec.view(y, (1, index.size))


@register("Normalizer", 1, domain=ml.ML_DOMAIN, backend=GPU_COMPUTE)
def normalizer(rec, layer, X, *, norm="MAX", **attrs):
    """Each row (the last axis) divided by its max, L1 or L2 norm (kept where that is 0): compute/ml_normalize.wgsl,
    one invocation per row."""
    how = NORMS.get(ml.text(norm).upper())
    x = device_tensor(rec, X)
    if how is None or x is None or not _f32_input(X):
        return NotImplemented
    length = X.shape[-1]
    rows = x.size // length if length else 0
    if not rows or not rec.loops_fit(2 * loop_passes(length)):
        return NotImplemented
    y = rec.alloc(X.shape, np.float32)
    rec.dispatch("compute/ml_normalize.wgsl", [x], [y], [rows, length], rows, constants={"NORM": how},
                 subs={"DIV": rec.ctx.division_function}, loops=2 * loop_passes(length))
    return y


NORMS = {"MAX": 0, "L1": 1, "L2": 2}  # ml_normalize.wgsl's NORM


@register("FeatureVectorizer", 1, domain=ml.ML_DOMAIN, backend=GPU_COMPUTE)
def feature_vectorizer(rec, layer, *inputs, inputdimensions=None, **attrs):
    """The inputs' first columns side by side, each cut or zero-padded to its width: one dispatch per input
    (compute/ml_columns.wgsl) into the one output."""
    parts = vectorizer_widths(inputs, inputdimensions)
    tensors = [device_tensor(rec, x) for x in inputs]
    if parts is None or any(t is None for t in tensors):
        return NotImplemented
    rows, total = parts[0][0], sum(p[2] for p in parts)
    y = rec.alloc((rows, total), np.float32)
    offset = 0
    for t, (_, columns, width) in zip(tensors, parts, strict=True):
        if width:
            rec.dispatch("compute/ml_columns.wgsl", [rec.view(t, (rows, columns))], [y],
                         [rows * width, width, min(width, columns), columns, total, offset], rows * width,
                         workgroup=256)
        offset += width
    return y
