"""Miscellaneous operators (numpy kernels): loss functions (NegativeLogLikelihoodLoss,
SoftmaxCrossEntropyLoss), string ops (StringNormalizer, StringConcat, StringSplit, RegexFullMatch,
TfIdfVectorizer), the ``ai.onnx.ml`` ops LabelEncoder, TreeEnsemble, Binarizer and
ArrayFeatureExtractor, and the ``ai.onnx.preview.training`` optimizers Adam, Adagrad and Momentum.
"""

from __future__ import annotations

import re

import numpy as np

from wgsentis.ops.registry import register
from wgsentis.ops.tensor import check_indices

ML_DOMAIN = "ai.onnx.ml"
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
# ai.onnx.ml
# ----------------------------------------------------------------------------------------------


def _map_values(X: np.ndarray, keys: list, values: list, default, out_dtype) -> np.ndarray:
    """Look every element of X up in keys -> values, with ``default`` for misses (NaN keys match NaN)."""
    table = {}
    nan_value = None
    for k, v in zip(keys, values, strict=True):
        if isinstance(k, float) and np.isnan(k):
            nan_value = v
        else:
            table[k] = v
    out = []
    for item in X.reshape(-1).tolist():
        if isinstance(item, bytes):
            item = item.decode("utf-8")
        if isinstance(item, float) and np.isnan(item):
            out.append(default if nan_value is None else nan_value)
        else:
            out.append(table.get(item, default))
    if out_dtype is object:
        return _string_array(out, X.shape)
    return np.array(out, dtype=out_dtype).reshape(X.shape)


@register("LabelEncoder", 1, domain=ML_DOMAIN)
def label_encoder_1(ctx, X, *, classes_strings=None, default_int64=-1, default_string="_Unused"):
    """int64 -> string by index into classes_strings, or string -> its index."""
    classes = [_as_str(c) for c in (classes_strings or [])]
    if X.dtype.kind in "OUS":
        return _map_values(X, classes, list(range(len(classes))), default_int64, np.int64)
    return _map_values(X, list(range(len(classes))), classes, default_string, object)


@register("LabelEncoder", 2, domain=ML_DOMAIN)
def label_encoder(ctx, X, *, default_float=-0.0, default_int64=-1, default_string="_Unused", default_tensor=None,
                  keys_floats=None, keys_int64s=None, keys_strings=None, keys_tensor=None, values_floats=None,
                  values_int64s=None, values_strings=None, values_tensor=None):
    """Map keys to values; one keys_* and one values_* attribute are set."""
    if keys_tensor is not None:
        keys = keys_tensor.reshape(-1).tolist()
    else:
        keys = keys_floats if keys_floats is not None else keys_int64s if keys_int64s is not None else keys_strings
    if keys is None:
        raise ValueError("LabelEncoder needs a keys_* attribute")
    keys = [k.decode("utf-8") if isinstance(k, bytes) else k for k in keys]
    if values_tensor is not None:
        values = values_tensor.reshape(-1).tolist()
        out_dtype = object if values_tensor.dtype == object else values_tensor.dtype
        if default_tensor is not None:
            default = default_tensor.reshape(-1).tolist()[0]
        else:
            default = "_Unused" if out_dtype is object else (-1 if np.dtype(out_dtype).kind in "iu" else -0.0)
    elif values_floats is not None:
        values, out_dtype, default = values_floats, np.float32, default_float
    elif values_int64s is not None:
        values, out_dtype, default = values_int64s, np.int64, default_int64
    elif values_strings is not None:
        values, out_dtype, default = values_strings, object, default_string
    else:
        raise ValueError("LabelEncoder needs a values_* attribute")
    if out_dtype is object:
        values = [v.decode("utf-8") if isinstance(v, bytes) else v for v in values]
        if isinstance(default, bytes):
            default = default.decode("utf-8")
    return _map_values(X, keys, values, default, out_dtype)


@register("Binarizer", 1, domain=ML_DOMAIN)
def binarizer(ctx, X, *, threshold=0.0):
    """1 where X > threshold, else 0 (same dtype as X)."""
    return (X > threshold).astype(X.dtype)


@register("ArrayFeatureExtractor", 1, domain=ML_DOMAIN)
def array_feature_extractor(ctx, X, Y):
    """Select X's last-axis entries at indices Y; a 1-D X gives a (1, k) result."""
    index = np.asarray(Y).astype(np.int64, copy=False).reshape(-1)
    check_indices(ctx, index, X.shape[-1], "Y", negative_ok=False)  # 0 .. last dim - 1, as onnxruntime
    selected = X[..., index]
    if X.ndim == 1:
        return selected.reshape(1, -1)
    return selected


_TREE_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ", "BRANCH_MEMBER")


