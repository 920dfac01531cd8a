"""Memory budget: the bytes a layer's outputs will need, known from its inputs' shapes and host values
before its kernel or GPU program allocates anything.

Each op whose output can be larger than its inputs (an "amplifying" op: Resize, Tile, Expand, Range,
ConstantOfShape, Pad, broadcasting arithmetic, MatMul, Gather, OneHot, ConvTranspose, windows, random
generators...) has a size rule here: ``fn(layer, args) -> [(shape, nbytes, detail)]``, the layer's first
output first, then its other outputs and the working copies its kernel makes (a padded input), computed with
Python ints (no overflow) from the inputs' shapes, the host values of shape-like inputs and the layer's
attributes with their ONNX defaults. Ops without a rule (elementwise activations, reductions, views)
cost one dictionary lookup. A rule never runs a kernel; where the size depends on a value that is only
on the device, or the inputs or attributes are malformed, it gives up and the kernel reports its own
typed error: the check raises nothing but ResourceLimitError.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from wgsentis.dtypes import ONNX_TO_NUMPY
from wgsentis.errors import ResourceLimitError
from wgsentis.ops.conv import conv_geometry, conv_transpose_geometry, spatial_attrs
from wgsentis.ops.resize import resize_geometry
from wgsentis.ops.pool import pool_geometry

Output = tuple[tuple[int, ...] | None, int, str]  # (shape or None for a sequence, bytes, what it is)
SizeRule = Callable[[Any, list[Any]], list[Output]]

_RULES: dict[str, tuple[str, SizeRule]] = {}  # op type -> (domain, rule)

# A sequence's held bytes are summed exactly up to this length, then at every multiple of it: summing
# on every insert would cost quadratic time in long loops; this bounds what goes unchecked between sums.
SEQUENCE_RECOUNT = 1024


class _Unknown(Exception):  # noqa: N818 - internal: a value the size depends on is not on the host
    """Raised inside a rule when an input's host value is needed but only the device holds it."""


def check_device_bytes(control: Any, layer: Any, nbytes: int, live: int, what: str) -> None:
    """Raise ResourceLimitError when a device allocation of ``nbytes`` (``what``, for ``layer``) would bring the
    device memory a GPU plan holds (``live`` bytes before it) past ``control.memory_limit``: the error names the
    layer's own bytes (``nbytes``) and the plan's total (``total``) apart."""
    limit = getattr(control, "memory_limit", None)
    if limit is None or live + nbytes <= limit:
        return
    raise ResourceLimitError(getattr(layer, "name", str(layer)), getattr(layer, "op_type", "?"), None, nbytes, limit,
                             f"device memory: {live:,} bytes live on the device before {what}", total=live + nbytes)


def check_layer_outputs(control: Any, layer: Any, args: list[Any]) -> None:
    """Raise ResourceLimitError (through ``control.check_bytes``) when ``layer``'s outputs on ``args``
    would exceed ``control.memory_limit``. ``args`` are host arrays, GPU tensors (``.shape``, ``.dtype``,
    ``.host``: the host copy or None), sequences (lists) or None."""
    entry = _RULES.get(layer.op_type)
    if entry is None or entry[0] != layer.domain:
        return  # not an amplifying op: this lookup is all it costs
    limit = control.memory_limit
    if limit is None:
        return
    try:
        outputs = entry[1](layer, args)
    except Exception:  # malformed attributes or inputs, or a value only on the device: the kernel decides
        return
    if len(outputs) == 1:
        shape, nbytes, detail = outputs[0]
        if nbytes > limit and _valid(shape):
            control.check_bytes(layer, shape, nbytes, detail)
        return
    total = 0
    for shape, nbytes, detail in outputs:
        if _valid(shape):
            if nbytes > limit:
                control.check_bytes(layer, shape, nbytes, detail)
            total += nbytes
    if total > limit:
        control.check_bytes(layer, None, total, f"its {len(outputs)} outputs and working copies together")


def predict(layer: Any, args: list[Any]) -> list[Output]:
    """What ``layer`` will allocate on ``args``: (shape, bytes, what) per output, its first output first,
    then the working copies its size rule names; empty when no rule knows (not an amplifying op, a value
    only on the device, malformed inputs)."""
    entry = _RULES.get(layer.op_type)
    if entry is None or entry[0] != layer.domain:
        return []
    return _predict(entry[1], layer, args)


