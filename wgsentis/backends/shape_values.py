"""Shape arithmetic kept from run to run (``ShapeValues``), for the cpu backend's runs and the GPU backends'
recordings alike: the hundreds of Shape/Gather/Unsqueeze/Concat layers an exporter writes around every reshape of a
transformer are computed once per input signature and checked, not run, while the sizes they read stay the same."""

from __future__ import annotations

import operator
from collections import OrderedDict
from typing import Any

import numpy as np

from wgsentis.ir import Graph, captured_names

# Shape arithmetic kept between runs (ShapeValues): a value of at most this many elements is cached; a larger one
# (a ConstantOfShape mask over a long sequence) is recomputed, as are the layers that read it.
SHAPE_VALUE_MAX_ELEMENTS = 1 << 16
# Ops whose output is not a function of their inputs: never shape arithmetic, whatever feeds them.
NONDETERMINISTIC_OPS = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                                  "Bernoulli", "Multinomial"})
SHAPE_SOURCES = frozenset({"Shape", "Size"})  # their output depends on their input's shape alone
# Input signatures whose shape values a program keeps (``ShapeValues.start``): a generation loop's cache lengths
# (one signature a token), least recently run first out.
MAX_SIGNATURES = 256


def _same_array(kept: np.ndarray, value: np.ndarray) -> bool:
    """Whether ``value`` holds what the kept array holds, bit for bit (a NaN equals itself)."""
    return kept.dtype == value.dtype and kept.shape == value.shape and kept.tobytes() == value.tobytes()