@register("TreeEnsemble", 5, domain=ML_DOMAIN)
def tree_ensemble(ctx, X, *, aggregate_function=1, leaf_targetids=None, leaf_weights=None, membership_values=None,
                  n_targets=None, nodes_falseleafs=None, nodes_falsenodeids=None, nodes_featureids=None,
                  nodes_hitrates=None, nodes_missing_value_tracks_true=None, nodes_modes=None, nodes_splits=None,
                  nodes_trueleafs=None, nodes_truenodeids=None, post_transform=0, tree_roots=None):
    """Evaluate every tree for all rows at once (vectorised over the batch), then aggregate per target."""
    X2 = X.reshape(X.shape[0], -1) if X.ndim > 1 else X.reshape(1, -1)
    batch = X2.shape[0]
    modes = np.asarray(nodes_modes).reshape(-1).astype(np.int64)
    splits = np.asarray(nodes_splits).reshape(-1).astype(np.float64)
    features = np.asarray(nodes_featureids, dtype=np.int64)
    true_ids = np.asarray(nodes_truenodeids, dtype=np.int64)
    false_ids = np.asarray(nodes_falsenodeids, dtype=np.int64)
    true_leaf = np.asarray(nodes_trueleafs, dtype=bool)
    false_leaf = np.asarray(nodes_falseleafs, dtype=bool)
    missing_true = (np.asarray(nodes_missing_value_tracks_true, dtype=bool)
                    if nodes_missing_value_tracks_true is not None else np.zeros(len(modes), dtype=bool))
    weights = np.asarray(leaf_weights).reshape(-1).astype(np.float64)
    targets = np.asarray(leaf_targetids, dtype=np.int64)
    # Set-membership nodes take, in node order, the runs of membership_values between NaNs.
    members: dict[int, np.ndarray] = {}
    if np.any(modes == 6):
        if membership_values is None:
            raise ValueError("BRANCH_MEMBER nodes need membership_values")
        runs, current = [], []
        for v in np.asarray(membership_values).reshape(-1).tolist():
            if np.isnan(v):
                runs.append(np.array(current))
                current = []
            else:
                current.append(v)
        for run_index, node in enumerate(np.nonzero(modes == 6)[0]):
            members[int(node)] = runs[run_index]
    if n_targets is None:
        n_targets = int(targets.max()) + 1 if targets.size else 1
    xf = X2.astype(np.float64)
    rows = np.arange(batch)
    per_tree = []  # (leaf indices per row) for each tree
    for root in tree_roots:
        # A single-leaf tree: both branches are the same leaf.
        if true_leaf[root] and false_leaf[root] and true_ids[root] == false_ids[root]:
            per_tree.append(np.full(batch, true_ids[root]))
            continue
        node = np.full(batch, root, dtype=np.int64)
        leaf = np.full(batch, -1, dtype=np.int64)
        active = np.ones(batch, dtype=bool)
        while active.any():
            idx = rows[active]
            n = node[idx]
            value = xf[idx, features[n]]
            split = splits[n]
            mode = modes[n]
            go_true = np.select(
                [mode == 0, mode == 1, mode == 2, mode == 3, mode == 4, mode == 5],
                [value <= split, value < split, value >= split, value > split, value == split, value != split],
                default=False)
            for j in np.nonzero(mode == 6)[0]:
                go_true[j] = bool(np.isin(value[j], members[int(n[j])]))
            go_true |= missing_true[n] & np.isnan(value)
            next_id = np.where(go_true, true_ids[n], false_ids[n])
            is_leaf = np.where(go_true, true_leaf[n], false_leaf[n])
            leaf[idx[is_leaf]] = next_id[is_leaf]
            node[idx] = next_id
            active[idx[is_leaf]] = False
        per_tree.append(leaf)
    leaves = np.stack(per_tree, axis=1)  # (B, trees)
    leaf_w = weights[leaves]
    leaf_t = targets[leaves]
    if aggregate_function in (0, 1):
        result = np.zeros((batch, n_targets))
        np.add.at(result, (np.repeat(rows, leaves.shape[1]), leaf_t.reshape(-1)), leaf_w.reshape(-1))
        if aggregate_function == 0:
            result /= len(tree_roots)
    elif aggregate_function == 2:
        result = np.full((batch, n_targets), np.inf)
        np.minimum.at(result, (np.repeat(rows, leaves.shape[1]), leaf_t.reshape(-1)), leaf_w.reshape(-1))
    elif aggregate_function == 3:
        result = np.full((batch, n_targets), -np.inf)
        np.maximum.at(result, (np.repeat(rows, leaves.shape[1]), leaf_t.reshape(-1)), leaf_w.reshape(-1))
    else:
        raise ValueError(f"unknown aggregate_function {aggregate_function}")
    if post_transform == 1:
        e = np.exp(result - result.max(axis=1, keepdims=True))
        result = e / e.sum(axis=1, keepdims=True)
    elif post_transform == 2:
        result = 1.0 / (1.0 + np.exp(-result))
    elif post_transform == 3:
        e = np.where(result == 0, 0.0, np.exp(result - result.max(axis=1, keepdims=True)))
        total = e.sum(axis=1, keepdims=True)
        result = np.where(total == 0, 0.0, e / np.where(total == 0, 1.0, total))
    elif post_transform != 0:
        raise ValueError(f"unsupported post_transform {post_transform}")
    return result.astype(X.dtype)


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
