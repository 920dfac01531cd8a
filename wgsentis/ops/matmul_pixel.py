"""gpu-pixel programs of the matmul family: MatMul (numpy semantics: 1-D operands, batch dims broadcast) and Gemm
(transA, transB, alpha, beta, C broadcast to (M, N), C optional), both with a fused activation, drawn by
wgsl/pixel/matmul.wgsl.

A is blocked along K and B and the output along N: a fragment multiplies four B texels by one A texel per row
(a 4x4 matrix times a vec4). A transposed operand needs no copy: it is blocked along its first axis (a layout
switch where its producer blocked another, an upload so for a constant) and read with other strides. Each
fragment draws ROWS rows into as many render targets (as many as the device's color attachments allow, at most
8: lavapipe then loads each B texel once for 8 rows), which a second, cheap draw (matmul_assemble.wgsl)
interleaves into the output; products of few rows draw one row per fragment straight into the output.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from wgsentis.backends.gpu.shader_gen import assemble_subs, pixel_matmul_subs, with_division
from wgsentis.backends.gpu.tensors import GTensor, loop_passes
from wgsentis.ops.matmul_gpu import fused, matmul_shapes
from wgsentis.ops.matmul_spec import gemm_dims
from wgsentis.ops.registry import GPU_PIXEL, register

MAX_BATCH_RANK = 4
_SHADER = "pixel/matmul.wgsl"
_INTERLEAVE = "pixel/matmul_assemble.wgsl"
MAX_ROWS = 8  # outputs a fragment draws into as many render targets; fewer where the device's limits are lower


def divided(rec, expr: str) -> str:
    """``expr`` with its div_f32 calls bound to the device's division (math.wgsl, ``shader_gen.with_division``)."""
    return with_division(expr, rec.ctx.division_function)