def output_bytes(layer: Any, args: list[Any]) -> int | None:
    """The bytes of everything ``predict`` lists, or None when it lists nothing."""
    outputs = predict(layer, args)
    return sum(nbytes for _, nbytes, _ in outputs) if outputs else None


def _predict(rule: SizeRule, layer: Any, args: list[Any]) -> list[Output]:
    try:
        outputs = rule(layer, args)
    except Exception:  # malformed attributes or inputs, or a value only on the device: the kernel decides
        return []
    return [o for o in outputs if _valid(o[0])]


def _valid(shape: tuple[int, ...] | None) -> bool:
    """False for a shape with a negative dimension: the kernel's error to report, not a size to check."""
    return shape is None or min(shape, default=0) >= 0


def size_rule(*op_types: str, domain: str = "") -> Callable[[SizeRule], SizeRule]:
    """Register ``fn(layer, args) -> [(shape, nbytes, detail)]`` as the size rule of ``op_types``."""

    def wrap(fn: SizeRule) -> SizeRule:
        for op_type in op_types:
            _RULES[op_type] = (domain, fn)
        return fn

    return wrap


def has_rule(op_type: str, domain: str = "") -> bool:
    """Whether ``op_type`` has a size rule (is checked against the budget before it runs)."""
    entry = _RULES.get(op_type)
    return entry is not None and entry[0] == domain


def ruled_ops() -> list[tuple[str, str]]:
    """(domain, op type) of every op with a size rule, sorted."""
    return sorted((domain, op_type) for op_type, (domain, _) in _RULES.items())


# -- helpers -----------------------------------------------------------------------------------------


def _out(shape: tuple[int, ...] | list[int], itemsize: int, detail: str = "") -> Output:
    """An output of ``shape`` (Python ints: their product never overflows)."""
    shape = tuple(shape)
    return shape, math.prod(shape) * itemsize, detail


def _shape(value: Any) -> tuple[int, ...]:
    """The shape of an input (host array or GPU tensor); AttributeError for None or a sequence."""
    return tuple(value.shape)


def _itemsize(value: Any) -> int:
    return value.dtype.itemsize


def _host(value: Any) -> np.ndarray:
    """The host value of an input: an array as it is, a GPU tensor's host copy; _Unknown when only the
    device holds it."""
    if isinstance(value, np.ndarray):
        return value
    host = getattr(value, "host", None)
    if host is None:
        if value is None or isinstance(value, list):
            raise ValueError("no tensor value")
        if isinstance(value, int | float | np.generic):
            return np.asarray(value)
        raise _Unknown
    return np.asarray(host)


def _ints(value: Any) -> list[int]:
    """A shape-like input as Python ints (never numpy int64, whose products overflow)."""
    return [int(v) for v in _host(value).reshape(-1).tolist()]


def _scalar(value: Any) -> Any:
    """A scalar input's host value as a Python number."""
    arr = _host(value).reshape(-1)
    if arr.size != 1:
        raise ValueError("expected a scalar")
    return arr.tolist()[0]


def _arg(args: list[Any], index: int) -> Any:
    return args[index] if index < len(args) else None


def _dtype_size(code: Any, default: int) -> int:
    """Bytes per element of an ONNX element type attribute (``default`` when absent or 0)."""
    if code is None or code == 0:
        return default
    return ONNX_TO_NUMPY[int(code)].itemsize


def _axis(axis: int, rank: int) -> int:
    axis = int(axis)
    if not -rank <= axis < max(rank, 1):
        raise ValueError("axis out of range")
    return axis + rank if axis < 0 else axis


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """The multidirectional (numpy) broadcast of two shapes; ValueError when they do not broadcast."""
    if a == b:
        return a
    if len(a) < len(b):
        a, b = b, a
    out = list(a)
    offset = len(a) - len(b)
    for i, d in enumerate(b, offset):
        current = out[i]
        if d != current and d != 1:
            if current != 1:
                raise ValueError("shapes do not broadcast")
            out[i] = d
    return tuple(out)


# -- generators: the size comes from values, not from input sizes -------------------------------------


@size_rule("ConstantOfShape")
def _constant_of_shape(layer: Any, args: list[Any]) -> list[Output]:
    value = layer.attrs.get("value")
    itemsize = 4 if value is None else np.asarray(value).dtype.itemsize
    return [_out(_ints(args[0]), itemsize)]


