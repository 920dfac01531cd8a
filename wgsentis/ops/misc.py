"""Miscellaneous operators (numpy kernels): loss functions (NegativeLogLikelihoodLoss,
SoftmaxCrossEntropyLoss), string ops (StringNormalizer, StringConcat, StringSplit, RegexFullMatch,
TfIdfVectorizer) and the ``ai.onnx.preview.training`` optimizers Adam, Adagrad and Momentum (the
``ai.onnx.ml`` ops live in ops/ml.py, ops/ml_transforms.py and ops/ml_trees.py).
"""

from __future__ import annotations

import re

import numpy as np

from wgsentis.ops.registry import register
from wgsentis.ops.tensor import check_indices

TRAINING_DOMAIN = "ai.onnx.preview.training"


# ----------------------------------------------------------------------------------------------
# Losses
# ----------------------------------------------------------------------------------------------


def _nll(ctx, log_prob: np.ndarray, target: np.ndarray, weight, ignore_index, reduction: str) -> np.ndarray:
    """Negative log-likelihood of (N, C, d...) log-probabilities at (N, d...) class targets."""
    if log_prob.ndim < 2:
        raise ValueError(f"input must have shape (N, C, ...), got {log_prob.shape}")
    if target.shape != (log_prob.shape[0], *log_prob.shape[2:]):
        raise ValueError(f"target shape {target.shape} does not match input shape {log_prob.shape}")
    dtype = log_prob.dtype
    classes = log_prob.shape[1]
    target = target.astype(np.int64)
    ignored = target == ignore_index if ignore_index is not None else np.zeros(target.shape, dtype=bool)
    check_indices(ctx, target[~ignored], classes, "target", negative_ok=False)  # a class: 0 .. C-1
    safe_target = np.where(ignored, 0, target)
    picked = np.take_along_axis(log_prob, safe_target[:, None], axis=1)[:, 0]  # (N, d...)
    loss = np.where(ignored, dtype.type(0), -picked)
    if weight is not None:
        per_item_weight = np.where(ignored, dtype.type(0), weight.astype(dtype)[safe_target])
    else:
        per_item_weight = np.where(ignored, dtype.type(0), dtype.type(1))
    loss = (loss * per_item_weight).astype(dtype)
    if reduction == "none":
        return loss
    if reduction == "sum":
        return np.asarray(loss.sum(), dtype=dtype)
    if reduction == "mean":
        return np.asarray(loss.sum() / per_item_weight.sum(), dtype=dtype)
    raise ValueError(f"unknown reduction {reduction!r}")


@register("NegativeLogLikelihoodLoss", 12)
def negative_log_likelihood_loss(ctx, input, target, weight=None, *, ignore_index=None, reduction="mean"):
    """loss[n, d] = -input[n, target[n, d], d] * weight[target[n, d]], then reduced."""
    return _nll(ctx, input, target, weight, ignore_index, reduction)


@register("SoftmaxCrossEntropyLoss", 12)
def softmax_cross_entropy_loss(ctx, scores, labels, weights=None, *, ignore_index=None, reduction="mean"):
    """NLL of log_softmax(scores, axis=1); the optional second output is that log_softmax."""
    shifted = scores - np.max(scores, axis=1, keepdims=True)
    log_prob = (shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))).astype(scores.dtype)
    loss = _nll(ctx, log_prob, labels, weights, ignore_index, reduction)
    if ctx.num_outputs > 1:
        return loss, log_prob
    return loss


# ----------------------------------------------------------------------------------------------
# Strings
# ----------------------------------------------------------------------------------------------


