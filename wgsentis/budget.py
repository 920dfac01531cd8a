"""Memory budget: the bytes a layer's outputs will need, known from its inputs' shapes and host values
before its kernel or GPU program allocates anything.

Each op whose output can be larger than its inputs (an "amplifying" op: Resize, Tile, Expand, Range,
ConstantOfShape, Pad, broadcasting arithmetic, MatMul, Gather, OneHot, ConvTranspose, windows, random
generators...) has a size rule in its spec (``wgsentis.ops.spec``, declared by its family in
``ops/<family>_spec.py``): ``fn(layer, args) -> [(shape, nbytes, detail)]``, the layer's first
output first, then its other outputs and the working copies its kernel makes (a padded input), computed with
Python ints (no overflow) from the inputs' shapes, the host values of shape-like inputs and the layer's
attributes with their ONNX defaults. Ops without a rule (elementwise activations, reductions, views)
cost one dictionary lookup. A rule never runs a kernel; where the size depends on a value that is only
on the device, or the inputs or attributes are malformed, it gives up and the kernel reports its own
typed error: the check raises nothing but ResourceLimitError.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from wgsentis.errors import ResourceLimitError
from wgsentis.ops.sequence_spec import SEQUENCE_RECOUNT as SEQUENCE_RECOUNT  # re-exported: the recount period
# The families declare their size rules when wgsentis.ops is imported, which the package's __init__ does first;
# importing it here would close a circle (ops -> control_gpu -> run_control -> budget).
from wgsentis.ops.spec import Output, SizeRule, described, outputs_by_rule, spec_of


def check_device_bytes(control: Any, layer: Any, nbytes: int, live: int, what: str) -> None:
    """Raise ResourceLimitError when a device allocation of ``nbytes`` (``what``, for ``layer``) would bring the
    device memory a GPU plan holds (``live`` bytes before it) past ``control.memory_limit``: the error names the
    layer's own bytes (``nbytes``) and the plan's total (``total``) apart."""
    limit = getattr(control, "memory_limit", None)
    if limit is None or live + nbytes <= limit:
        return
    # ``layer`` may name what is not a layer (a replay's plan, as a string): then no op type.
    raise ResourceLimitError(getattr(layer, "name", str(layer)), getattr(layer, "op_type", ""), None, nbytes, limit,
                             f"device memory: {live:,} bytes live on the device before {what}", total=live + nbytes)


def check_layer_outputs(control: Any, layer: Any, args: list[Any]) -> None:
    """Raise ResourceLimitError (through ``control.check_bytes``) when ``layer``'s outputs on ``args``
    would exceed ``control.memory_limit``. ``args`` are host arrays, GPU tensors (``.shape``, ``.dtype``,
    ``.host``: the host copy or None), sequences (lists) or None."""
    rule = spec_of(layer.op_type, layer.domain).size_rule
    if rule is None:
        return  # not an amplifying op: this lookup is all it costs
    limit = control.memory_limit
    if limit is None:
        return
    try:
        outputs = outputs_by_rule(rule, layer, args)
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


# Slack over the bound of ``within_input_bound`` (the product of 1 + each input's elements, 8-byte items): room for
# several outputs and a rule's working copies, so that the bound stays above any such op's real need.
INPUT_BOUND_SLACK = 8


def within_input_bound(args: list[Any], limit: int) -> bool:
    """Whether an op whose size rule reads shapes only (``OpSpec.size_reads_shapes``) cannot pass ``limit`` on
    ``args``, by the bound such ops keep: its outputs hold at most the product of (1 + each input's element count)
    elements. A check on small inputs (a decoder's shape vectors, masks and one token's rows: 47 checks a step
    whose keys change as its cache grows) costs this product, not the rule; False where it cannot tell."""
    bound = 8 * INPUT_BOUND_SLACK
    for a in args:
        if a is None:
            continue
        if type(a) is not np.ndarray:
            return False
        bound *= a.size + 1
        if a.itemsize > 8:  # complex, strings: wider items than the bound assumes
            bound *= a.itemsize
        if bound > limit:
            return False
    return True


# Inputs whose values key a skipped check (``outputs_key``): an integer or bool tensor's bytes up to this many
# elements (shape vectors, pads, counts: what size rules read), a float tensor's up to ``KEYED_FLOAT_ELEMENTS``
# (scales, Range's bounds); a larger float tensor is keyed by its shape and dtype alone (data, whose values no rule
# reads but NonZero's, ``size_reads_data``), a larger integer one not at all (it may be a value a rule reads).
KEYED_VALUE_ELEMENTS = 4096
KEYED_FLOAT_ELEMENTS = 16


def outputs_key(layer: Any, args: list[Any]) -> tuple[Any, ...] | None:
    """What ``check_layer_outputs``' verdict on ``args`` depends on, for a caller that keeps the key of the last
    check that passed and skips the next check with an equal key (the cpu backend, per layer, across runs: a
    decoder's hundreds of layers see the same sizes step after step). None: no key (sequences, device tensors,
    large integer tensors, an op whose rule reads data): check every time."""
    op_spec = spec_of(layer.op_type, layer.domain)
    if op_spec.size_reads_data:
        return None
    key: list[Any] = []
    if op_spec.size_reads_shapes:  # values never change the verdict: shapes and dtypes key it
        for a in args:
            if a is None:
                key.append(None)
            elif type(a) is np.ndarray:
                key.append((a.shape, a.dtype.char))
            else:
                return None
        return tuple(key)
    for a in args:
        if a is None:
            key.append(None)
        elif type(a) is np.ndarray:
            if a.dtype.kind in "fc":
                key.append((a.shape, a.dtype.char, a.tobytes()) if a.size <= KEYED_FLOAT_ELEMENTS
                           else (a.shape, a.dtype.char))
            elif a.size <= KEYED_VALUE_ELEMENTS:
                key.append((a.shape, a.dtype.char, a.tobytes()))
            else:
                return None
        else:
            return None
    return tuple(key)


def predict(layer: Any, args: list[Any]) -> list[Output]:
    """What ``layer`` will allocate on ``args``: (shape, bytes, what) per output, its first output first,
    then the working copies its size rule names; empty when no rule knows (not an amplifying op, a value
    only on the device, malformed inputs)."""
    rule = spec_of(layer.op_type, layer.domain).size_rule
    if rule is None:
        return []
    return _predict(rule, layer, args)


def output_bytes(layer: Any, args: list[Any]) -> int | None:
    """The bytes of everything ``predict`` lists, or None when it lists nothing."""
    outputs = predict(layer, args)
    return sum(nbytes for _, nbytes, _ in outputs) if outputs else None


def _predict(rule: SizeRule, layer: Any, args: list[Any]) -> list[Output]:
    try:
        outputs = outputs_by_rule(rule, layer, args)
    except Exception:  # malformed attributes or inputs, or a value only on the device: the kernel decides
        return []
    return [o for o in outputs if _valid(o[0])]


def _valid(shape: tuple[int, ...] | None) -> bool:
    """False for a shape with a negative dimension: the kernel's error to report, not a size to check."""
    return shape is None or min(shape, default=0) >= 0


def has_rule(op_type: str, domain: str = "") -> bool:
    """Whether ``op_type`` has a size rule (is checked against the budget before it runs)."""
    return spec_of(op_type, domain).size_rule is not None


def ruled_ops() -> list[tuple[str, str]]:
    """(domain, op type) of every op with a size rule, sorted."""
    return [(s.domain, s.op_type) for s in described("size_rule")]


__all__ = ["KEYED_FLOAT_ELEMENTS", "KEYED_VALUE_ELEMENTS", "SEQUENCE_RECOUNT", "Output", "SizeRule",
           "check_device_bytes", "check_layer_outputs", "has_rule", "output_bytes", "outputs_key", "predict",
           "ruled_ops"]