@size_rule("Range")
def _range(layer: Any, args: list[Any]) -> list[Output]:
    start, limit, delta = (_scalar(a) for a in args[:3])
    start_value = _host(args[0])
    if start_value.dtype.kind in "iu":
        count = max(-(-(int(limit) - int(start)) // int(delta)), 0)  # ZeroDivisionError: the kernel's
    else:
        # As the kernel: float64 arithmetic; inf / NaN / a zero delta raise here and in the kernel alike.
        count = max(math.ceil((float(limit) - float(start)) / float(delta)), 0)
    return [_out((count,), start_value.dtype.itemsize, f"Range({start}, {limit}, {delta})")]


@size_rule("RandomNormal", "RandomUniform")
def _random(layer: Any, args: list[Any]) -> list[Output]:
    return [_out([int(d) for d in layer.attrs["shape"]], _dtype_size(layer.attrs.get("dtype", 1), 4))]


@size_rule("RandomNormalLike", "RandomUniformLike", "Bernoulli")
def _random_like(layer: Any, args: list[Any]) -> list[Output]:
    return [_out(_shape(args[0]), _dtype_size(layer.attrs.get("dtype"), _itemsize(args[0])))]


@size_rule("EyeLike")
def _eye_like(layer: Any, args: list[Any]) -> list[Output]:
    return [_out(_shape(args[0]), _dtype_size(layer.attrs.get("dtype"), _itemsize(args[0])))]


@size_rule("Multinomial")
def _multinomial(layer: Any, args: list[Any]) -> list[Output]:
    batch = _shape(args[0])[0]
    return [_out((batch, int(layer.attrs.get("sample_size", 1))), _dtype_size(layer.attrs.get("dtype", 6), 4))]


@size_rule("HannWindow", "HammingWindow", "BlackmanWindow")
def _window(layer: Any, args: list[Any]) -> list[Output]:
    return [_out((int(_scalar(args[0])),), _dtype_size(layer.attrs.get("output_datatype", 1), 4))]


@size_rule("MelWeightMatrix")
def _mel_weight_matrix(layer: Any, args: list[Any]) -> list[Output]:
    bins, dft_length = int(_scalar(args[0])), int(_scalar(args[1]))
    return [_out((dft_length // 2 + 1, bins), _dtype_size(layer.attrs.get("output_datatype", 1), 4))]


@size_rule("AffineGrid")
def _affine_grid(layer: Any, args: list[Any]) -> list[Output]:
    size = _ints(args[1])  # (N, C, H, W) or (N, C, D, H, W)
    spatial = size[2:]
    return [_out((size[0], *spatial, len(spatial)), _itemsize(args[0]))]


@size_rule("TfIdfVectorizer")
def _tfidf(layer: Any, args: list[Any]) -> list[Output]:
    width = max(int(i) for i in layer.attrs["ngram_indexes"]) + 1
    shape = _shape(args[0])
    return [_out((width,) if len(shape) <= 1 else (shape[0], width), 4)]


# -- shape-driven growth -----------------------------------------------------------------------------


@size_rule("Expand")
def _expand(layer: Any, args: list[Any]) -> list[Output]:
    return [_out(_broadcast(_shape(args[0]), tuple(_ints(args[1]))), _itemsize(args[0]))]


@size_rule("Tile")
def _tile(layer: Any, args: list[Any]) -> list[Output]:
    shape = list(_shape(args[0]))
    if layer.opset < 6:  # Tile-1: (input, tiles, axis)
        axis = _axis(int(_scalar(args[2])), len(shape))
        shape[axis] *= int(_scalar(args[1]))
    else:
        repeats = _ints(args[1])
        if len(repeats) != len(shape):
            raise ValueError("repeats do not match the rank")
        shape = [d * r for d, r in zip(shape, repeats, strict=True)]
    return [_out(shape, _itemsize(args[0]))]


@size_rule("Pad")
def _pad(layer: Any, args: list[Any]) -> list[Output]:
    shape = list(_shape(args[0]))
    if layer.opset < 11:
        pads = [int(p) for p in (layer.attrs.get("pads") or layer.attrs.get("paddings"))]
        axes = list(range(len(shape)))
    else:
        pads = _ints(args[1])
        axes_arg = _arg(args, 3)
        axes = list(range(len(shape))) if axes_arg is None else [_axis(a, len(shape)) for a in _ints(axes_arg)]
    if len(pads) != 2 * len(axes):
        raise ValueError("pads do not match the axes")
    for i, a in enumerate(axes):
        shape[a] += pads[i] + pads[i + len(axes)]
    return [_out(shape, _itemsize(args[0]))]


@size_rule("CenterCropPad")
def _center_crop_pad(layer: Any, args: list[Any]) -> list[Output]:
    shape = list(_shape(args[0]))
    axes = layer.attrs.get("axes")
    axes = list(range(len(shape))) if axes is None else [_axis(a, len(shape)) for a in axes]
    target = _ints(args[1])
    if len(target) != len(axes):
        raise ValueError("shape does not match the axes")
    for a, size in zip(axes, target, strict=True):
        shape[a] = size
    return [_out(shape, _itemsize(args[0]))]


@size_rule("Resize")
def _resize(layer: Any, args: list[Any]) -> list[Output]:
    shape = _shape(args[0])
    if layer.opset < 11:  # Resize-10: (X, scales)
        scales, sizes, axes, policy = _host(args[1]), None, None, "stretch"
    else:
        scales = None if _arg(args, 2) is None else _host(args[2])
        sizes = None if _arg(args, 3) is None else _host(args[3])
        axes, policy = layer.attrs.get("axes"), layer.attrs.get("keep_aspect_ratio_policy", "stretch")
    _, _, out_of, _, _ = resize_geometry(shape, scales, sizes, None, axes, policy)
    return [_out([out_of[i] for i in range(len(shape))], _itemsize(args[0]))]


@size_rule("Upsample")
def _upsample(layer: Any, args: list[Any]) -> list[Output]:
    shape = _shape(args[0])
    scales = layer.attrs["scales"] if layer.opset < 9 else _host(args[1])
    with np.errstate(over="ignore"):  # as the kernel: float32 scales (an overflow is its error to report)
        scales = np.asarray(scales, dtype=np.float32)
    _, _, out_of, _, _ = resize_geometry(shape, scales, None, None, None, "stretch")
    return [_out([out_of[i] for i in range(len(shape))], _itemsize(args[0]))]


@size_rule("Col2Im")
def _col2im(layer: Any, args: list[Any]) -> list[Output]:
    n, cols, _ = _shape(args[0])
    image, block = _ints(args[1]), _ints(args[2])
    nd = len(image)
    pads = [int(p) for p in (layer.attrs.get("pads") or [0] * (2 * nd))]
    channels = cols // math.prod(block)
    outputs = [_out((n, channels, *image), _itemsize(args[0]))]
    if any(pads):
        padded = [image[d] + pads[d] + pads[d + nd] for d in range(nd)]
        outputs.append(_out((n, channels, *padded), _itemsize(args[0]), "the padded image it sums into"))
    return outputs


@size_rule("MaxUnpool")
def _max_unpool(layer: Any, args: list[Any]) -> list[Output]:
    shape = _shape(args[0])
    nd = len(shape) - 2
    kernel = [int(k) for k in layer.attrs["kernel_shape"]]
    strides, _, pads = spatial_attrs(nd, kernel, layer.attrs.get("strides"), None, layer.attrs.get("pads"))
    inferred = [*shape[:2], *((shape[2 + i] - 1) * strides[i] - pads[i] - pads[nd + i] + kernel[i]
                              for i in range(nd))]
    if _arg(args, 2) is None:
        return [_out(inferred, _itemsize(args[0]))]
    return [_out(_ints(args[2]), _itemsize(args[0]), "output_shape"),
            _out(inferred, _itemsize(args[0]), "the unpooled input before it is fitted to output_shape")]


# -- broadcasting arithmetic ----------------------------------------------------------------------------

_COMPARISONS = frozenset({"Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "And", "Or", "Xor"})


@size_rule("Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "PRelu", "BitShift",
           "BitwiseAnd", "BitwiseOr", "BitwiseXor", *_COMPARISONS)
def _elementwise(layer: Any, args: list[Any]) -> list[Output]:
    shape = args[0].shape
    for arg in args[1:]:
        if arg is not None and arg.shape != shape:
            shape = _broadcast(shape, arg.shape)
    itemsize = 1 if layer.op_type in _COMPARISONS else args[0].dtype.itemsize
    return [(shape, math.prod(shape) * itemsize, "")]


@size_rule("Where")
def _where(layer: Any, args: list[Any]) -> list[Output]:
    return [_out(_broadcast(_broadcast(args[0].shape, args[1].shape), args[2].shape), _itemsize(args[1]))]


@size_rule("Cast", "CastLike")
def _cast(layer: Any, args: list[Any]) -> list[Output]:
    if layer.op_type == "CastLike":
        itemsize = _itemsize(args[1])
    else:
        to = layer.attrs["to"]
        if isinstance(to, str):  # Cast-1 spelled the type by name
            return []
        itemsize = _dtype_size(to, 4)
    return [_out(_shape(args[0]), itemsize)]


@size_rule("DequantizeLinear")
def _dequantize(layer: Any, args: list[Any]) -> list[Output]:
    return [_out(_shape(args[0]), _itemsize(args[1]))]


# -- products ----------------------------------------------------------------------------------------


def _matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    if not a or not b:
        raise ValueError("MatMul of a scalar")
    a_vec, b_vec = len(a) == 1, len(b) == 1
    a = (1, *a) if a_vec else a
    b = (*b, 1) if b_vec else b
    batch = _broadcast(a[:-2], b[:-2])
    return (*batch, *(() if a_vec else (a[-2],)), *(() if b_vec else (b[-1],)))


@size_rule("MatMul")
def _matmul(layer: Any, args: list[Any]) -> list[Output]:
    return [_out(_matmul_shape(_shape(args[0]), _shape(args[1])), _itemsize(args[0]))]


@size_rule("MatMulInteger")
def _matmul_integer(layer: Any, args: list[Any]) -> list[Output]:
    return [_out(_matmul_shape(_shape(args[0]), _shape(args[1])), 4)]


@size_rule("QLinearMatMul")
def _qlinear_matmul(layer: Any, args: list[Any]) -> list[Output]:
    zero_point = _arg(args, 7)
    return [_out(_matmul_shape(_shape(args[0]), _shape(args[3])), 1 if zero_point is None else _itemsize(zero_point))]


@size_rule("Gemm")
def _gemm(layer: Any, args: list[Any]) -> list[Output]:
    a, b = _shape(args[0]), _shape(args[1])
    m = a[1] if layer.attrs.get("transA", 0) else a[0]
    n = b[0] if layer.attrs.get("transB", 0) else b[1]
    shape: tuple[int, ...] = (m, n)
    if _arg(args, 2) is not None:
        shape = _broadcast(shape, _shape(args[2]))
    return [_out(shape, _itemsize(args[0]))]


@size_rule("Einsum")
def _einsum(layer: Any, args: list[Any]) -> list[Output]:
    equation = layer.attrs["equation"].replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(args):
        raise ValueError("operand count")
    dims: dict[str, int] = {}
    counts: dict[str, int] = {}
    ellipsis: tuple[int, ...] = ()
    for term, arg in zip(terms, args, strict=True):
        shape = _shape(arg)
        if "..." in term:
            before, _, after = term.partition("...")
            n_ellipsis = len(shape) - len(before) - len(after)
            if n_ellipsis < 0:
                raise ValueError("rank")
            ellipsis = _broadcast(ellipsis, shape[len(before):len(before) + n_ellipsis])
            letters, sizes = before + after, shape[:len(before)] + shape[len(before) + n_ellipsis:]
        else:
            letters, sizes = term, shape
        if len(letters) != len(sizes):
            raise ValueError("rank")
        for letter, size in zip(letters, sizes, strict=True):
            counts[letter] = counts.get(letter, 0) + 1
            known = dims.get(letter)
            if known is None or known == 1:
                dims[letter] = size
            elif size not in (1, known):
                raise ValueError("inconsistent sizes")
    if not arrow:  # implicit output: the ellipsis, then the letters seen once, in alphabetical order
        rhs = ("..." if "..." in lhs else "") + "".join(sorted(c for c, k in counts.items() if k == 1))
    before, has_ellipsis, after = rhs.partition("...")
    shape_out = [dims[c] for c in before] + (list(ellipsis) if has_ellipsis else []) + [dims[c] for c in after]
    return [_out(shape_out, _itemsize(args[0]))]


# -- indexing ----------------------------------------------------------------------------------------


@size_rule("Gather")
def _gather(layer: Any, args: list[Any]) -> list[Output]:
    data = _shape(args[0])
    axis = _axis(layer.attrs.get("axis", 0), len(data))
    return [_out((*data[:axis], *_shape(args[1]), *data[axis + 1:]), _itemsize(args[0]))]


@size_rule("GatherElements")
def _gather_elements(layer: Any, args: list[Any]) -> list[Output]:
    return [_out(_shape(args[1]), _itemsize(args[0]))]


@size_rule("GatherND")
def _gather_nd(layer: Any, args: list[Any]) -> list[Output]:
    data, indices = _shape(args[0]), _shape(args[1])
    batch_dims = int(layer.attrs.get("batch_dims", 0))
    return [_out((*indices[:-1], *data[batch_dims + indices[-1]:]), _itemsize(args[0]))]


@size_rule("OneHot")
def _one_hot(layer: Any, args: list[Any]) -> list[Output]:
    indices = _shape(args[0])
    depth = int(_host(args[1]).reshape(-1).tolist()[0])  # as the kernel: the first value, truncated
    axis = _axis(layer.attrs.get("axis", -1), len(indices) + 1)
    return [_out((*indices[:axis], depth, *indices[axis:]), _itemsize(args[2]))]


@size_rule("NonZero")
def _non_zero(layer: Any, args: list[Any]) -> list[Output]:
    value = _host(args[0])  # exact: one counting pass, far cheaper than the kernel itself
    if value.ndim == 0:
        return []
    return [_out((value.ndim, int(np.count_nonzero(value))), 8)]


@size_rule("Concat")
def _concat(layer: Any, args: list[Any]) -> list[Output]:
    shapes = [_shape(a) for a in args if a is not None]
    axis = _axis(layer.attrs["axis"], len(shapes[0]))
    shape = list(shapes[0])
    shape[axis] = sum(s[axis] for s in shapes)
    return [_out(shape, _itemsize(args[0]))]


# -- convolutions and pools -----------------------------------------------------------------------------


def _padded_input(x: tuple[int, ...], pads: list[int], itemsize: int) -> list[Output]:
    """The input padded by ``pads`` (what a kernel pads into before it slides its windows), when some pad
    is longer than the axis it pads (short pads leave it near the input's size, already allocated)."""
    nd = len(x) - 2
    if not nd or max(pads) <= min(x[2:]):
        return []
    spatial = [x[2 + i] + max(pads[i], 0) + max(pads[nd + i], 0) for i in range(nd)]
    return [_out((*x[:2], *spatial), itemsize, "the padded input")]


def _windows(x: tuple[int, ...], kernel: list[int], attrs: dict[str, Any]) -> tuple[list[int], list[int]] | None:
    """(pads, output spatial dims) of a convolution or pool with explicit pads and floor rounding (the
    common case, computed inline: this runs before every such layer); None for auto_pad or ceil_mode."""
    if attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "") or attrs.get("ceil_mode"):
        return None
    nd = len(x) - 2
    strides = attrs.get("strides") or [1] * nd
    dilations = attrs.get("dilations") or [1] * nd
    pads = attrs.get("pads") or [0] * (2 * nd)
    if not len(kernel) == len(strides) == len(dilations) == nd or len(pads) != 2 * nd:
        raise ValueError("attributes do not match the spatial rank")
    return pads, [(x[2 + i] + pads[i] + pads[nd + i] - (kernel[i] - 1) * dilations[i] - 1) // strides[i] + 1
                  for i in range(nd)]


def _conv_output(layer: Any, x: tuple[int, ...], w: tuple[int, ...], itemsize: int) -> list[Output]:
    attrs = layer.attrs
    kernel = attrs.get("kernel_shape") or list(w[2:])
    found = _windows(x, kernel, attrs)
    if found is None:
        strides, dilations, pads = spatial_attrs(len(x) - 2, kernel, attrs.get("strides"), attrs.get("dilations"),
                                                 attrs.get("pads"))
        begins, ends, outs = conv_geometry(x[2:], kernel, strides, dilations, pads, attrs["auto_pad"])
        pads = begins + ends
    else:
        pads, outs = found
    shape = (x[0], w[0], *outs)
    outputs = [(shape, math.prod(shape) * itemsize, "")]
    if max(pads) > min(x[2:]):
        outputs += _padded_input(x, pads, itemsize)
    return outputs


@size_rule("Conv", "FusedConv", "DeformConv")
def _conv(layer: Any, args: list[Any]) -> list[Output]:
    x = args[0]
    return _conv_output(layer, x.shape, args[1].shape, x.dtype.itemsize)


@size_rule("ConvInteger")
def _conv_integer(layer: Any, args: list[Any]) -> list[Output]:
    return _conv_output(layer, _shape(args[0]), _shape(args[1]), 4)


@size_rule("QLinearConv")
def _qlinear_conv(layer: Any, args: list[Any]) -> list[Output]:
    zero_point = _arg(args, 7)
    return _conv_output(layer, _shape(args[0]), _shape(args[3]), 1 if zero_point is None else _itemsize(zero_point))


@size_rule("ConvTranspose")
def _conv_transpose(layer: Any, args: list[Any]) -> list[Output]:
    attrs = layer.attrs
    x, w = _shape(args[0]), _shape(args[1])
    nd = len(x) - 2
    kernel = [int(k) for k in attrs.get("kernel_shape") or w[2:]]
    strides, dilations, pads = spatial_attrs(nd, kernel, attrs.get("strides"), attrs.get("dilations"),
                                             attrs.get("pads"))
    output_padding = [int(v) for v in attrs.get("output_padding") or [0] * nd][-nd:]
    _, outs = conv_transpose_geometry(x[2:], kernel, strides, dilations, pads, attrs.get("auto_pad", "NOTSET"),
                                      output_padding, attrs.get("output_shape"))
    return [_out((x[0], w[1] * int(attrs.get("group", 1)), *outs), _itemsize(args[0]))]


@size_rule("MaxPool", "AveragePool", "LpPool")
def _pool(layer: Any, args: list[Any]) -> list[Output]:
    attrs = layer.attrs
    x = args[0].shape
    kernel = attrs["kernel_shape"]
    found = _windows(x, kernel, attrs)
    if found is None:
        strides, dilations, pads = spatial_attrs(len(x) - 2, kernel, attrs.get("strides"), attrs.get("dilations"),
                                                 attrs.get("pads"))
        begins, ends, outs = pool_geometry(x[2:], kernel, strides, dilations, pads, attrs.get("auto_pad", "NOTSET"),
                                           int(attrs.get("ceil_mode", 0)))
        pads = begins + ends
    else:
        pads, outs = found
        outs = [max(o, 0) for o in outs]  # a window larger than the padded input: an empty dim, as the kernel
    itemsize = args[0].dtype.itemsize
    outputs = [_out((*x[:2], *outs), itemsize)]
    if layer.op_type == "MaxPool" and len(layer.outputs) > 1 and layer.outputs[1]:
        outputs.append(_out((*x[:2], *outs), 8, "Indices"))
    return outputs + _padded_input(x, pads, itemsize)


@size_rule("MaxRoiPool")
def _max_roi_pool(layer: Any, args: list[Any]) -> list[Output]:
    height, width = (int(v) for v in layer.attrs["pooled_shape"])
    return [_out((_shape(args[1])[0], _shape(args[0])[1], height, width), _itemsize(args[0]))]


@size_rule("RoiAlign")
def _roi_align(layer: Any, args: list[Any]) -> list[Output]:
    height, width = int(layer.attrs.get("output_height", 1)), int(layer.attrs.get("output_width", 1))
    return [_out((_shape(args[1])[0], _shape(args[0])[1], height, width), _itemsize(args[0]))]


@size_rule("GridSample")
def _grid_sample(layer: Any, args: list[Any]) -> list[Output]:
    x, grid = _shape(args[0]), _shape(args[1])
    return [_out((*x[:2], *grid[1:-1]), _itemsize(args[0]))]


# -- signals -----------------------------------------------------------------------------------------


@size_rule("DFT")
def _dft(layer: Any, args: list[Any]) -> list[Output]:
    x = list(_shape(args[0]))
    if layer.opset < 20:
        axis = int(layer.attrs.get("axis", 1))
    else:
        axis = -2 if _arg(args, 2) is None else int(_scalar(args[2]))
    axis = _axis(axis, len(x))
    inverse, onesided = int(layer.attrs.get("inverse", 0)), int(layer.attrs.get("onesided", 0))
    if _arg(args, 1) is not None:
        n = int(_scalar(args[1]))
    else:
        n = 2 * (x[axis] - 1) if inverse and onesided else x[axis]
    x[axis] = n // 2 + 1 if onesided and not inverse else n
    x[-1] = 1 if inverse and onesided else 2
    return [_out(x, _itemsize(args[0]))]


@size_rule("STFT")
def _stft(layer: Any, args: list[Any]) -> list[Output]:
    batch, length = _shape(args[0])[:2]
    step = int(_scalar(args[1]))
    if _arg(args, 3) is not None:
        frame = int(_scalar(args[3]))
    else:
        frame = _shape(args[2])[0]
    frames = 1 + (length - frame) // step
    bins = frame // 2 + 1 if int(layer.attrs.get("onesided", 1)) else frame
    return [_out((batch, frames, bins, 2), _itemsize(args[0])),
            _out((batch, frames, frame), 16, "the framed signal, complex")]


# -- recurrences and attention ---------------------------------------------------------------------------


@size_rule("RNN", "GRU", "LSTM")
def _recurrent(layer: Any, args: list[Any]) -> list[Output]:
    x, r = _shape(args[0]), _shape(args[2])
    directions, hidden = r[0], r[-1]
    seq, batch = (x[1], x[0]) if int(layer.attrs.get("layout", 0)) else (x[0], x[1])
    return [_out((seq, directions, batch, hidden), _itemsize(args[0]))]


@size_rule("Attention")
def _attention(layer: Any, args: list[Any]) -> list[Output]:
    q, k = _shape(args[0]), _shape(args[1])
    past = _arg(args, 4)
    if len(q) == 3:
        batch, heads, q_len, kv_len = q[0], int(layer.attrs["q_num_heads"]), q[1], k[1]
    else:
        batch, heads, q_len, kv_len = q[0], q[1], q[2], k[2]
    kv_len += 0 if past is None else _shape(past)[2]
    return [_out((batch, heads, q_len, kv_len), _itemsize(args[0]), "the attention scores")]


# -- sequences ---------------------------------------------------------------------------------------


def _tensor_bytes(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, list):
        return sum(_tensor_bytes(v) for v in value)
    return math.prod(value.shape) * _itemsize(value)


@size_rule("SequenceConstruct")
def _sequence_construct(layer: Any, args: list[Any]) -> list[Output]:
    return [(None, sum(_tensor_bytes(a) for a in args), f"a sequence of {len(args)} tensors")]


@size_rule("SequenceInsert")
def _sequence_insert(layer: Any, args: list[Any]) -> list[Output]:
    sequence = args[0]
    length = len(sequence) + 1
    if length > SEQUENCE_RECOUNT and length % SEQUENCE_RECOUNT:
        return []  # counted again at the next multiple of SEQUENCE_RECOUNT
    total = sum(_tensor_bytes(v) for v in sequence) + _tensor_bytes(args[1])
    return [(None, total, f"a sequence of {length} tensors")]


@size_rule("ConcatFromSequence")
def _concat_from_sequence(layer: Any, args: list[Any]) -> list[Output]:
    sequence = args[0]
    shape = list(_shape(sequence[0]))
    new_axis = int(layer.attrs.get("new_axis", 0))
    axis = _axis(layer.attrs["axis"], len(shape) + new_axis)
    if new_axis:
        shape.insert(axis, len(sequence))
    else:
        shape[axis] = sum(_shape(v)[axis] for v in sequence)
    return [_out(shape, _itemsize(sequence[0]))]


# -- ai.onnx.ml ------------------------------------------------------------------------------------


@size_rule("ArrayFeatureExtractor", domain="ai.onnx.ml")
def _array_feature_extractor(layer: Any, args: list[Any]) -> list[Output]:
    x = _shape(args[0])
    count = math.prod(_shape(args[1]))
    return [_out((1, count) if len(x) == 1 else (*x[:-1], count), _itemsize(args[0]))]


@size_rule("TreeEnsemble", domain="ai.onnx.ml")
def _tree_ensemble(layer: Any, args: list[Any]) -> list[Output]:
    targets = layer.attrs.get("n_targets")
    if targets is None:
        return []
    x = _shape(args[0])
    return [_out((x[0] if len(x) > 1 else 1, int(targets)), 8)]


__all__ = ["SEQUENCE_RECOUNT", "check_layer_outputs", "has_rule", "output_bytes", "predict", "ruled_ops",
           "size_rule"]
