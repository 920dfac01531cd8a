"""One spec record per op: what the generic modules need to know of an op, declared by the op's family.

The registry (``ops/registry.py``) holds each op's implementations per backend and opset; an ``OpSpec`` holds
everything else the engine knows of the op as data or as small rules: the output-size rule of the memory budget
(``wgsentis.budget``), the leading axis through which gpu-compute may cut its tensors into tiles
(``backends/gpu/outer_tiles.py``), which inputs' values it passes on unchanged (narrow types need no rounding,
int64 bounds carry over: ``backends/gpu/program.py``, ``backends/gpu/placement.py``), the bound of an int64
result, the input that holds indices, whether it reads only its input's shape. Families declare their ops'
facets in ``ops/<family>_spec.py`` with ``describe`` (or the facet decorators below); the generic modules call
``spec_of`` and keep no per-op tables of their own.

Rules take plain values, never backend objects: ``args`` are host arrays, device tensors seen through
``.shape``/``.dtype`` (and ``host`` values handed in by the caller), sequences (lists) or None.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from wgsentis.dtypes import ONNX_TO_NUMPY

Output = tuple[tuple[int, ...] | None, int, str]  # (shape or None for a sequence, bytes, what it is)
# fn(layer, args) -> [(shape, nbytes, detail)]: the layer's first output first, then its other outputs and the
# working copies its kernel makes; raises (anything) where the size cannot be known on the host.
SizeRule = Callable[[Any, list[Any]], list[Output]]
# fn(layer, shapes, host) -> the last leading axis through which inputs and outputs are independent, or None;
# ``shapes``: the inputs' shapes; ``host``: the inputs' host values (None where only the device holds one).
TileRule = Callable[[Any, list[tuple[int, ...]], list[Any]], int | None]
# fn(layer, bounds, args) -> bounds on |v| of the outputs (one int for all of them, or a list), from bounds on the
# inputs' |v| and the inputs themselves (read through .shape and .dtype only); for ops whose int64 results follow
# from their inputs' by arithmetic.
BoundRule = Callable[[Any, list[int], list[Any]], int | list[int]]
# fn(attrs, args) -> (attrs, args) of the op's canonical form, or None where that form cannot express these (the
# GPU layer then declines, and its CPU kernel reports what is wrong). ``args`` as a builder sees them: device
# tensors (read through .shape and .dtype only), host arrays, None.
Adapt = Callable[[dict[str, Any], list[Any]], tuple[dict[str, Any], list[Any]] | None]


@dataclass(frozen=True)
class OpsetAdapter:
    """Turns a layer of an older opset (from ``since`` up to the next adapter or ``canonical``) into the form of
    opset ``canonical``: attributes that later opsets made inputs become host inputs, and attributes the later
    form added keep the values the older form fixed (TopK-1's largest and sorted). The GPU backends register only
    the canonical forms and reach older layers through these (``registry.lookup``); the cpu backend, the oracle,
    keeps a kernel per ONNX version."""

    since: int
    canonical: int
    adapt: Adapt
    # The older form's inputs a GPU builder reads on the host (Tile-1's tiles and axis; Split-1's sizes).
    host_inputs: tuple[int, ...] = ()

    def apply(self, layer: Any, attrs: dict[str, Any], args: list[Any]) -> tuple[CanonicalLayer, list[Any]] | None:
        """``layer`` (with ``attrs``) and ``args`` in the canonical form, or None where it cannot express them."""
        form = self.adapt(attrs, list(args))
        if form is None:
            return None
        canonical_attrs, canonical_args = form
        return CanonicalLayer(layer, self.canonical, canonical_attrs), canonical_args

# How structured pruning follows channels through an op: "weighted" (a constant weight starts a channel space:
# Conv, Gemm, MatMul), "per_channel" (per-channel parameters sliced with the channels), "elementwise" (a channel of
# the output is the same channel of input 0), "broadcast" (elementwise over broadcast operands), "pool", "concat",
# "relayout" (reshapes), "transpose", "softmax", "reduce", "pad", "resize".
CHANNEL_RULES = frozenset({"weighted", "per_channel", "elementwise", "broadcast", "pool", "concat", "relayout",
                           "transpose", "softmax", "reduce", "pad", "resize"})
ALL_INPUTS = "all"  # ``passes_values_of`` / ``views_values_of``: every input's values may reach the output
ANY_INT32 = 2**31  # the bound of an int64 tensor known only to be held in an i32 word


@dataclass(frozen=True)
class OpSpec:
    """What the engine knows of one op (``domain``, ``op_type``) beyond its kernels. Unset facets are the
    defaults: no size rule (the op never amplifies), no tiling, no values passed on."""

    op_type: str
    domain: str = ""
    size_rule: SizeRule | None = None
    tile_axis: TileRule | None = None
    # Every device input must be cut with the data (indices and updates shaped as the data along the leading
    # axes: a whole indices tensor beside a tile of the data would pair the wrong elements).
    tiles_all_inputs: bool = False
    # One-dimensional per-channel inputs (statistics, scales) are cut with the channels axis.
    tiles_channel_params: bool = False
    # How many times wider than its input row a tile's output row is (a Resize's upscale, a Gather's indices
    # against its axis), so the tile is sized by the wider: fn(layer, shapes, host, last) -> factor >= 1.
    tile_growth: Callable[[Any, list[tuple[int, ...]], list[Any], int], float] | None = None
    # Outputs only move, select or compare input values: a narrow input's values need no rounding or wrap.
    preserves_values: bool = False
    # Input positions whose values the outputs may carry unchanged (ALL_INPUTS: every input), selected or moved:
    # an int64 bound on them is a bound on the outputs.
    passes_values_of: tuple[int, ...] | str = ()
    # Input positions whose values the outputs are, only laid out anew (views and joins: Reshape, Concat, Where's
    # branches): an output that serves only as indices makes these inputs serve only as indices.
    views_values_of: tuple[int, ...] | str = ()
    # The bound of an int64 result from its inputs' bounds, where arithmetic makes it (sums, products...).
    int64_bound: BoundRule | None = None
    # The result may leave the int32 range its int64 inputs are within (sums, products, powers, -(-2**31)).
    widens_int64: bool = False
    index_input: int | None = None  # the input holding indices into its data's axis, checked on the device
    # How structured pruning (profiler/prune_channels.py) follows channels through the op: one of CHANNEL_RULES.
    channel_rule: str | None = None
    # Folded on a constant input by the pruner's own constant folding (profiler/prune_constants.py).
    prune_foldable: bool = False
    # FLOPs of a layer: fn(layer, in_shapes, out_shapes) -> int (a multiply-add counts 2); ops without one count an
    # operation per output element (registry.flops_of). Families declare it with ``registry.register_flops``.
    flops: Callable[..., int] | None = None
    # The input holding a layer's weights (FLOPs and pruning: profiler/flops.py).
    weight_input: int | None = None
    # The input whose values give the output's rank (its length): checked at import (onnx_checks.py).
    rank_from_input: int | None = None
    shape_only: bool = False  # reads its input's shape, never its data
    # The size rule reads the values of data inputs of any size (NonZero counts them), so a check cannot be
    # skipped on inputs of the same shapes as the last run's (``budget.outputs_key``).
    size_reads_data: bool = False
    # The size rule reads its inputs' shapes and dtypes (and the layer's attributes), never their values, so a
    # check is skipped on inputs of the last run's shapes whatever their values (``budget.outputs_key``): a
    # decoder's token ids and position ids change every step, their shapes do not. Such an op's outputs (all of
    # them together, with the working copies its rule counts) also hold at most as many elements as the product
    # of (1 + each input's element count), of at most 8 bytes each or its widest input's itemsize: broadcasting,
    # products, gathers and concatenations do (``budget.within_input_bound``, which skips a check on small inputs).
    size_reads_shapes: bool = False
    # How layers of older opsets take the canonical form (``OpsetAdapter``), oldest first.
    opset_adapters: tuple[OpsetAdapter, ...] = ()


_SPECS: dict[tuple[str, str], OpSpec] = {}
FACETS = frozenset(f.name for f in fields(OpSpec)) - {"op_type", "domain"}


def _normalize_domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def spec_of(op_type: str, domain: str = "") -> OpSpec:
    """The op's spec; an op no family describes gets the defaults (kept, so the next lookup is one dict get:
    the budget and the recorders ask once per layer and run)."""
    found = _SPECS.get((domain, op_type))
    if found is None:
        domain = _normalize_domain(domain)
        found = _SPECS.setdefault((domain, op_type), OpSpec(op_type, domain))
    return found


def describe(*op_types: str, domain: str = "", **facets: Any) -> None:
    """Set ``facets`` on the specs of ``op_types``. A facet is declared once per op: a second, different
    declaration is a programming error (two families claiming one op)."""
    unknown = set(facets) - FACETS
    if facets.get("channel_rule", None) not in (None, *CHANNEL_RULES):
        raise ValueError(f"describe({op_types}): channel_rule {facets['channel_rule']!r} is not one of "
                         f"{sorted(CHANNEL_RULES)}")
    if unknown:
        raise TypeError(f"describe({op_types}): unknown facets {sorted(unknown)}; facets are {sorted(FACETS)}")
    domain = _normalize_domain(domain)
    for op_type in op_types:
        current = _SPECS.get((domain, op_type)) or OpSpec(op_type, domain)
        default = OpSpec(op_type, domain)
        for name, value in facets.items():
            old = getattr(current, name)
            if old != getattr(default, name) and old != value:
                raise ValueError(f"op {domain or 'ai.onnx'}::{op_type}: facet {name} declared twice")
        _SPECS[(domain, op_type)] = replace(current, **facets)


def described(facet: str) -> list[OpSpec]:
    """The specs that set ``facet`` (to anything but its default), sorted by (domain, op type)."""
    return [spec for key, spec in sorted(_SPECS.items())
            if getattr(spec, facet) != getattr(OpSpec(spec.op_type, spec.domain), facet)]


def adapter_for(op_type: str, domain: str, opset: int) -> OpsetAdapter | None:
    """The adapter that gives a layer of ``opset`` its op's canonical form, or None where it has that form."""
    found = None
    for adapter in spec_of(op_type, domain).opset_adapters:
        if adapter.since <= opset < adapter.canonical:
            found = adapter
    return found