def rows_per_fragment(rec, m: int) -> int:
    """How many outputs (rows of a product, columns of a convolution) a fragment draws: a power of two within
    MAX_ROWS, the device's color attachments (and their bytes per sample, 16 a rgba32float target) and ``m``."""
    limits = rec.ctx.limits
    targets = min(MAX_ROWS, int(limits.get("max-color-attachments", 8)),
                  int(limits.get("max-color-attachment-bytes-per-sample", 32)) // 16)
    rows = 1
    while rows * 2 <= targets and rows * 2 <= m:
        rows *= 2
    return rows


def interleave(rec, targets: list[GTensor], y: GTensor, nblocks: int, m: int, mr: int, first: int = 0,
               rows: tuple[int, int] | None = None) -> None:
    """Draw Y from the render targets of a many-output draw (matmul_assemble.wgsl): row ``r`` of every ``rows``
    (of ``m``, each ``nblocks`` texels) from target ``r``, whose texels hold ``mr`` rows per batch. A chunk of Y:
    the targets hold batches ``first`` on, drawn into Y's texel ``rows`` (first, count) only."""
    rec.draw(_INTERLEAVE, targets, [y], [y.layout.texels, y.layout.shift, targets[0].layout.shift, nblocks, m, mr,
                                         first], subs=assemble_subs(len(targets)), rows=rows)


def _f32(x: Any) -> bool:
    return getattr(x, "dtype", None) == np.float32 and isinstance(x, np.ndarray | GTensor)


def product(rec, layer, a: GTensor, b: GTensor, y: GTensor, *, m: int, n: int, k: int, batch: tuple[int, ...],
             a_strides: tuple[int, int, list[int]], b_strides: tuple[int, int, list[int]],
             c: tuple[GTensor, int, int, int] | None = None, alpha: float = 1.0, beta: float = 1.0,
             frees_tiles: bool = True) -> bool:
    """Record Y (batch..., M, N; N blocked) = act(alpha * A @ B + beta * C). ``a_strides``/``b_strides``: texel
    strides (row, K block) of A and (K row, N block) of B, and per batch dim; ``c``: (C, row stride, block
    stride, mode). ``frees_tiles``: the row tiles of a many-target draw are freed once interleaved, a tick
    stepped, for what the layer draws next (False for a layer that is this one product: its builder's
    temporaries are freed with it, and a builder that steps no tick is templated, layer_reuse.py). False where
    the device's loops cannot run it."""
    if not rec.loops_fit(loop_passes(k // 4)):
        return False
    act = fused(layer)
    nbatch = math.prod(batch)
    rows = rows_per_fragment(rec, m)
    mr = -(-m // rows)
    targets = [y] if rows == 1 else [rec.alloc((nbatch, mr, n), np.float32, -1) for _ in range(rows)]
    lead = [1] * (MAX_BATCH_RANK - len(batch))
    pad = [0] * (MAX_BATCH_RANK - len(batch))
    nblocks = -(-n // 4)
    c_t, c_sm, c_sn, c_mode = c if c is not None else (None, 0, 0, 0)
    params: list[int | float] = [
        targets[0].layout.texels, targets[0].layout.shift, a.layout.shift, b.layout.shift,
        c_t.layout.shift if c_t is not None else 0, mr, nblocks, k, n, m, a_strides[0], a_strides[1],
        b_strides[0], b_strides[1], c_sm, c_sn, c_mode, float(alpha), float(beta), *[float(v) for v in act[1]],
        *lead, *batch, *pad, *a_strides[2], *pad, *b_strides[2]]
    inputs = [a, b] if c_t is None else [a, b, c_t]
    rec.draw(_SHADER, inputs, targets, params, subs=pixel_matmul_subs(rows, c_mode, divided(rec, act[0])))
    if rows > 1:
        interleave(rec, targets, y, nblocks, m, mr)
        if frees_tiles:
            # The row tiles are dead once interleaved: what the layer draws next (Winograd's next product, a
            # grouped layer's next group) may lie in their textures.
            rec.program.free_temporaries([t.alloc for t in targets])
            rec.program.advance_clock()
    return True


def _batch_strides(shape: tuple[int, ...], batch: tuple[int, ...], per: int) -> list[int]:
    """Texel strides of an operand whose batch dims are ``shape`` (right-aligned to ``batch``, ``per`` texels a
    matrix), 0 along broadcast dims."""
    shape = (1,) * (len(batch) - len(shape)) + tuple(shape)
    strides = [0] * len(batch)
    step = per
    for i in range(len(batch) - 1, -1, -1):
        strides[i] = step if shape[i] != 1 else 0
        step *= shape[i]
    return strides


@register("MatMul", 1, backend=GPU_PIXEL)
def matmul(rec, layer, A, B):
    """MatMul with numpy semantics: 1-D operands promoted and squeezed, batch dims broadcast."""
    shapes = matmul_shapes(A, B) if _f32(A) and _f32(B) else None
    if shapes is None:
        return NotImplemented  # the CPU kernel names the shapes
    a_shape, b_shape, m, k, n, batch = shapes
    if len(batch) > MAX_BATCH_RANK:
        return NotImplemented
    out_shape = (*batch, m, n)
    a = rec.tensor(A, f"{layer.name}:A", axis=-1)
    if B.ndim == 1 and isinstance(B, np.ndarray):
        b_host = rec.program.constants.derived(("pixelCol",), (B,), lambda: B.reshape(k, 1))
        b = rec.tensor(b_host, f"{layer.name}:B", axis=-1)
    else:
        b = rec.tensor(B, f"{layer.name}:B", axis=-1)
        if b is not None and B.ndim == 1:
            b = rec.relayout(rec.view(b, (k, 1)), 1)  # (K,) blocked along K -> (K, 1) blocked along N
    if a is None or b is None:
        return NotImplemented
    if A.ndim == 1:
        a = rec.view(a, (1, k))
    y = rec.alloc(out_shape, np.float32, -1)
    if y.size == 0:
        return _squeezed(rec, y, A, B)
    kb, nb = -(-k // 4), -(-n // 4)
    a_strides = (kb, 1, _batch_strides(a_shape[:-2], batch, m * kb))
    b_strides = (nb, 1, _batch_strides(b_shape[:-2], batch, k * nb))
    if not product(rec, layer, a, b, y, m=m, n=n, k=k, batch=batch, a_strides=a_strides, b_strides=b_strides,
                   frees_tiles=False):
        return NotImplemented
    return _squeezed(rec, y, A, B)


def _squeezed(rec, y: GTensor, A, B) -> GTensor:
    """The product of promoted operands with the promoted dims of 1-D A or B dropped (numpy's MatMul)."""
    shape = tuple(y.shape)
    if A.ndim == 1:
        shape = shape[:-2] + shape[-1:]
    if B.ndim == 1:
        shape = shape[:-1]
    return y if shape == tuple(y.shape) else rec.reshape(y, shape, -1)


@register("Gemm", 7, backend=GPU_PIXEL)
def gemm(rec, layer, A, B, C=None, *, alpha=1.0, beta=1.0, transA=0, transB=0, **attrs):
    """Gemm: alpha * op(A) @ op(B) + beta * C, C broadcast to (M, N), with a fused activation."""
    if not (_f32(A) and _f32(B)) or A.ndim != 2 or B.ndim != 2 or (C is not None and not _f32(C)):
        return NotImplemented
    m, k, k2, n = gemm_dims(A.shape, B.shape, transA, transB)
    if k != k2:
        return NotImplemented
    use_c = C is not None and float(beta) != 0.0
    if use_c:
        try:
            if np.broadcast_shapes(tuple(C.shape), (m, n)) != (m, n):
                return NotImplemented
        except ValueError:
            return NotImplemented
    # Both operands blocked along K (A) and N (B): transposed ones along their first axis.
    a = rec.tensor(A, f"{layer.name}:A", axis=0 if transA else 1)
    b = rec.tensor(B, f"{layer.name}:B", axis=0 if transB else 1)
    if a is None or b is None:
        return NotImplemented
    kb, nb = -(-k // 4), -(-n // 4)
    a_strides = (1, m, []) if transA else (kb, 1, [])
    b_strides = (1, k, []) if transB else (nb, 1, [])
    c = None
    if use_c:
        c_t = rec.tensor(C, f"{layer.name}:C", axis=-1 if C.ndim else None)
        if c_t is None:
            return NotImplemented
        cm, cn = (1,) * (2 - C.ndim) + tuple(C.shape)
        row = (-(-cn // 4)) if cm == m and m > 1 else 0  # texels of one row of C, 0 where C has one row
        c = (c_t, row, 1, 1) if cn == n else (c_t, row, 0, 2)  # a texel of four columns, or lane 0 of row m
    y = rec.alloc((m, n), np.float32, -1)
    if y.size == 0:
        return y
    if not product(rec, layer, a, b, y, m=m, n=n, k=k, batch=(), a_strides=a_strides, b_strides=b_strides,
                    c=c, alpha=float(alpha), beta=float(beta), frees_tiles=False):
        return NotImplemented
    return y


__all__ = ["gemm", "matmul", "rows_per_fragment"]
