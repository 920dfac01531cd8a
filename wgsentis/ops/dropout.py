"""Dropout: identity at inference; with training_mode it drops with probability ``ratio`` and scales."""

from __future__ import annotations

import numpy as np

from wgsentis.ops.registry import register


def _mask_output(ctx, x: np.ndarray, mask: np.ndarray) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    return (x, mask) if ctx.output_wanted(1) else x


@register("Dropout", 1)
def dropout_v1(ctx, data, *, is_test=0, ratio=0.5, consumed_inputs=None):
    # Before opset 7 the mask output exists only in training; inference returns the data unchanged.
    return _mask_output(ctx, data, np.ones(data.shape, dtype=bool))


@register("Dropout", 7)
def dropout_v7(ctx, data, *, ratio=0.5):
    return _mask_output(ctx, data, np.ones(data.shape, dtype=bool))


def _inference_mode(args: list) -> bool:
    """Dropout is deterministic (the identity) unless training_mode is given and true. ``args`` hold host
    values, None for omitted inputs, or another object for a value not known on the host (random then)."""
    training = args[2] if len(args) > 2 else None
    if training is None:
        return True
    return isinstance(training, np.ndarray | np.generic | bool) and not bool(np.asarray(training))


@register("Dropout", 12, deterministic=_inference_mode)
def dropout_v12(ctx, data, ratio=None, training_mode=None, *, seed=None):
    training = training_mode is not None and bool(np.asarray(training_mode))
    p = 0.5 if ratio is None else float(np.asarray(ratio))
    if not training or p == 0.0:
        return _mask_output(ctx, data, np.ones(data.shape, dtype=bool))
    if not 0.0 <= p < 1.0:
        raise ValueError(f"Dropout ratio must be in [0, 1), got {p}")
    mask = ctx.random(seed).uniform(0.0, 1.0, data.shape) >= p
    scale = np.asarray(1.0 / (1.0 - p), dtype=data.dtype)
    return _mask_output(ctx, (data * mask * scale).astype(data.dtype), mask)