class CanonicalLayer:
    """A layer as its op's canonical form shows it to a builder: the layer's own name, inputs, outputs and fused
    activation, with the canonical opset and attributes."""

    __slots__ = ("_layer", "attrs", "opset")

    def __init__(self, layer: Any, opset: int, attrs: dict[str, Any]) -> None:
        self._layer, self.opset, self.attrs = layer, opset, attrs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._layer, name)


def canonical_form(layer: Any, args: list[Any]) -> tuple[Any, list[Any]] | None:
    """``layer`` and ``args`` in the op's canonical form (``OpsetAdapter``: a ``CanonicalLayer`` and the adapted
    arguments), as they are where no adapter serves the layer's opset, None where the adapter cannot express them."""
    adapter = adapter_for(layer.op_type, layer.domain, layer.opset)
    return (layer, args) if adapter is None else adapter.apply(layer, layer.attrs, args)


def outputs_by_rule(rule: SizeRule, layer: Any, args: list[Any]) -> list[Output]:
    """``rule`` (an op's size rule, written for its canonical form) on ``layer`` and ``args`` of any opset; raises
    ValueError where the canonical form cannot express them (as a rule raises on malformed inputs)."""
    form = canonical_form(layer, args)
    if form is None:
        raise ValueError(f"{layer.op_type}-{layer.opset}: no canonical form for these attributes")
    return rule(*form)