def _as_str(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _string_array(values, shape) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out.reshape(shape)


@register("StringNormalizer", 10)
def string_normalizer(ctx, X, *, case_change_action="NONE", is_case_sensitive=0, locale=None, stopwords=None):
    """Drop stop-word elements of a (C,) or (1, C) string tensor, then change case."""
    if (X.ndim == 2 and X.shape[0] != 1) or X.ndim not in (1, 2):
        raise ValueError(f"StringNormalizer input must be (C,) or (1, C), got {X.shape}")
    words = [_as_str(w) for w in X.reshape(-1)]
    if stopwords:
        if is_case_sensitive:
            stops = set(stopwords)
            words = [w for w in words if w not in stops]
        else:
            stops = {s.lower() for s in stopwords}
            words = [w for w in words if w.lower() not in stops]
    if case_change_action == "LOWER":
        words = [w.lower() for w in words]
    elif case_change_action == "UPPER":
        words = [w.upper() for w in words]
    elif case_change_action != "NONE":
        raise ValueError(f"unknown case_change_action {case_change_action!r}")
    if not words:
        words = [""]  # the spec keeps one empty string rather than an empty tensor
    shape = (len(words),) if X.ndim == 1 else (1, len(words))
    return _string_array(words, shape)


@register("StringConcat", 20)
def string_concat(ctx, X, Y):
    """Element-wise (broadcast) concatenation of two string tensors."""
    x, y = np.broadcast_arrays(X, Y)
    values = [_as_str(a) + _as_str(b) for a, b in zip(x.reshape(-1), y.reshape(-1), strict=True)]
    return _string_array(values, x.shape)


@register("StringSplit", 20)
def string_split(ctx, X, *, delimiter=None, maxsplit=None):
    """Split each string; Y pads the pieces with "" to the longest split, Z counts the pieces."""
    sep = delimiter or None  # unset or "": split on runs of whitespace (Python's str.split(None))
    limit = -1 if maxsplit is None else int(maxsplit)
    pieces = [_as_str(s).split(sep, limit) for s in X.reshape(-1)]
    counts = np.array([len(p) for p in pieces], dtype=np.int64).reshape(X.shape)
    width = max((len(p) for p in pieces), default=0)
    padded = [p + [""] * (width - len(p)) for p in pieces]
    flat = [w for p in padded for w in p]
    return _string_array(flat, (*X.shape, width)), counts


@register("RegexFullMatch", 20)
def regex_full_match(ctx, X, *, pattern=None):
    """Whether each string fully matches ``pattern`` (Python ``re`` standing in for RE2)."""
    if pattern is None:
        raise ValueError("RegexFullMatch needs the pattern attribute")
    compiled = re.compile(pattern)
    flat = [compiled.fullmatch(_as_str(s)) is not None for s in X.reshape(-1)]
    return np.array(flat, dtype=bool).reshape(X.shape)


@register("TfIdfVectorizer", 9)
def tfidf_vectorizer(ctx, X, *, max_gram_length=None, max_skip_count=None, min_gram_length=None, mode=None,
                     ngram_counts=None, ngram_indexes=None, pool_int64s=None, pool_strings=None, weights=None):
    """Count the pool's n-grams (with up to ``max_skip_count`` skipped items) in each row of X."""
    pool = list(pool_strings) if pool_strings is not None else [int(v) for v in pool_int64s]
    if pool_strings is not None:
        pool = [_as_str(v) for v in pool]
    total = len(pool)
    # n-gram tuple -> output column, only for the lengths we are asked to count.
    lookup: dict[tuple, int] = {}
    ngram_index = 0
    for n, start in enumerate(ngram_counts, start=1):
        end = ngram_counts[n] if n < len(ngram_counts) else total
        for offset in range(start, end, n):
            if min_gram_length <= n <= max_gram_length:
                lookup[tuple(pool[offset:offset + n])] = ngram_indexes[ngram_index]
            ngram_index += 1
    output_size = max(ngram_indexes) + 1
    if X.ndim == 0:
        rows = X.reshape(1, 1)
    elif X.ndim == 1:
        rows = X.reshape(1, -1)
    elif X.ndim == 2:
        rows = X
    else:
        raise ValueError(f"TfIdfVectorizer input must be (C,) or (B, C), got {X.shape}")
    counts = np.zeros((rows.shape[0], output_size), dtype=np.float32)
    for r, row in enumerate(rows):
        items = [_as_str(v) for v in row] if pool_strings is not None else [int(v) for v in row]
        length = len(items)
        for n in range(min_gram_length, max_gram_length + 1):
            # Unigrams are counted once: skipping does not change them.
            skips = range(1) if n == 1 else range(max_skip_count + 1)
            for skip in skips:
                step = skip + 1
                for start in range(length - (n - 1) * step):
                    column = lookup.get(tuple(items[start:start + (n - 1) * step + 1:step]))
                    if column is not None:
                        counts[r, column] += 1
    w = np.asarray(weights, dtype=np.float32) if weights else None
    if mode == "TF":
        result = counts
    elif mode == "IDF":
        result = (counts > 0).astype(np.float32) * (w[:output_size] if w is not None else 1)
    elif mode == "TFIDF":
        result = counts * (w[:output_size] if w is not None else 1)
    else:
        raise ValueError(f"unknown mode {mode!r}")
    result = result.astype(np.float32)
    return result[0] if X.ndim < 2 else result


# ----------------------------------------------------------------------------------------------
# ai.onnx.preview.training optimizers
# ----------------------------------------------------------------------------------------------


def _split_groups(inputs: tuple, groups: int, op: str) -> list[tuple]:
    if len(inputs) % groups:
        raise ValueError(f"{op} expects its tensors in {groups} groups of equal size, got {len(inputs)}")
    n = len(inputs) // groups
    return [tuple(inputs[g * n + i] for g in range(groups)) for i in range(n)]


@register("Adagrad", 1, domain=TRAINING_DOMAIN)
def adagrad(ctx, R, T, *inputs, decay_factor=0.0, epsilon=1e-6, norm_coefficient=0.0):
    """Inputs X..., G..., H...; outputs X_new..., H_new..."""
    r = float(np.asarray(R).reshape(-1)[0]) / (1 + float(np.asarray(T).reshape(-1)[0]) * decay_factor)
    xs, hs = [], []
    for x, g, h in _split_groups(inputs, 3, "Adagrad"):
        g_reg = norm_coefficient * x + g
        h_new = h + g_reg * g_reg
        xs.append((x - r * g_reg / (np.sqrt(h_new) + epsilon)).astype(x.dtype))
        hs.append(h_new.astype(h.dtype))
    return tuple(xs + hs)


@register("Momentum", 1, domain=TRAINING_DOMAIN)
def momentum(ctx, R, T, *inputs, alpha=None, beta=None, mode=None, norm_coefficient=None):
    """Inputs X..., G..., V...; outputs X_new..., V_new... (standard or Nesterov momentum)."""
    if mode not in ("standard", "nesterov"):
        raise ValueError(f"Momentum mode must be 'standard' or 'nesterov', got {mode!r}")
    r = float(np.asarray(R).reshape(-1)[0])
    t = int(np.asarray(T).reshape(-1)[0])
    beta_t = beta if t > 0 else 1.0  # the gradient's coefficient is 1 on the first update
    xs, vs = [], []
    for x, g, v in _split_groups(inputs, 3, "Momentum"):
        g_reg = norm_coefficient * x + g
        v_new = alpha * v + beta_t * g_reg
        step = g_reg + alpha * v_new if mode == "nesterov" else v_new
        xs.append((x - r * step).astype(x.dtype))
        vs.append(v_new.astype(v.dtype))
    return tuple(xs + vs)


@register("Adam", 1, domain=TRAINING_DOMAIN)
def adam(ctx, R, T, *inputs, alpha=0.9, beta=0.999, epsilon=1e-6, norm_coefficient=0.0, norm_coefficient_post=0.0):
    """Inputs X..., G..., V..., H...; outputs X_new..., V_new..., H_new..."""
    r = float(np.asarray(R).reshape(-1)[0])
    t = float(np.asarray(T).reshape(-1)[0])
    if t > 0:  # bias correction of both moments
        r = r * np.sqrt(1 - beta**t) / (1 - alpha**t)
    xs, vs, hs = [], [], []
    for x, g, v, h in _split_groups(inputs, 4, "Adam"):
        g_reg = norm_coefficient * x + g
        v_new = alpha * v + (1 - alpha) * g_reg
        h_new = beta * h + (1 - beta) * (g_reg * g_reg)
        x_new = x - r * (v_new / (np.sqrt(h_new) + epsilon))
        xs.append(((1 - norm_coefficient_post) * x_new).astype(x.dtype))
        vs.append(v_new.astype(v.dtype))
        hs.append(h_new.astype(h.dtype))
    return tuple(xs + vs + hs)
