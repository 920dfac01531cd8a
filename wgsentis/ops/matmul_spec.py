"""Size rules of the products: MatMul, MatMulInteger, QLinearMatMul, Gemm, Einsum.

Each rule is ``fn(layer, args) -> [(shape, nbytes, detail)]`` (``wgsentis.ops.spec.SizeRule``); the memory budget
(``wgsentis.budget``) reads them from the ops' specs."""

from __future__ import annotations

from typing import Any

from wgsentis.ops import spec
from wgsentis.ops.spec import Output, describe, size_rule


# -- products ----------------------------------------------------------------------------------------


def _matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    if not a or not b:
        raise ValueError("MatMul of a scalar")
    a_vec, b_vec = len(a) == 1, len(b) == 1
    a = (1, *a) if a_vec else a
    b = (*b, 1) if b_vec else b
    batch = spec.broadcast(a[:-2], b[:-2])
    return (*batch, *(() if a_vec else (a[-2],)), *(() if b_vec else (b[-1],)))


@size_rule("MatMul")
def _matmul(layer: Any, args: list[Any]) -> list[Output]:
    return [spec.out(_matmul_shape(spec.shape_of(args[0]), spec.shape_of(args[1])), spec.itemsize_of(args[0]))]


@size_rule("MatMulInteger")
def _matmul_integer(layer: Any, args: list[Any]) -> list[Output]:
    return [spec.out(_matmul_shape(spec.shape_of(args[0]), spec.shape_of(args[1])), 4)]


@size_rule("QLinearMatMul")
def _qlinear_matmul(layer: Any, args: list[Any]) -> list[Output]:
    zero_point = spec.arg(args, 7)
    itemsize = 1 if zero_point is None else spec.itemsize_of(zero_point)
    return [spec.out(_matmul_shape(spec.shape_of(args[0]), spec.shape_of(args[3])), itemsize)]


def gemm_dims(a: tuple[int, ...], b: tuple[int, ...], trans_a: Any, trans_b: Any) -> tuple[int, int, int, int]:
    """Gemm's one shape rule, read by every backend, its FLOPs and its size rule: (M, K, K of B, N) of op(A) @
    op(B) for 2-D A and B (the K's must agree; the caller says what happens when they do not)."""
    m, k = (a[1], a[0]) if trans_a else (a[0], a[1])
    k_b, n = (b[1], b[0]) if trans_b else (b[0], b[1])
    return m, k, k_b, n


def gemm_shape(layer: Any, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """Gemm's output shape from its inputs' shapes: (M, N), broadcast with C's where C is given."""
    m, _k, _k_b, n = gemm_dims(shapes[0], shapes[1], layer.attrs.get("transA", 0), layer.attrs.get("transB", 0))
    shape: tuple[int, ...] = (m, n)
    if len(shapes) > 2 and shapes[2] is not None:
        shape = spec.broadcast(shape, tuple(shapes[2]))
    return shape


@size_rule("Gemm")
def _gemm(layer: Any, args: list[Any]) -> list[Output]:
    c = spec.arg(args, 2)
    shapes = [spec.shape_of(args[0]), spec.shape_of(args[1]), None if c is None else spec.shape_of(c)]
    return [spec.out(gemm_shape(layer, shapes), spec.itemsize_of(args[0]))]


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
        shape = spec.shape_of(arg)
        if "..." in term:
            before, _, after = term.partition("...")
            n_ellipsis = len(shape) - len(before) - len(after)
            if n_ellipsis < 0:
                raise ValueError("rank")
            ellipsis = spec.broadcast(ellipsis, shape[len(before):len(before) + n_ellipsis])
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
    return [spec.out(shape_out, spec.itemsize_of(args[0]))]


describe("Gemm", "MatMul", weight_input=1, channel_rule="weighted")
describe("Gemm", "MatMul", "MatMulInteger", size_reads_shapes=True)  # their rules read shapes and dtypes only