def attributes_as_inputs(*moved: tuple[str, int, Any], keep_inputs: int = 1,
                         required: tuple[str, ...] = ()) -> Adapt:
    """An adapter for ops whose later opsets take attributes as inputs: ``moved`` are (attribute, input position,
    numpy dtype) in position order, each attribute's value becoming that host input (None where absent, unless
    the older form has an input there: Split-1's sizes); ``keep_inputs``: how many of the older form's inputs keep
    their positions; ``required``: attributes without which the older form cannot run. Where one is missing, or a
    value does not convert, the adapter gives None (the CPU kernel then names the fault)."""

    def adapt(attrs: dict[str, Any], args: list[Any]) -> tuple[dict[str, Any], list[Any]] | None:
        if any(attrs.get(name) is None for name in required):
            return None
        rest = dict(attrs)
        out = list(args[:keep_inputs]) + [None] * (keep_inputs - len(args[:keep_inputs]))
        for name, position, dtype in moved:
            value = rest.pop(name, None)
            while len(out) <= position:
                out.append(None)
            if out[position] is None and value is not None:
                try:
                    out[position] = np.asarray(value, dtype=dtype)
                except (TypeError, ValueError, OverflowError):
                    return None
        while out and out[-1] is None:
            out.pop()
        return rest, out

    return adapt


def size_rule(*op_types: str, domain: str = "") -> Callable[[SizeRule], SizeRule]:
    """Decorator: ``fn`` is the size rule of ``op_types`` (see ``SizeRule``)."""

    def wrap(fn: SizeRule) -> SizeRule:
        describe(*op_types, domain=domain, size_rule=fn)
        return fn

    return wrap


