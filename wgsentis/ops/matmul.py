"""Matrix-product operators: MatMul, Gemm, MatMulInteger, QLinearMatMul, Einsum, Det.

Float products go straight to ``np.matmul`` (multithreaded OpenBLAS sgemm/dgemm); narrow floats
(float16, bfloat16) are widened to float32 for the product since numpy has no BLAS path for them.
Integer products are accumulated exactly in float64 BLAS (exact while |sum| < 2**53, far beyond
what 8-bit operands can reach) instead of numpy's slow integer matmul.
"""

from __future__ import annotations

import math

import numpy as np

from wgsentis.ops.parallel import (
    MIN_SPLIT_FLOPS,
    TRANSIENT,
    HostWorkspace,
    kernel_threads,
    kernel_workspace,
    par_matmul,
)
from wgsentis.ops.registry import register, register_flops

_FLOAT_KINDS = (np.dtype(np.float32), np.dtype(np.float64))


def _as_blas(x: np.ndarray) -> np.ndarray:
    """``x`` in a dtype numpy multiplies with BLAS (float32/float64); ints and narrow floats widen."""
    if x.dtype in _FLOAT_KINDS:
        return x
    if np.issubdtype(x.dtype, np.integer) or x.dtype == np.bool_:
        return x.astype(np.float64)
    return x.astype(np.float32)


def _matmul_keep_dtype(a: np.ndarray, b: np.ndarray, threads: int = 1,
                       workspace: HostWorkspace = TRANSIENT) -> np.ndarray:
    """np.matmul with the result in the inputs' dtype."""
    if a.dtype == b.dtype and a.dtype in _FLOAT_KINDS:
        return np.asarray(par_matmul(a, b, threads, workspace=workspace))
    if np.issubdtype(a.dtype, np.integer):
        # Integer results must wrap like the spec's integer arithmetic: use numpy's exact integer path.
        return np.asarray(np.matmul(a, b))
    return np.asarray(np.matmul(_as_blas(a), _as_blas(b))).astype(a.dtype)


@register("MatMul", 1)
def matmul(ctx, A, B):
    """MatMul with numpy semantics: 1-D operands promoted and squeezed, batch dims broadcast."""
    return _matmul_keep_dtype(A, B, kernel_threads(ctx), kernel_workspace(ctx))


@register("Gemm", 1)
def gemm(ctx, A, B, C=None, *, alpha=1.0, beta=1.0, broadcast=0, transA=0, transB=0):
    """Gemm: alpha * op(A) @ op(B) + beta * C, with C broadcast to (M, N)."""
    a = A.T if transA else A
    b = B.T if transB else B
    if (alpha == 1.0 and a.ndim == 2 and b.ndim == 2 and a.dtype == b.dtype and a.dtype in _FLOAT_KINDS
            and a.shape[1] == b.shape[0]):
        # A float product plus a bias of its dtype that broadcasts into it (a transformer's linear layers, one
        # token's rows): the sum in place, and a product too small to split straight to BLAS. The general path
        # below spent 7-10 us a call more on a GPT-2 step's (1, 256) x (256, 768) (12.8 against 22.9 us).
        m, n = a.shape[0], b.shape[1]
        if C is None or beta == 0.0 or (type(C) is np.ndarray and C.dtype == a.dtype and beta == 1.0
                                         and _broadcasts_into(C.shape, (m, n))):
            small = 2 * m * n * a.shape[1] < MIN_SPLIT_FLOPS
            y = np.matmul(a, b) if small else np.asarray(
                par_matmul(a, b, kernel_threads(ctx), workspace=kernel_workspace(ctx)))
            if C is not None and beta != 0.0:
                np.add(y, C, out=y)
            return y
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"Gemm expects 2-D A and B, got {list(A.shape)} and {list(B.shape)}")
    out_dtype = np.result_type(A.dtype, B.dtype)
    if np.issubdtype(out_dtype, np.integer):
        y = np.matmul(a, b)
        if alpha != 1.0:
            y = (y * alpha).astype(out_dtype)
        if C is not None and beta != 0.0:
            y = (y + np.asarray(C) * beta).astype(out_dtype) if beta != 1.0 else y + np.asarray(C)
    else:
        y = np.asarray(par_matmul(_as_blas(a), _as_blas(b), kernel_threads(ctx), workspace=kernel_workspace(ctx)))
        if alpha != 1.0:
            y *= y.dtype.type(alpha)
        if C is not None and beta != 0.0:
            c = _as_blas(np.asarray(C))
            y = y + (c * c.dtype.type(beta) if beta != 1.0 else c).astype(y.dtype, copy=False)
    if y.shape != (a.shape[0], b.shape[1]):
        raise ValueError(f"Gemm: C of shape {list(np.shape(C))} does not broadcast to {[a.shape[0], b.shape[1]]}")
    y = y.astype(out_dtype, copy=False)
    return y


def _broadcasts_into(shape: tuple[int, ...], target: tuple[int, int]) -> bool:
    """Whether an array of ``shape`` broadcasts to (M, N) ``target`` without growing it."""
    return len(shape) <= 2 and all(d in (1, t) for d, t in zip(reversed(shape), reversed(target), strict=False))


@register("Einsum", 12)
def einsum(ctx, *Inputs, equation=None):
    """Einsum through np.einsum with contraction-order optimisation (BLAS for the pairwise products)."""
    if equation is None:
        raise ValueError("Einsum requires an equation")
    eq = equation.replace(" ", "")
    dtype = Inputs[0].dtype
    operands = [_as_blas(x) if x.dtype not in _FLOAT_KINDS and not np.issubdtype(x.dtype, np.integer) else x
                for x in Inputs]
    y = np.einsum(eq, *operands, optimize=len(operands) > 1)
    return np.asarray(y).astype(dtype, copy=False)


@register("Det", 11)
def det(ctx, X):
    """Det of the square matrices in the last two dims."""
    x = X if X.dtype in _FLOAT_KINDS else X.astype(np.float32)
    return np.asarray(np.linalg.det(x)).astype(X.dtype, copy=False)


# --------------------------------------------------------------------------------------------
# FLOPs
# --------------------------------------------------------------------------------------------

@register_flops("MatMul", "MatMulInteger", "QLinearMatMul")
def matmul_flops(layer, in_shapes, out_shapes) -> int:
    """2 FLOPs per multiply-add: 2 * prod(output shape) * K, K the contracted dim of A."""
    if not out_shapes or out_shapes[0] is None or not in_shapes or in_shapes[0] is None:
        return 0
    k = in_shapes[0][-1] if in_shapes[0] else 1
    return 2 * math.prod(out_shapes[0]) * int(k)


@register_flops("Gemm")
def gemm_flops(layer, in_shapes, out_shapes) -> int:
    """2 FLOPs per multiply-add: 2 * M * N * K, plus M * N for adding C when present."""
    if not out_shapes or out_shapes[0] is None or not in_shapes or in_shapes[0] is None:
        return 0
    a_shape = in_shapes[0]
    k = a_shape[0] if layer.attrs.get("transA", 0) else a_shape[-1]
    out = math.prod(out_shapes[0])
    has_c = len(in_shapes) > 2 and in_shapes[2] is not None
    return 2 * out * int(k) + (out if has_c else 0)