class ShapeValues:
    """The values of a graph's shape arithmetic, kept from one run to the next, so that only what a change of input
    size touches is computed again (the hundreds of Shape/Gather/Unsqueeze/Concat layers an exporter writes around
    every reshape of a transformer cost one check each, not a kernel each, while the sizes they read stay the same).

    A layer is *shape arithmetic* when its output depends only on the shapes of the run's tensors: a Shape or Size
    of any tensor, or a deterministic layer (no subgraph) whose every input is a constant or shape arithmetic. At
    run time a Shape/Size whose input has the shape of the last run keeps its value, and any other shape layer
    whose inputs all kept theirs keeps its own: its kernel does not run. A new size re-runs exactly the chains
    that read it (a decoder's position ids and causal mask; its reshape targets keep theirs). The values are
    read-only arrays owned by the program (``close`` drops them).

    Per input signature (the run's input shapes and dtypes: ``start``) the values a finished run left are kept, up
    to ``MAX_SIGNATURES``: a run of a signature seen before starts from that signature's values instead of the last
    run's, so a generation loop's second sequence, whose cache lengths the first one ran, re-runs no shape layer.
    They stay what they are everywhere else: values checked as the run goes (each Shape/Size against the shape its
    input has now, which a value-dependent tensor such as NonZero's may change), never trusted blindly."""

    def __init__(self, graph: Graph) -> None:
        derived: set[str] = set(graph.constants)
        self.kinds: list[int] = []  # per layer: 0 not shape arithmetic, 1 a Shape/Size source, 2 derived
        for layer in graph.layers:
            kind = 0
            deterministic = layer.op_type not in NONDETERMINISTIC_OPS and layer.domain in ("", "ai.onnx")
            if deterministic and not captured_names(layer):
                if layer.op_type in SHAPE_SOURCES:
                    kind = 1
                elif all(not n or n in derived for n in layer.inputs) and any(layer.inputs):
                    kind = 2
            if kind and any(isinstance(v, Graph) for v in layer.attrs.values()):
                kind = 0
            if kind:
                derived.update(o for o in layer.outputs if o)
            self.kinds.append(kind)
        self.count = sum(1 for k in self.kinds if k)
        self.values: dict[int, tuple[Any, ...]] = {}  # layer index -> its outputs of the last run it ran
        self.source_shapes: dict[int, tuple[int, ...]] = {}  # Shape/Size layer -> its input's shape then
        self.kept = 0  # shape layers that kept their value in the last run
        self.changed: set[str] = set()  # the run's shape values computed anew (or not kept)
        self.complete = True  # the last run reached its last layer (``finish``)
        # signature -> (values, source_shapes) a finished run of it left; ``values`` and ``source_shapes`` are one
        # of these pairs (the last run's signature's) or the run's own copy.
        self.signatures: OrderedDict[Any, tuple[dict, dict]] = OrderedDict()
        self.signature: Any = None  # the run's (None: no table; a GPU recording's, a control-flow body's)

    def start(self, signature: Any = None) -> None:
        """A run begins; ``signature`` (hashable) names its input shapes and dtypes, or None. The values a run that
        stopped part way (an error, a cancel, a trace that met a fallback) computed anew stay marked changed: the
        layers after where it stopped still hold the values of the run before, so their readers must run again."""
        if self.complete:
            self.changed = set()
            if signature is not None:
                table = self.signatures.get(signature)
                if table is not None:  # its own values, from the last run of it
                    self.signatures.move_to_end(signature)
                    self.values, self.source_shapes = table
                elif self.signatures:  # the last run's values, a copy: a signature's table may hold them
                    self.values, self.source_shapes = dict(self.values), dict(self.source_shapes)
        elif signature != self.signature:
            signature = None  # after a partial run: the values are no signature's until a run finishes
        self.signature = signature
        self.complete = False
        self.kept = 0

    def finish(self) -> None:
        """The run reached its last layer: every kept value agrees with its inputs again, and they are its
        signature's."""
        self.complete = True
        if self.signature is not None:
            self.signatures[self.signature] = (self.values, self.source_shapes)
            self.signatures.move_to_end(self.signature)
            while len(self.signatures) > MAX_SIGNATURES:
                self.signatures.popitem(last=False)

    def kept_value(self, index: int, step: Any, args: list[Any]) -> tuple[Any, ...] | None:
        """Layer ``index``'s outputs of an earlier run where they still hold for ``args``, else None."""
        value = self.values.get(index)
        if value is None:
            return None
        if self.kinds[index] == 1:
            # Any tensor with a shape: an array here, a device tensor where a GPU recording asks.
            shape = getattr(args[0], "shape", None) if args else None
            if shape is None or isinstance(args[0], list) or self.source_shapes.get(index) != tuple(shape):
                return None
        elif any(n in self.changed for n in step.inputs if n):
            return None
        self.kept += 1
        return value

    def kept_derived(self, index: int, step: Any) -> tuple[Any, ...] | None:
        """``kept_value`` for a derived layer (kind 2), which needs only its inputs' names."""
        value = self.values.get(index)
        if value is None or not self.changed.isdisjoint(step.inputs):
            return None
        self.kept += 1
        return value

    def store(self, index: int, step: Any, args: list[Any], values: list[Any]) -> list[Any]:
        """Keep layer ``index``'s new ``values`` (small arrays only; a layer whose value is not kept marks its
        outputs changed, so every reader runs). Returns the values the run goes on with: the kept read-only
        arrays, or ``values`` where they are not kept.

        Values equal to the kept ones (the same dtype, shape and bytes) leave the outputs unchanged, so their
        readers keep theirs: a decoder's new past length changes its Shape, but the Gathers of the batch and head
        dims read the same numbers as before, and the reshape targets built from them need no kernel."""
        if not all(isinstance(v, np.ndarray) and v.size <= SHAPE_VALUE_MAX_ELEMENTS for v in values):
            self.changed.update(n for n in step.outputs if n)
            self.values.pop(index, None)
            return values
        if self.kinds[index] == 1:
            self.source_shapes[index] = tuple(args[0].shape)
        stored = self.values.get(index)
        if stored is not None and len(stored) == len(values) and all(map(_same_array, stored, values)):
            return list(stored)
        self.changed.update(n for n in step.outputs if n)
        kept = []
        for v in values:
            v = v if not v.flags.writeable else v.copy()
            v.setflags(write=False)  # shared with later runs: no kernel may write into it
            kept.append(v)
        self.values[index] = tuple(kept)
        return kept

    def adopt(self, index: int, step: Any, values: tuple[Any, ...], source_shape: Any) -> None:
        """Layer ``index``'s outputs are ``values`` in this run without its kernel (a GPU resize keeps it from the
        trace it is planned from; ``source_shape``: a Shape/Size layer's input's shape): where they are not the
        values kept, they are from now on, and their readers run again."""
        stored = self.values.get(index)
        if stored is not None and len(stored) == len(values) and all(map(operator.is_, stored, values)):
            self.kept += 1
            return
        self.values[index] = tuple(values)
        if self.kinds[index] == 1:
            self.source_shapes[index] = tuple(source_shape)
        self.changed.update(n for n in step.outputs if n)

    def clear(self) -> None:
        self.values, self.source_shapes = {}, {}
        self.signatures.clear()
        self.signature = None