def tile_rule(*op_types: str, domain: str = "", **facets: Any) -> Callable[[TileRule], TileRule]:
    """Decorator: ``fn`` is the tile rule of ``op_types`` (see ``TileRule``); ``facets``: more of theirs."""

    def wrap(fn: TileRule) -> TileRule:
        describe(*op_types, domain=domain, tile_axis=fn, **facets)
        return fn

    return wrap


def along_axis(layer: Any, args: list[Any], default: int) -> int:
    """The length of the axis the ``axis`` attribute names (``default`` when absent) in the first input; ANY_INT32
    where the input has no shape or the axis is outside it."""
    shape = tuple(getattr(args[0], "shape", ())) if args else ()
    axis = layer.attrs.get("axis", default)
    return shape[axis] if shape and isinstance(axis, int) and -len(shape) <= axis < len(shape) else ANY_INT32


# -- helpers for tile rules ---------------------------------------------------------------------------


def valid_axis(value: Any, rank: int) -> int | None:
    """``value`` as an axis within ``rank`` (negative counts from the end), or None where it is outside."""
    value = int(value)
    return value + rank if -rank <= value < 0 else (value if 0 <= value < rank else None)


def leading_before(axis: Any, rank: int) -> int | None:
    """The last leading axis before ``axis``: None when ``axis`` is the first (nothing leads it) or invalid."""
    a = valid_axis(axis, rank)
    return None if a is None or a == 0 else a - 1


def before_axis_attribute(default: int) -> TileRule:
    """The tile rule of an op along the axis its ``axis`` attribute names (``default`` when absent): the axes
    before it lead."""
    return lambda layer, shapes, host: leading_before(layer.attrs.get("axis", default), len(shapes[0]))


def images_and_channels(layer: Any, shapes: list[tuple[int, ...]], host: list[Any]) -> int | None:
    """Each image and channel apart (N, C leading)."""
    return 1


def images(layer: Any, shapes: list[tuple[int, ...]], host: list[Any]) -> int | None:
    """Each image apart (N leading)."""
    return 0


# -- helpers for size rules ---------------------------------------------------------------------------


class Unknown(Exception):  # noqa: N818 - a condition, not a failure: the rule cannot know the size
    """Raised inside a rule when an input's host value is needed but only the device holds it."""


def out(shape: tuple[int, ...] | list[int], itemsize: int, detail: str = "") -> Output:
    """An output of ``shape`` (Python ints: their product never overflows)."""
    shape = tuple(shape)
    return shape, math.prod(shape) * itemsize, detail


def shape_of(value: Any) -> tuple[int, ...]:
    """The shape of an input (host array or GPU tensor); AttributeError for None or a sequence."""
    return tuple(value.shape)


def itemsize_of(value: Any) -> int:
    """Bytes per element of an input (host array or GPU tensor)."""
    return value.dtype.itemsize


def host(value: Any) -> np.ndarray:
    """The host value of an input: an array as it is, a GPU tensor's host copy; Unknown when only the
    device holds it."""
    if isinstance(value, np.ndarray):
        return value
    copy = getattr(value, "host", None)
    if copy is None:
        if value is None or isinstance(value, list):
            raise ValueError("no tensor value")
        if isinstance(value, int | float | np.generic):
            return np.asarray(value)
        raise Unknown
    return np.asarray(copy)


def ints(value: Any) -> list[int]:
    """A shape-like input as Python ints (never numpy int64, whose products overflow)."""
    return [int(v) for v in host(value).reshape(-1).tolist()]


def scalar(value: Any) -> Any:
    """A scalar input's host value as a Python number."""
    arr = host(value).reshape(-1)
    if arr.size != 1:
        raise ValueError("expected a scalar")
    return arr.tolist()[0]


def arg(args: list[Any], index: int) -> Any:
    """Input ``index``, or None where it is omitted."""
    return args[index] if index < len(args) else None


def dtype_size(code: Any, default: int) -> int:
    """Bytes per element of an ONNX element type attribute (``default`` when absent or 0)."""
    if code is None or code == 0:
        return default
    return ONNX_TO_NUMPY[int(code)].itemsize


def axis_of(axis: int, rank: int) -> int:
    """``axis`` within ``rank`` (negative counts from the end); ValueError when outside."""
    axis = int(axis)
    if not -rank <= axis < max(rank, 1):
        raise ValueError("axis out of range")
    return axis + rank if axis < 0 else axis


def broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
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
