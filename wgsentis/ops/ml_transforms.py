"""Numpy kernels of the ``ai.onnx.ml`` feature transforms and map operators that skl2onnx and onnxmltools emit
around a model: Scaler, Normalizer, Imputer, Binarizer, OneHotEncoder, LabelEncoder, ArrayFeatureExtractor,
FeatureVectorizer, CategoryMapper, DictVectorizer, CastMap and ZipMap. They build on the helpers ops/ml.py shares
with every ML family (attribute readers, class labels); their size rules are ops/ml.py's, beside the other ML
ops'. Their GPU programs are ops/ml_gpu.py's and ops/ml_pixel.py's.

Semantics follow the ONNX ai.onnx.ml specs and, where the spec is vague (CastMap's fill values), what ONNX
Runtime computes, since models exported by those converters are validated against it. Maps are Python dicts:
DictVectorizer and CastMap take a dict (DictVectorizer also a list of dicts, one per row) and ZipMap returns a
sequence (list) of dicts.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from wgsentis.ops.ml import ML_DOMAIN, object_array, choice, class_labels, ints, text
from wgsentis.ops.registry import register
from wgsentis.ops.tensor import check_indices


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
    """Each row (the last axis) divided by its max, its L1 norm or its L2 norm, as ONNX Runtime computes it in
    float32: the max skips NaN (it starts at float32's lowest value, and NaN is never greater), the norms are
    summed one element after the other; a row whose divisor is 0 is kept as is. L2 writes sqrt(x^2 / sum),
    negated where x < 0, so a row whose squares overflow gives NaN where x^2 is infinite (inf / inf)."""
    how = choice(norm, ("MAX", "L1", "L2"), "norm")
    x = np.asarray(X)
    rows = x.reshape(1, -1) if x.ndim <= 1 else x
    f = rows.astype(np.float32)
    if f.shape[-1] == 0:
        return f.reshape(x.shape)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        if how == "MAX":
            lowest = np.finfo(np.float32).min
            div = np.where(np.isnan(f), lowest, f).max(axis=-1, keepdims=True, initial=lowest)
        elif how == "L1":
            div = _running_sum(np.abs(rows).astype(np.float32))
        else:
            squares = (rows * rows).astype(np.float32)  # in X's own type, then float32, as ORT squares
            div = _running_sum(squares)
            root = np.sqrt(squares / np.where(div == 0, np.float32(1), div))
            out = np.where(div == 0, f, np.where(rows < 0, -root, root))
            return out.reshape(x.shape).astype(np.float32)
        out = np.where(div == 0, f, f / np.where(div == 0, np.float32(1), div))
    return out.reshape(x.shape).astype(np.float32)


def _running_sum(values: np.ndarray) -> np.ndarray:
    """The float32 sum of each row's values added one after the other (ORT's loop; numpy's sum is pairwise),
    (..., 1)."""
    return np.cumsum(values, axis=-1, dtype=np.float32)[..., -1:]


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


# A value that is none of OneHotEncoder's categories, with zeros=0: the error of every backend.
ONE_HOT_UNKNOWN_ERROR = "X holds a value that is not one of the categories (zeros=0) at flat index {index}"


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
        # (Named by its place, as the GPU programs' fault words can name it.)
        raise ValueError(ONE_HOT_UNKNOWN_ERROR.format(index=int(np.flatnonzero(index < 0)[0])))
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
    strings = key_of is text
    for m in maps:  # ORT refuses a map of the other key type; str(1) would quietly match the vocabulary's "1"
        wrong = next((k for k in m if isinstance(k, str | bytes) != strings or isinstance(k, bool)), None)
        if wrong is not None:
            raise TypeError(f"input X holds the {type(wrong).__name__} key {wrong!r}, but the node's "
                            f"{'string' if strings else 'int64'}_vocabulary takes a map of "
                            f"{'string' if strings else 'int64'} keys")
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
        out = object_array(values) if dtype is object else np.array(values, dtype=dtype)
        return out.reshape(1, -1)
    width = int(max_map)
    if width < 0:
        raise ValueError(f"max_map must not be negative, got {width}")
    if items and items[0][0] < 0:
        raise ValueError(f"a SPARSE map's keys are indices: key {items[0][0]} is negative")
    out = object_array(["0.f"] * width) if dtype is object else np.zeros(width, dtype=dtype)
    for key, value in items:
        if key < width:
            out[key] = _cast_map_value(value, to)
    return out.reshape(1, width)
