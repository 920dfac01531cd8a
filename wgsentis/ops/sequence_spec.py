"""Size rules of the sequence ops: a sequence's held bytes, summed over its tensors.

Each rule is ``fn(layer, args) -> [(shape, nbytes, detail)]`` (``wgsentis.ops.spec.SizeRule``); the memory budget
(``wgsentis.budget``) reads them from the ops' specs."""

from __future__ import annotations

import math
from typing import Any

from wgsentis.ops import spec
from wgsentis.ops.spec import Output, size_rule

# A sequence's held bytes are summed exactly up to this length, then at every multiple of it: summing
# on every insert would cost quadratic time in long loops; this bounds what goes unchecked between sums.
SEQUENCE_RECOUNT = 1024


# -- sequences ---------------------------------------------------------------------------------------


def _tensor_bytes(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, list):
        return sum(_tensor_bytes(v) for v in value)
    return math.prod(value.shape) * spec.itemsize_of(value)


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
    shape = list(spec.shape_of(sequence[0]))
    new_axis = int(layer.attrs.get("new_axis", 0))
    axis = spec.axis_of(layer.attrs["axis"], len(shape) + new_axis)
    if new_axis:
        shape.insert(axis, len(sequence))
    else:
        shape[axis] = sum(spec.shape_of(v)[axis] for v in sequence)
    return [spec.out(shape, spec.itemsize_of(sequence[0]))]
