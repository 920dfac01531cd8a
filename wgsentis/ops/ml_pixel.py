"""gpu-pixel programs of the ai.onnx.ml operators but the tree ensembles (those are ops/ml_trees_pixel.py's),
from the host preparation that ops/ml_gpu.py shares with the gpu-compute programs (the same exactness rules, the
same declined cases: they run the numpy kernel).

Linear and SVM models: pixel/ml_dot.wgsl draws the kernel stage and the scores four columns a fragment,
pixel/ml_finish.wgsl the outputs (the rules of compute/ml_rows.wgsl). The elementwise transforms are ml_gpu's
broadcast maps (lane draws here), ArrayFeatureExtractor the pixel Gather, Normalizer pixel/ml_normalize.wgsl,
FeatureVectorizer one map draw over its inputs. ``matrix_texture`` serves the tree ensembles' programs too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from wgsentis.backends.gpu.tensors import GTensor, loop_passes
from wgsentis.backends.pixel_layout import MAX_RANK
from wgsentis.ops import ml, ml_gpu
from wgsentis.ops import indexing_pixel
from wgsentis.ops.registry import GPU_PIXEL, register

# Inputs one FeatureVectorizer draw reads: the parameter block (tensors.PARAM_WORDS) holds the output's and 7 inputs'
# addressing (14 words each) and their column spans (2 words each) after the count.
MAX_INPUTS = 7


def _pixel(op: str):
    return register(op, 1, domain=ml.ML_DOMAIN, backend=GPU_PIXEL)


def matrix_texture(rec, X: Any, rows: int, features: int, name: str = "") -> GTensor | None:
    """X as a (rows, features) texture tensor blocked along the features, or None."""
    t = rec.tensor(X, name, axis=-1)
    if t is None or len(t.shape) > MAX_RANK:
        return None
    t = rec.reshape(t, (rows, features), axis=-1)
    return t if t.layout.axis == 1 else rec.relayout(t, 1)


# -- linear and SVM models ------------------------------------------------------------------------------------------


def _dot(rec, a: GTensor, columns_first: np.ndarray, bias: np.ndarray, model: ml_gpu.ScoreModel, kernel: bool,
         name: str) -> GTensor:
    """One ml_dot.wgsl draw: (rows, C) = kernel(a, W) + bias, W given (C, K) and uploaded transposed."""
    w_t = rec.derived(("ml_pixel", "transposed"), (columns_first,), lambda: columns_first.T.copy())
    count = columns_first.shape[0]
    w = rec.upload(w_t, f"{name}.w")
    b = rec.upload(bias, f"{name}.b")
    out = rec.alloc((a.shape[0], count), np.float32, -1)
    params = [out.layout.texels, count, a.shape[1], model.gamma if kernel else 1.0, model.coef0 if kernel else 0.0,
              model.degree if kernel else 1, out.layout.shift, a.layout.shift, w.layout.shift, b.layout.shift]
    rec.draw("pixel/ml_dot.wgsl", [a, w, b], [out], params, constants={"KERNEL": model.kernel if kernel else 0})
    return out


def _score_build(rec, layer, X) -> Any:
    """Record a linear or SVM layer: kernel stage, scores, outputs (labels in a second draw)."""
    dims = ml_gpu.rows_of(X) if getattr(X, "dtype", None) == np.float32 else None
    if dims is None or dims[0] == 0:
        return NotImplemented
    rows, features = dims
    model = ml_gpu.score_model(rec, layer, features)
    if model is None or not model.fits(rec):
        return NotImplemented
    a = matrix_texture(rec, X, rows, features, f"{layer.name}:X")
    if a is None:
        return NotImplemented
    if model.vectors is not None:
        count = model.vectors.shape[0]
        zeros = rec.derived(("ml_zeros", count), (), lambda: np.zeros(count, np.float32))
        a = _dot(rec, a, model.vectors, zeros, model, True, f"{layer.name}.vectors")
    scores = _dot(rec, a, model.weights, model.bias, model, False, f"{layer.name}.weights")
    labels = rec.upload(model.labels, f"{layer.name}.labels")
    outputs = [rec.alloc((rows, model.out_columns), np.float32, -1)]
    if model.labelled:
        outputs.insert(0, rec.alloc((rows,), np.int64, -1))
    for out in outputs:
        first = out.dtype == np.float32
        rec.draw("pixel/ml_finish.wgsl", [scores, labels], [out],
                 [rows, model.columns, model.classes, model.flags, model.out_columns, out.layout.texels,
                  out.layout.shift, scores.layout.shift, labels.layout.shift],
                 constants={"POST": model.post, "WIN": model.win, "OUTPUT": 0 if first else 1},
                 subs={"OUT": "f32" if first else "i32"})
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


@_pixel("LinearRegressor")
def linear_regressor(rec, layer, X, **attrs):
    return _score_build(rec, layer, X)


@_pixel("LinearClassifier")
def linear_classifier(rec, layer, X, **attrs):
    return _score_build(rec, layer, X)


@_pixel("SVMRegressor")
def svm_regressor(rec, layer, X, **attrs):
    return _score_build(rec, layer, X)


@_pixel("SVMClassifier")
def svm_classifier(rec, layer, X, **attrs):
    return _score_build(rec, layer, X)


# -- feature transforms ---------------------------------------------------------------------------------------------


@_pixel("Scaler")
def scaler(rec, layer, X, *, offset=None, scale=None, **attrs):
    return ml_gpu.scaler_map(rec, layer, X, offset, scale)


@_pixel("Binarizer")
def binarizer(rec, layer, X, *, threshold=0.0, **attrs):
    return ml_gpu.binarizer_map(rec, layer, X, threshold)


@_pixel("Imputer")
def imputer(rec, layer, X, **attrs):
    return ml_gpu.imputer_map(rec, layer, X, **attrs)


@_pixel("OneHotEncoder")
def one_hot_encoder(rec, layer, X, **attrs):
    return ml_gpu.one_hot_map(rec, layer, X, **attrs)


@_pixel("ArrayFeatureExtractor")
def array_feature_extractor(rec, layer, X, Y, **attrs):
    index = ml_gpu.feature_indices(rec, layer, X, Y)
    if index is None:
        return NotImplemented
    if isinstance(index, GTensor):
        index = rec.reshape(index, (index.size,))
    y = indexing_pixel.gather_along(rec, layer, X, index, -1, negative_ok=False, what="Y")
    if y is NotImplemented or len(X.shape) != 1:
        return y
    return rec.reshape(y, (1, index.size))


@_pixel("Normalizer")
def normalizer(rec, layer, X, *, norm="MAX", **attrs):
    how = ml_gpu.NORMS.get(ml.text(norm).upper())
    if how is None or getattr(X, "dtype", None) != np.float32 or not 0 < len(X.shape) <= MAX_RANK:
        return NotImplemented
    x = rec.tensor(X, f"{layer.name}:X", axis=-1)
    length = X.shape[-1]
    if x is None or not length or not rec.loops_fit(loop_passes(-(-length // 4), 4) + loop_passes(4)):
        return NotImplemented
    y = rec.alloc(X.shape, np.float32, -1)
    if y.size:
        rec.draw("pixel/ml_normalize.wgsl", [x], [y], [y.layout.texels, length, y.layout.shift],
                 constants={"NORM": how}, subs={"DIV": rec.ctx.division_function})
    return y


@_pixel("FeatureVectorizer")
def feature_vectorizer(rec, layer, *inputs, inputdimensions=None, **attrs):
    """One map draw: each output column reads the input it falls in (cut or zero-padded to its width)."""
    parts = ml_gpu.vectorizer_widths(inputs, inputdimensions)
    if parts is None or len(inputs) > MAX_INPUTS:
        return NotImplemented
    rows, total = parts[0][0], sum(p[2] for p in parts)
    tensors, spans, offset = [], [], 0
    for k, (value, (_, columns, width)) in enumerate(zip(inputs, parts, strict=True)):
        t = matrix_texture(rec, value, rows, columns, f"{layer.name}:{k}")
        if t is None:
            return NotImplemented
        tensors.append(t)
        spans += [offset, min(width, columns)]  # where input k's columns begin in the output, how many it gives
        offset += width
    return rec.map(tensors, (rows, total), np.float32, -1, "pixel/body/feature_vectorizer.wgsl",
                   [len(tensors), *spans], by_index=True)
