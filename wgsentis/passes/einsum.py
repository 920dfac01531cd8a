"""Einsum lowered to the ops every backend runs: Transpose, Unsqueeze, Squeeze, Reshape, ReduceSum, Mul and
batched MatMul, so an Einsum runs as GPU programs on the GPU backends (it has none of its own) and every backend
runs the same lowered graph.

An Einsum is lowered when every operand's rank is known (shape inference, a graph input, a constant) and no
operand repeats a label (``ii->i``, a diagonal, stays an Einsum and runs its CPU kernel). Operands are combined
left to right; for each pair, the labels that only one operand has and nothing later needs are summed first
(ReduceSum), then the pair is multiplied elementwise (Mul, when no label is contracted) or as a batched MatMul:
the shared labels kept later are its batch axes, the contracted ones its K axis, each side's own kept labels its
M and N axes (all but the last of them become broadcast batch axes, so no size is merged but K's). A K of several
labels is merged by a Reshape of target ``[0, ..., 0, -1]`` (or ``[0, ..., 0, -1, n]`` with n a static size), so
dims that vary between runs keep working. Lowered layers are named ``<einsum>/<step>`` and the last one writes
the Einsum's output."""

from __future__ import annotations

import numpy as np

from wgsentis.ir import Graph, Layer

_ELLIPSIS = "..."


def _known_shape(graph: Graph, name: str) -> tuple | None:
    """The (possibly symbolic) shape of tensor ``name``: constants, graph inputs, shape inference (None: unknown)."""
    if name in graph.constants:
        return tuple(graph.constants[name].shape)
    for inp in graph.inputs:
        if inp.name == name:
            return inp.shape
    info = graph.value_info.get(name)
    return None if info is None else info.shape


