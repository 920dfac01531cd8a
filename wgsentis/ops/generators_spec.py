"""Size rules of the generators, whose output size comes from values, not from input sizes: ConstantOfShape, Range, the
random generators, EyeLike, Multinomial, the windows, MelWeightMatrix, AffineGrid, TfIdfVectorizer.

Each rule is ``fn(layer, args) -> [(shape, nbytes, detail)]`` (``wgsentis.ops.spec.SizeRule``); the memory budget
(``wgsentis.budget``) reads them from the ops' specs."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from wgsentis.ops import spec
from wgsentis.ops.spec import Output, describe, size_rule


# -- generators: the size comes from values, not from input sizes -------------------------------------


@size_rule("ConstantOfShape")
def _constant_of_shape(layer: Any, args: list[Any]) -> list[Output]:
    value = layer.attrs.get("value")
    itemsize = 4 if value is None else np.asarray(value).dtype.itemsize
    return [spec.out(spec.ints(args[0]), itemsize)]


def range_count(start: Any, limit: Any, delta: Any, integer: bool) -> int:
    """Range's one shape rule, read by every backend and the size rule: the element count of start, start + delta,
    ... before limit. Integers exactly (ZeroDivisionError for a zero delta); floats in float64, as the kernel
    computes them (inf, NaN or a zero delta raise)."""
    if integer:
        return max(-(-(int(limit) - int(start)) // int(delta)), 0)
    return max(math.ceil((float(limit) - float(start)) / float(delta)), 0)


def device_range_count(start: Any, limit: Any, delta: Any, integer: bool) -> int | None:
    """A Range's element count where the GPUs compute it exactly, else None (the cpu kernel runs it or reports
    its error): a zero delta; integers whose start, delta or last element leave the int32 words the GPUs compute
    in; floats of 2**24 elements or more, whose index would not be exact in f32."""
    if delta == 0:
        return None
    count = range_count(start, limit, delta, integer)
    if integer:
        last = int(start) + (count - 1) * int(delta)
        return count if all(-(2**31) <= v < 2**31 for v in (int(start), last, int(delta))) else None
    return count if count < 2**24 else None


@size_rule("Range")
def _range(layer: Any, args: list[Any]) -> list[Output]:
    start, limit, delta = (spec.scalar(a) for a in args[:3])
    start_value = spec.host(args[0])
    count = range_count(start, limit, delta, start_value.dtype.kind in "iu")  # (raising where the kernel does)
    return [spec.out((count,), start_value.dtype.itemsize, f"Range({start}, {limit}, {delta})")]


@size_rule("RandomNormal", "RandomUniform")
def _random(layer: Any, args: list[Any]) -> list[Output]:
    return [spec.out([int(d) for d in layer.attrs["shape"]], spec.dtype_size(layer.attrs.get("dtype", 1), 4))]


@size_rule("RandomNormalLike", "RandomUniformLike", "Bernoulli")
def _random_like(layer: Any, args: list[Any]) -> list[Output]:
    return [spec.out(spec.shape_of(args[0]), spec.dtype_size(layer.attrs.get("dtype"), spec.itemsize_of(args[0])))]


@size_rule("EyeLike")
def _eye_like(layer: Any, args: list[Any]) -> list[Output]:
    return [spec.out(spec.shape_of(args[0]), spec.dtype_size(layer.attrs.get("dtype"), spec.itemsize_of(args[0])))]


@size_rule("Multinomial")
def _multinomial(layer: Any, args: list[Any]) -> list[Output]:
    batch = spec.shape_of(args[0])[0]
    return [spec.out((batch, int(layer.attrs.get("sample_size", 1))), spec.dtype_size(layer.attrs.get("dtype", 6), 4))]


@size_rule("HannWindow", "HammingWindow", "BlackmanWindow")
def _window(layer: Any, args: list[Any]) -> list[Output]:
    return [spec.out((int(spec.scalar(args[0])),), spec.dtype_size(layer.attrs.get("output_datatype", 1), 4))]


@size_rule("MelWeightMatrix")
def _mel_weight_matrix(layer: Any, args: list[Any]) -> list[Output]:
    bins, dft_length = int(spec.scalar(args[0])), int(spec.scalar(args[1]))
    return [spec.out((dft_length // 2 + 1, bins), spec.dtype_size(layer.attrs.get("output_datatype", 1), 4))]


@size_rule("AffineGrid")
def _affine_grid(layer: Any, args: list[Any]) -> list[Output]:
    size = spec.ints(args[1])  # (N, C, H, W) or (N, C, D, H, W)
    spatial = size[2:]
    return [spec.out((size[0], *spatial, len(spatial)), spec.itemsize_of(args[0]))]


@size_rule("TfIdfVectorizer")
def _tfidf(layer: Any, args: list[Any]) -> list[Output]:
    width = max(int(i) for i in layer.attrs["ngram_indexes"]) + 1
    shape = spec.shape_of(args[0])
    return [spec.out((width,) if len(shape) <= 1 else (shape[0], width), 4)]


describe("ConstantOfShape", rank_from_input=0)  # its input's values are the output's shape