def _terms(equation: str, shapes: list[tuple]) -> tuple[list[list[str]], list[str]] | None:
    """Each operand's labels (ellipsis dims as '...0', '...1', ..., right-aligned across operands) and the
    output's; None where the equation does not fit the operands' ranks or an operand repeats a label."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        return None
    spans: list[int] = []
    for term, shape in zip(terms, shapes, strict=True):
        named = len(term.replace(_ELLIPSIS, ""))
        if not term.replace(_ELLIPSIS, "").isalpha() and named:
            return None
        span = len(shape) - named if _ELLIPSIS in term else 0
        if span < 0 or (_ELLIPSIS not in term and named != len(shape)):
            return None
        spans.append(span)
    width = max(spans, default=0)

    def expand(term: str, span: int) -> list[str]:
        before, dots, after = term.partition(_ELLIPSIS)
        middle = [f"{_ELLIPSIS}{width - span + k}" for k in range(span)] if dots else []
        return [*before, *middle, *after]

    labels = [expand(term, span) for term, span in zip(terms, spans, strict=True)]
    if any(len(set(ls)) != len(ls) for ls in labels):
        return None  # a repeated label (a diagonal): not lowered
    if arrow:
        output = expand(rhs, width) if _ELLIPSIS in rhs else list(rhs)
        if not rhs.replace(_ELLIPSIS, "").isalpha() and rhs.replace(_ELLIPSIS, ""):
            return None
    else:
        counts: dict[str, int] = {}
        for ls in labels:
            for label in ls:
                counts[label] = counts.get(label, 0) + 1
        output = [f"{_ELLIPSIS}{k}" for k in range(width)]
        output += sorted(label for label, n in counts.items() if n == 1 and not label.startswith(_ELLIPSIS))
    seen = {label for ls in labels for label in ls}
    if len(set(output)) != len(output) or not set(output) <= seen:
        return None
    return labels, output


class _Lowering:
    """The layers that replace one Einsum, and the constants they read."""

    def __init__(self, graph: Graph, einsum: Layer) -> None:
        self.graph, self.einsum = graph, einsum
        self.layers: list[Layer] = []
        self.opset = max(14, einsum.opset)

    def emit(self, op_type: str, inputs: list[str], step: str, consts: dict[str, list[int]] | None = None,
             **attrs) -> str:
        """Append one ``op_type`` layer named ``<einsum>/<step>``; ``consts``: int64 constant inputs added after
        ``inputs``. Returns the name of its output."""
        name = f"{self.einsum.name}/{step}{len(self.layers)}"
        names = list(inputs)
        for key, values in (consts or {}).items():
            self.graph.constants[f"{name}/{key}"] = np.array(values, dtype=np.int64)
            names.append(f"{name}/{key}")
        self.layers.append(Layer(name=name, op_type=op_type, inputs=names, outputs=[f"{name}:0"], attrs=attrs,
                                 opset=self.opset))
        return f"{name}:0"

    def arrange(self, x: str, labels: list[str], order: list[str]) -> str:
        """``x`` (axes ``labels``) transposed to the order of ``order`` and given a size-1 axis for each label of
        ``order`` it lacks."""
        present = [label for label in order if label in labels]
        perm = [labels.index(label) for label in present]
        if perm != list(range(len(perm))):
            x = self.emit("Transpose", [x], "transpose", perm=perm)
        missing = [k for k, label in enumerate(order) if label not in labels]
        if missing:
            x = self.emit("Unsqueeze", [x], "unsqueeze", {"axes": missing})
        return x

    def sum_out(self, x: str, labels: list[str], keep: set[str]) -> tuple[str, list[str]]:
        """``x`` with the labels outside ``keep`` summed over (ReduceSum), and its remaining labels."""
        axes = [k for k, label in enumerate(labels) if label not in keep]
        if not axes:
            return x, labels
        x = self.emit("ReduceSum", [x], "reduce_sum", {"axes": axes}, keepdims=0)
        return x, [label for label in labels if label in keep]

    def pair(self, a: str, la: list[str], b: str, lb: list[str], keep: set[str],
             sizes: dict[str, int]) -> tuple[str, list[str]]:
        """The product of operands ``a`` (labels ``la``) and ``b`` (``lb``) with the shared labels outside
        ``keep`` contracted; returns it and its labels."""
        a, la = self.sum_out(a, la, keep | set(lb))
        b, lb = self.sum_out(b, lb, keep | set(la))
        shared = [label for label in la if label in lb]
        batch = [label for label in shared if label in keep]
        contracted = [label for label in shared if label not in keep]
        own_a = [label for label in la if label not in lb]
        own_b = [label for label in lb if label not in la]
        if not contracted:
            order = batch + own_a + own_b
            return self.emit("Mul", [self.arrange(a, la, order), self.arrange(b, lb, order)], "mul"), order
        rows, cols = own_a[-1:], own_b[-1:]
        batch = batch + own_a[:-1] + own_b[:-1]
        a = self.arrange(a, la, batch + (rows or ["#m"]) + contracted)
        k_at = len(batch) + 1
        if len(contracted) > 1:  # merge K: (batch, m, K...) -> (batch, m, k)
            a = self.emit("Reshape", [a], "reshape", {"shape": [0] * k_at + [-1]})
        n_size = sizes.get(cols[0]) if cols else 1
        if len(contracted) == 1 or isinstance(n_size, int):
            b = self.arrange(b, lb, batch + contracted + (cols or ["#n"]))
            if len(contracted) > 1:
                b = self.emit("Reshape", [b], "reshape", {"shape": [0] * len(batch) + [-1, n_size]})
        else:  # (batch, n, K...) -> (batch, n, k) -> (batch, k, n): no static size of n is needed
            b = self.arrange(b, lb, batch + cols + contracted)
            b = self.emit("Reshape", [b], "reshape", {"shape": [0] * k_at + [-1]})
            b = self.emit("Transpose", [b], "transpose", perm=[*range(len(batch)), k_at, len(batch)])
        y = self.emit("MatMul", [a, b], "matmul")
        dummies = ([] if rows else [len(batch)]) + ([] if cols else [k_at])
        if dummies:
            y = self.emit("Squeeze", [y], "squeeze", {"axes": dummies})
        return y, batch + rows + cols

    def finish(self, y: str, labels: list[str], output: list[str]) -> None:
        """Transpose ``y`` to the output's order and let the last layer write the Einsum's output."""
        perm = [labels.index(label) for label in output]
        if perm != list(range(len(perm))) or not self.layers:
            y = self.emit("Transpose", [y], "transpose", perm=perm)
        self.layers[-1].outputs = [self.einsum.outputs[0]]


class LowerEinsum:
    """Einsum with operands of known ranks and no repeated label in one operand becomes Transpose, Unsqueeze,
    Squeeze, Reshape, ReduceSum, Mul and MatMul layers (the module docstring says how)."""

    def run(self, graph: Graph, opsets: dict[str, int]) -> None:
        layers: list[Layer] = []
        for layer in graph.layers:
            lowered = self._lower(graph, layer)
            layers.extend([layer] if lowered is None else lowered)
        graph.layers = layers

    @staticmethod
    def _lower(graph: Graph, layer: Layer) -> list[Layer] | None:
        if (layer.op_type != "Einsum" or layer.domain or len(layer.outputs) != 1 or not layer.inputs
                or not all(layer.inputs) or not isinstance(layer.attrs.get("equation"), str)):
            return None
        terms = layer.attrs["equation"].replace(" ", "").partition("->")[0].split(",")  # type: ignore[union-attr]
        shapes = [_known_shape(graph, name) for name in layer.inputs]
        for k, (shape, term) in enumerate(zip(shapes, terms, strict=False)):
            if shape is None and _ELLIPSIS not in term:
                # Shape inference gave no shape (a Reshape to a target computed at run time), but a term without
                # an ellipsis fixes the operand's rank: one dim per label, their sizes unknown.
                shapes[k] = (None,) * len(term)
        if any(shape is None for shape in shapes):
            return None  # a rank unknown until run time: the Einsum stays
        parsed = _terms(layer.attrs["equation"], shapes)  # type: ignore[arg-type]
        if parsed is None:
            return None
        labels, output = parsed
        sizes: dict[str, int] = {}
        for ls, shape in zip(labels, shapes, strict=True):
            for label, dim in zip(ls, shape, strict=True):  # type: ignore[arg-type]
                if isinstance(dim, int) and sizes.get(label, 1) == 1:
                    sizes[label] = dim  # a size 1 that broadcasts yields to the other operand's
        lowering = _Lowering(graph, layer)
        y, ly = lowering.sum_out(layer.inputs[0], labels[0], set(output) | {x for ls in labels[1:] for x in ls})
        for k in range(1, len(labels)):
            later = set(output) | {x for ls in labels[k + 1:] for x in ls}
            y, ly = lowering.pair(y, ly, layer.inputs[k], labels[k], later, sizes)
        lowering.finish(y, ly, output)
        return lowering.layers


__all__ = ["LowerEinsum"]
