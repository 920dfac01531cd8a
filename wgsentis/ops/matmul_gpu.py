"""gpu-compute programs of the matmul family: MatMul (numpy semantics, batched with broadcast batch
dims) and Gemm (alpha, beta, transA, transB, C broadcast), both with a fused activation.

Everything runs through one register-tiled kernel (``wgsl/compute/matmul_body.wgsl``, 8x16 outputs
per invocation, included by ``matmul.wgsl`` with both operands in storage buffers). On lavapipe a
storage-buffer load costs far more than a multiply-add, so operands are read as vec4 whenever their
rows are contiguous and 16-byte aligned; constants are repacked on the host (transposed to (K, N),
columns padded to a multiple of 4) so that they always are, and are read through an rgba32float
texture where one fits (``matmul_ta.wgsl`` / ``matmul_tb.wgsl`` / ``matmul_tab.wgsl``: the same body
with A, B or both bound as textures), which lavapipe fetches far faster. Products of one or two rows
use ``gemv*.wgsl``, the same body with a 1x4 tile. The epilogue (bias, activation) stores whole vec4s
where the output rows allow. With ``Worker(precision="float16")`` constant operands are held in half
precision. The conv family reuses :func:`gemm` for all of its matmul paths. Where A or Y (or a batched
B) passes the binding limit, MatMul and Gemm run in blocks of rows or batches (``_blocks``), each binding its
windows of the operands (``Recorder.window``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from wgsentis.backends.gpu.shader_gen import matmul_subs
from wgsentis.backends.gpu.tensors import Declined, GTensor, fits_binding, fold_groups, loop_passes, window_grain
from wgsentis.ops.activations import activation_expr
from wgsentis.ops.elementwise_gpu import broadcast_strides
from wgsentis.ops.matmul_spec import gemm_dims
from wgsentis.ops.tensor_gpu import dispatch_copy
from wgsentis.ops.registry import GPU_COMPUTE, GPU_PIXEL, register

TILE_M, TILE_N = 8, 16  # outputs per invocation (see matmul.wgsl)
GEMV_MAX_ROWS = 2  # products with at most this many rows use the 1x4-tile kernel (gemv.wgsl)
WORKGROUP = 64
MAX_BATCH_RANK = 4
IDENTITY = ("v", [0.0, 0.0, 0.0])
MAX_TAPS = 88  # per-tap B offsets live in params words 40..127

# Constant operands are read through rgba32float textures where they fit, and device operands whose rows are
# whole texels through linear textures, unless the program's KernelOptions turn them off
# (``texture_operands``, ``linear_operands``: what each choice measured is written there).


def const_operand(rec, host: np.ndarray, name: str, batch: list[int] | None = None, *,
                  texture: bool = True) -> Operand:
    """A constant float32 operand (..., R, C), its rows read as vec4s: from a texture of the 2-D view
    (R', C) when ``texture`` and one fits the device limits, else from an uploaded buffer.
    ``batch``: element strides. Either operand or both may be textures (matmul_ta/tb/tab.wgsl)."""
    cols = host.shape[-1]
    # Worker(precision="float16"): weights held in half precision (rgba16float textures, or f16
    # storage buffers read with shader-f16), widened to f32 in registers; products accumulate in f32.
    half = rec.half_weights and cols % 4 == 0
    if rec.program.kernels.texture_operands and texture:
        mat = host if host.ndim == 2 else rec.derived(("tex2d",), (host,), lambda: host.reshape(-1, cols))
        tex = rec.texture(mat, name, half=half)
        if tex is not None:
            return Operand.of_texture(tex, cols, list(batch or []))
    if half:
        op = Operand(rec.upload_half(host, name), cols, 1, list(batch or []))
        op.half = True
        return op
    return Operand(rec.upload(host, name), cols, 1, list(batch or []))


def fused(layer) -> tuple[str, list[float]]:
    """The layer's fused activation as (WGSL expression of v, [alpha, beta, gamma])."""
    act = getattr(layer, "fused_activation", None)
    if act is None:
        return IDENTITY
    return activation_expr(act[0], act[1])


def host_value(t: Any) -> np.ndarray | None:
    """The host array of a constant (a numpy array or an uploaded tensor that kept its host copy)."""
    if isinstance(t, np.ndarray):
        return t
    if isinstance(t, GTensor) and t.host is not None and t.alloc is None:
        return t.host  # split above the binding limit: repack from the host copy
    return None


class Operand:
    """How the kernel reads one operand: the tensor, vec4 or scalar mode, and element strides."""

    def __init__(self, t: GTensor, row: int, col: int, offset_batch: list[int]) -> None:
        self.t = t
        self.row = row  # stride between rows (A: m, B: k), elements
        self.col = col  # stride between columns (A: k, B: n), elements
        self.batch = offset_batch  # per batch dim, elements
        self.vec = col == 1 and row % 4 == 0 and all(s % 4 == 0 for s in offset_batch)
        self.tex = None  # a GTexture holding the same matrix (rows of the 2-D view) when set
        self.half = False  # stored as f16 (vec4<f16> rows), widened on load
        self.linear = False  # ``tex`` is a linear texture (the buffer's floats in order)

    @classmethod
    def of_texture(cls, tex: Any, row: int, offset_batch: list[int]) -> Operand:
        """An operand read from the texture ``tex``: rows of ``row`` elements, batch offsets in elements."""
        op = cls(None, row, 1, offset_batch)
        op.tex = tex
        return op

    @classmethod
    def of_linear_texture(cls, tex: Any, row: int, offset_batch: list[int]) -> Operand:
        """An operand read from a linear texture (``Recorder.copy_to_texture``) holding the matrix's
        floats in buffer order: rows of ``row`` elements (a multiple of 4), batch offsets in elements."""
        op = cls.of_texture(tex, row, offset_batch)
        if not op.vec:
            raise ValueError(f"a linear texture operand needs rows and batch offsets in whole texels: {row}, "
                             f"{offset_batch}")
        op.linear = True
        return op

    def form(self) -> str:
        """How the kernel reads the operand (shader_gen.MATMUL_FORMS): from a linear texture, a texture of its
        2-D view, vec4<f16> rows, vec4 rows, or strided floats."""
        if self.tex is not None:
            return "linear" if self.linear else "tex"
        if self.half:
            return "half"  # always vec4 rows (const_operand holds only whole-texel rows in half precision)
        return "vec" if self.vec else "scalar"

    def strides(self) -> tuple[int, int, list[int]]:
        """(row, col, batch strides) in the units the kernel indexes (vec4, elements, texture rows; a
        linear texture counts texels)."""
        if self.linear:
            return self.row // 4, 1, [s // 4 for s in self.batch]
        if self.tex is not None:
            return 1, 1, [s // self.row for s in self.batch]
        if self.vec:
            return self.row // 4, 1, [s // 4 for s in self.batch]
        return self.row, self.col, list(self.batch)


def device_operand(rec, t: GTensor, row: int, batch: list[int], name: str) -> Operand:
    """An operand held in the device tensor ``t`` (rows of ``row`` elements, batch offsets in elements):
    copied into a linear texture and read from there where rows are whole texels and textures are on
    (lavapipe fetches textures faster than storage buffers, and the copy is a memcpy), else read from
    its buffer."""
    op = Operand(t, row, 1, batch)
    kernels = rec.program.kernels
    if not (kernels.texture_operands and kernels.linear_operands and op.vec and t.alloc is not None
            and t.size % 4 == 0):
        return op
    tex = rec.scratch_texture(1, t.size, name)
    if tex is None:
        return op
    rec.copy_to_texture(t, tex)
    return Operand.of_linear_texture(tex, row, batch)


def gemm(rec, a: Operand, b: Operand, y: GTensor, m: int, n: int, k: int, *, y_row: int, y_col0: int = 0,
         y_batch: list[int] | None = None, batch_shape: list[int] | None = None, bias: GTensor | None = None,
         bias_strides: tuple[int, int] = (0, 0), alpha: float = 1.0, beta: float = 1.0,
         accumulate: bool = False, final: bool = True, act: tuple[str, list[float]] = IDENTITY,
         taps: list[int] | None = None, col_map: tuple[int, int] = (0, 0)) -> None:
    """Record Y[b, m, y_col0 + n] (+)= act(alpha * A @ B + beta * bias) for every batch index.

    ``taps`` (implicit-GEMM convolution): the K loop runs once per entry, tap t reading A columns
    t*k..(t+1)*k-1 and B rows from the entry's offset (B units). ``col_map = (Wp, ow)``: column
    n = oy*Wp + ox is stored at oy*ow + ox, and not at all when ox >= ow.
    """
    batch_shape = list(batch_shape or [])
    if len(batch_shape) > MAX_BATCH_RANK:
        raise ValueError("batch rank above 4")
    nbatch = math.prod(batch_shape)
    if m == 0 or n == 0 or nbatch == 0:
        return
    a_row, a_col, a_batch = a.strides()
    b_row, b_col, b_batch = b.strides()
    pad = [1] * (MAX_BATCH_RANK - len(batch_shape))

    def four(strides: list[int] | None) -> list[int]:
        strides = list(strides or [])
        strides = strides + [0] * (len(batch_shape) - len(strides))  # operands without batch dims
        return strides + [0] * (MAX_BATCH_RANK - len(strides))
    flags = (1 if bias is not None else 0) | (2 if accumulate else 0) | (4 if final else 0)
    # One or two rows (a batch-1 fully-connected layer): the 1x4-tile kernel (gemv*.wgsl).
    kernel = "gemv" if m <= GEMV_MAX_ROWS else "matmul"
    tile_m, tile_n = (1, 4) if kernel == "gemv" else (TILE_M, TILE_N)
    tiles_n = -(-n // tile_n)
    tiles = -(-m // tile_m) * tiles_n
    params = [m, n, k, tiles_n, a_row, a_col, b_row, b_col, y_row, y_col0, bias_strides[0], bias_strides[1],
              flags, float(alpha), float(beta), *[float(v) for v in act[1]], len(batch_shape), 0,
              *batch_shape, *pad, *four(a_batch), *four(b_batch), *four(y_batch),
              col_map[0], col_map[1], len(taps or [0]), 0, *(taps or [0])]
    groups = fold_groups(-(-tiles // WORKGROUP), rec.ctx.max_workgroups)
    if nbatch > rec.ctx.max_workgroups:
        raise ValueError("too many batches")
    a_form, b_form = a.form(), b.form()
    if bias is None:
        bias = rec.upload(rec.static(_ZERO), "zero")
    # vec4 stores of whole output groups where every stored group is 16-byte aligned and contiguous.
    vec_y = (rec.program.kernels.vec4_stores and col_map[0] == 0 and (bias is None or bias_strides[1] == 0)
             and y_row % 4 == 0 and y_col0 % 4 == 0 and all(s % 4 == 0 for s in (y_batch or [])))
    # The operands' forms, the stores and the activation are the variants; every size is a params word.
    subs, constants = matmul_subs(a_form, b_form, vec_y, act[0])
    grid = (groups[0], groups[1], nbatch)
    # Each invocation runs the vec4 K loop once per tap, then the K % 4 remainder: a K the device's loops
    # cannot cover makes the layer fall back (Recorder.dispatch).
    loops = loop_passes(len(taps or [0]), k // 4) + loop_passes(k % 4)
    if a.tex is not None and b.tex is not None:
        rec.dispatch(f"compute/{kernel}_tab.wgsl", [bias], [y], params, grid, workgroup=WORKGROUP, subs=subs,
                     constants=constants, textures=[a.tex, b.tex], loops=loops)
    elif a.tex is not None:
        rec.dispatch(f"compute/{kernel}_ta.wgsl", [b.t, bias], [y], params, grid, workgroup=WORKGROUP, subs=subs,
                     constants=constants, textures=[a.tex], loops=loops)
    elif b.tex is not None:
        rec.dispatch(f"compute/{kernel}_tb.wgsl", [a.t, bias], [y], params, grid, workgroup=WORKGROUP, subs=subs,
                     constants=constants, textures=[b.tex], loops=loops)
    else:
        rec.dispatch(f"compute/{kernel}.wgsl", [a.t, b.t, bias], [y], params, grid, workgroup=WORKGROUP, subs=subs,
                     constants=constants, loops=loops)

_ZERO = np.zeros(4, np.float32)  # binds as one vec4 too


def _f32(t: Any) -> bool:
    return getattr(t, "dtype", None) == np.float32


def _device(t: Any) -> GTensor | None:
    """``t`` when it is a tensor bound as one device buffer (not a constant kept on the host)."""
    return t if isinstance(t, GTensor) and t.alloc is not None else None


def padded_cols(x: np.ndarray) -> np.ndarray:
    """``x`` (..., R, C) with C padded by zeros to a multiple of 4 (vec4 rows)."""
    c = x.shape[-1]
    cp = -(-c // 4) * 4
    if cp == c:
        return x
    out = np.zeros((*x.shape[:-1], cp), np.float32)
    out[..., :c] = x
    return out


def matmul_shapes(A, B) -> tuple[tuple[int, ...], tuple[int, ...], int, int, int, tuple[int, ...]] | None:
    """MatMul's operands as numpy sees them: (A's shape, B's shape with 1-D operands promoted, m, k, n, the
    broadcast batch dims), or None where the CPU kernel raises (scalars, k mismatch, batches that do not
    broadcast)."""
    if A.ndim == 0 or B.ndim == 0:
        return None
    a_shape = (1, *A.shape) if A.ndim == 1 else tuple(A.shape)  # (..., M, K)
    b_shape = (*B.shape, 1) if B.ndim == 1 else tuple(B.shape)  # (..., K, N)
    m, k = a_shape[-2:]
    k2, n = b_shape[-2:]
    if k != k2:
        return None
    try:
        batch = tuple(int(d) for d in np.broadcast_shapes(a_shape[:-2], b_shape[:-2]))
    except ValueError:
        return None
    return a_shape, b_shape, int(m), int(k), int(n), batch


@register("MatMul", 1, backend=GPU_COMPUTE)
def matmul(rec, layer, A, B):
    """MatMul with numpy semantics: 1-D operands promoted and squeezed, batch dims broadcast."""
    shapes = matmul_shapes(A, B) if _f32(A) and _f32(B) else None
    if shapes is None:
        return NotImplemented
    a_shape, b_shape, m, k, n, batch = shapes
    out_shape = (*batch, m, n)
    if A.ndim == 1:
        out_shape = out_shape[:-2] + out_shape[-1:]
    if B.ndim == 1:
        out_shape = out_shape[:-1]
    # Collapse leading batch dims where both operands are full (keeps rank <= 4 for common cases).
    if len(batch) > MAX_BATCH_RANK or math.prod(batch) > rec.ctx.max_workgroups:
        return NotImplemented
    b_host = host_value(B) if _device(B) is None else None
    b_ncols = n
    if b_host is not None and B.ndim >= 2 and n % 4:
        b_host = rec.derived(("pad",), (b_host,), lambda: padded_cols(b_host.astype(np.float32)))
        b_ncols = b_host.shape[-1]
    elif b_host is not None and B.ndim == 1:
        b_host = rec.derived(("col",), (b_host,), lambda: b_host.reshape(k, 1))
    a_dev, b_dev = _device(A), _device(B)
    a_host = host_value(A) if a_dev is None else None
    if (a_dev is None and a_host is None) or (b_dev is None and b_host is None):
        return NotImplemented  # a split device tensor without a host copy
    y = rec.alloc(out_shape, np.float32)
    if y.size == 0:
        return y
    if k == 0:
        return _fill_zero_then_act(rec, y, layer)
    a_bs = broadcast_strides(a_shape[:-2], batch) if batch else []
    b_bs = broadcast_strides(b_shape[:-2], batch) if batch else []
    limit = rec.ctx.max_binding
    if not all(fits_binding(t, limit) for t in (a_dev, b_dev, y) if t is not None):
        return y if _matmul_blocks(rec, layer, a_dev, b_dev, b_host, y, (m, k, n, b_ncols), batch, a_bs,
                                   b_bs) else NotImplemented
    a_batch, b_batch = [s * m * k for s in a_bs], [s * k * b_ncols for s in b_bs]
    a_op = device_operand(rec, a_dev, k, a_batch, f"{layer.name}:A") if a_dev is not None else \
        const_operand(rec, a_host, f"{layer.name}:A", a_batch)
    b_op = device_operand(rec, b_dev, b_ncols, b_batch, f"{layer.name}:B") if b_dev is not None else \
        const_operand(rec, b_host, f"{layer.name}:B", b_batch)
    y_batch = [s * m * n for s in broadcast_strides(batch, batch)] if batch else []
    gemm(rec, a_op, b_op, y, m, n, k, y_row=n, y_batch=y_batch, batch_shape=list(batch), act=fused(layer))
    return y


def _blocks(count: int, rows: int, fits: Callable[[int, int], bool], count_grain: int,
            row_grain: int) -> list[tuple[int, int, int, int]] | None:
    """The fewest blocks (first matrix, matrices, first row, rows) covering ``count`` matrices of ``rows`` rows
    whose parts fit (``fits(matrices, rows)``): all, else runs of whole matrices (a multiple of ``count_grain``),
    else runs of rows (a multiple of ``row_grain``) of one matrix, where each matrix starts on a window boundary
    (``count_grain`` 1). Every block but the last starts a whole number of grains after the one before it, so
    its windows start where a binding may. None where no block fits."""
    if fits(count, rows):
        return [(0, count, 0, rows)]
    per = max((g for g in range(count_grain, count, count_grain) if fits(g, rows)), default=0) if \
        fits(count_grain, rows) else 0
    if per:
        return [(first, min(per, count - first), 0, rows) for first in range(0, count, per)]
    if count_grain != 1 and count > 1:
        return None
    lo, hi = 0, rows // row_grain  # the most grains of rows that fit: fits shrinks as rows grow
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(1, mid * row_grain):
            lo = mid
        else:
            hi = mid - 1
    per = lo * row_grain
    if per == 0:
        return None
    return [(first, 1, r, min(per, rows - r)) for first in range(count) for r in range(0, rows, per)]


def _matmul_blocks(rec, layer, a_dev, b_dev, b_host, y, dims: tuple[int, int, int, int], batch: tuple[int, ...],
                   a_bs: list[int], b_bs: list[int]) -> bool:
    """MatMul whose A or Y (or a batched B) passes the binding limit, in blocks (``_blocks``) that bind windows
    of them (``Recorder.window``): blocks of rows of A and Y where B is one matrix for every batch (A's batches
    then fold into its rows), else blocks of batches (each batch's part of A, B and Y), else rows of one batch.
    A must be a device tensor, each operand either one matrix for all batches or one per batch. Returns False
    where it does not apply (the layer falls back)."""
    m, k, n, b_ncols = dims
    nbatch = math.prod(batch)
    a_full, b_full = nbatch > 1 and any(a_bs), nbatch > 1 and any(b_bs)  # one matrix per batch
    if a_dev is None or (a_full and a_dev.size != nbatch * m * k) or (b_full and b_dev is None) or \
            (b_full and b_dev.size != nbatch * k * b_ncols) or (not a_full and not b_full and nbatch > 1):
        return False  # a constant A, an operand broadcast along some batch dims only, or one product repeated
    count, rows = (1, nbatch * m) if not b_full else (nbatch, m)  # (count, rows) matrices of Y's rows
    align = rec.window_align
    row_grain = math.lcm(window_grain(align, k), window_grain(align, n))
    count_grain = math.lcm(window_grain(align, m * n), window_grain(align, m * k) if a_full else 1,
                           window_grain(align, k * b_ncols))
    limit = rec.ctx.max_binding // 16 * 16

    def fits(matrices: int, block_rows: int) -> bool:
        a_bytes = 4 * (matrices if a_full else 1) * block_rows * k
        b_bytes = 0 if b_dev is None else 4 * matrices * k * b_ncols if b_full else b_dev.nbytes
        return max(a_bytes, b_bytes, 4 * matrices * block_rows * n) <= limit and matrices <= rec.ctx.max_workgroups

    blocks = _blocks(count, rows, fits, count_grain, row_grain)
    if blocks is None:
        return False
    try:
        for first, matrices, row0, block_rows in blocks:
            rec.begin_tile()  # each block's operand textures are the last block's
            batched = matrices > 1
            # A's rows of the block: of its matrices, or of the one matrix every batch shares (rows of folded
            # batches, where B is one matrix).
            a_part = rec.window(a_dev, ((first * m if a_full else 0) + row0) * k,
                                ((matrices if a_full else 1) * block_rows * k,))
            a_op = device_operand(rec, a_part, k, [m * k if a_full else 0] if batched else [], f"{layer.name}:A")
            if b_dev is None:
                b_op = const_operand(rec, b_host, f"{layer.name}:B")
            else:
                b_part = rec.window(b_dev, first * k * b_ncols, (matrices * k * b_ncols,)) if b_full else b_dev
                b_op = device_operand(rec, b_part, b_ncols, [k * b_ncols] if batched else [], f"{layer.name}:B")
            y_part = rec.window(y, (first * m + row0) * n, (matrices * block_rows * n,))
            gemm(rec, a_op, b_op, y_part, block_rows, n, k, y_row=n, y_batch=[m * n] if batched else [],
                 batch_shape=[matrices] if batched else [], act=fused(layer))
    finally:
        rec.end_tiles()
    return True


def _fill_zero_then_act(rec, y: GTensor, layer, bias=None, bias_strides=(0, 0), beta=1.0):
    """K == 0: the product is zero; run the kernel with an empty K loop to write bias/activation."""
    m, n = (y.shape[-2], y.shape[-1]) if y.ndim >= 2 else (1, y.shape[-1])
    zero = rec.upload(rec.static(_ZERO), "zero")
    nb = y.size // max(1, m * n)
    gemm(rec, Operand(zero, 0, 1, []), Operand(zero, 0, 1, []), y, m, n, 0, y_row=n,
         y_batch=[m * n] if nb > 1 else [], batch_shape=[nb] if nb > 1 else [], bias=bias,
         bias_strides=bias_strides, beta=beta, act=fused(layer))
    return y


@register("Gemm", 7, backend=GPU_COMPUTE)
def gemm_op(rec, layer, A, B, C=None, *, alpha=1.0, beta=1.0, transA=0, transB=0, **attrs):
    """Gemm: alpha * op(A) @ op(B) + beta * C, C broadcast to (M, N), with a fused activation."""
    if not (_f32(A) and _f32(B)) or A.ndim != 2 or B.ndim != 2 or (C is not None and not _f32(C)):
        return NotImplemented
    m, k, k2, n = gemm_dims(A.shape, B.shape, transA, transB)
    if k != k2:
        return NotImplemented
    bias, bias_strides = None, (0, 0)
    if C is not None and float(beta) != 0.0:
        try:
            if np.broadcast_shapes(C.shape, (m, n)) != (m, n):
                return NotImplemented
        except ValueError:
            return NotImplemented
        bias = C if isinstance(C, GTensor) and C.alloc is not None else rec.upload(np.asarray(host_value(C)),
                                                                                     f"{layer.name}:C")
        s = broadcast_strides(C.shape, (m, n))
        bias_strides = (s[0], s[1])
    y = rec.alloc((m, n), np.float32)
    if y.size == 0:
        return y
    if k == 0:
        return _fill_zero_then_act(rec, y, layer, bias, bias_strides, beta)
    act = fused(layer)
    limit = rec.ctx.max_binding
    if not all(fits_binding(t, limit) for t in (_device(A), _device(B), y) if t is not None):
        if transA:  # op(A)'s rows are A's columns, strided: transposed first, in tiles of windows
            A = _transposed_in_tiles(rec, A)
            if A is None:
                return NotImplemented
        return y if _gemm_blocks(rec, layer, A, B, y, bias, bias_strides, alpha, beta, transB) else NotImplemented
    # A: constants are repacked to (M, K) rows; a device A^T is read with strides.
    a_host = host_value(A)
    if a_host is not None:
        a_mat = rec.derived(("gemmA", transA), (a_host,), lambda: padded_cols(a_host.T if transA else a_host))
        a_op = const_operand(rec, a_mat, f"{layer.name}:A")
    elif transA:
        a_op = Operand(A, 1, m, [])
    else:
        a_op = device_operand(rec, A, k, [], f"{layer.name}:A")
    _gemm_b(rec, layer, a_op, B, y, m, n, k, bias, bias_strides, alpha, beta, transB, act)
    return y


def _gemm_b(rec, layer, a_op: Operand, B, y: GTensor, m: int, n: int, k: int, bias, bias_strides, alpha, beta,
            transB, act) -> None:
    """Record Gemm's products of the A rows ``a_op`` (``m`` of them) with B into ``y`` (those rows of Y): a device
    B whole, a constant B in (K, N) column blocks, each within the binding limit, padded to vec4 rows."""
    b_host = host_value(B)
    if b_host is None:
        b_op = Operand(B, 1, k, []) if transB else device_operand(rec, B, n, [], f"{layer.name}:B")
        gemm(rec, a_op, b_op, y, m, n, k, y_row=n, bias=bias, bias_strides=bias_strides, alpha=alpha,
             beta=beta, act=act)
        return
    per = max(4, (rec.ctx.max_binding // (4 * max(k, 1))) // 4 * 4)
    for c0 in range(0, n, per):
        c1 = min(n, c0 + per)

        def block(c0=c0, c1=c1):
            part = b_host[c0:c1].T if transB else b_host[:, c0:c1]
            return padded_cols(np.asarray(part, np.float32))

        b_mat = rec.derived(("gemmB", transB, c0, c1), (b_host,), block)
        b_op = const_operand(rec, b_mat, f"{layer.name}:B[{c0}:{c1}]")
        gemm(rec, a_op, b_op, y, m, c1 - c0, k, y_row=n, y_col0=c0, bias=bias,
             bias_strides=bias_strides, alpha=alpha, beta=beta, act=act)


def _transposed_in_tiles(rec, A) -> GTensor | None:
    """A device matrix A (K, M) past the binding limit transposed into a new (M, K) tensor: tiles of K rows of A
    by M rows of the result, each a strided copy between a window of A's rows and a window of the result's (both
    starting where a binding may). None where A is not a device tensor or not even one grain of rows fits."""
    a_dev = _device(A)
    if a_dev is None or A.ndim != 2:
        return None
    k, m = A.shape
    limit = rec.ctx.max_binding // 16 * 16
    align = rec.window_align
    k_grain, m_grain = window_grain(align, m), window_grain(align, k)
    k_per = (limit // (4 * max(m, 1))) // k_grain * k_grain
    m_per = (limit // (4 * max(k, 1))) // m_grain * m_grain
    if not k_per or not m_per:
        return None
    at = rec.alloc((m, k), np.float32)
    for k0 in range(0, k, k_per):
        kb = min(k_per, k - k0)
        a_part = rec.window(a_dev, k0 * m, (kb * m,))
        for m0 in range(0, m, m_per):
            mb = min(m_per, m - m0)
            at_part = rec.window(at, m0 * k, (mb * k,))
            # at_part[i * k + k0 + j] = a_part[j * m + m0 + i], i < mb, j < kb
            dispatch_copy(rec, a_part, at_part, [(mb, 1, k, 0), (kb, m, 1, 0)], in_base=m0, out_base=k0)
    return at


def _gemm_blocks(rec, layer, A, B, y: GTensor, bias, bias_strides, alpha, beta, transB) -> bool:
    """Gemm whose A or Y passes the binding limit, in blocks of rows (``_blocks``), each binding its windows of
    A, Y and a bias that varies along the rows (``Recorder.window``). A must be a device tensor, not transposed
    (a block of op(A)'s rows is then contiguous), and a device B must fit a binding. Returns False where it does
    not apply (the layer falls back)."""
    a_dev = _device(A)
    m, n = y.shape
    k = A.shape[1]
    b_dev = _device(B)
    if a_dev is None or A.ndim != 2 or a_dev.size != m * k or \
            (b_dev is not None and not fits_binding(b_dev, rec.ctx.max_binding)):
        return False
    bias_row = bias_strides[0] if bias is not None else 0

    def bias_span(rows: int) -> int:
        """Elements of the bias that ``rows`` rows of Y read."""
        return (rows - 1) * bias_row + (n - 1) * bias_strides[1] + 1
    align = rec.window_align
    row_grain = math.lcm(window_grain(align, k), window_grain(align, n), window_grain(align, bias_row))
    limit = rec.ctx.max_binding // 16 * 16

    def fits(_matrices: int, rows: int) -> bool:
        return max(4 * rows * k, 4 * rows * n, 4 * bias_span(rows) if bias_row else 0) <= limit

    blocks = _blocks(1, m, fits, 1, row_grain)
    if blocks is None or (bias_row and (bias is None or bias.alloc is None)):
        return False
    act = fused(layer)
    try:
        for _first, _one, row0, rows in blocks:
            rec.begin_tile()
            a_op = device_operand(rec, rec.window(a_dev, row0 * k, (rows, k)), k, [], f"{layer.name}:A")
            bias_part = rec.window(bias, row0 * bias_row, (bias_span(rows),)) if bias_row else bias
            _gemm_b(rec, layer, a_op, B, rec.window(y, row0 * n, (rows, n)), rows, n, k, bias_part, bias_strides,
                    alpha, beta, transB, act)
    finally:
        rec.end_tiles()
    return True


@register("Einsum", 12, backend=GPU_COMPUTE)
@register("Einsum", 12, backend=GPU_PIXEL)
def einsum_declined(rec, layer, *inputs, equation=None):
    """Einsum has no GPU program of its own: the LowerEinsum pass (passes/einsum.py) rewrites it into Transpose,
    Reshape, ReduceSum, Mul and MatMul layers wherever it can. An Einsum still here runs its CPU kernel; this
    says why it was kept."""
    terms = str(equation or "").replace(" ", "").partition("->")[0].split(",")
    for k, term in enumerate(terms):
        letters = term.replace("...", "")
        repeated = sorted({c for c in letters if letters.count(c) > 1})
        if repeated:
            raise Declined(f"operand {k} ('{term}') repeats label '{repeated[0]}' (a diagonal), which is not "
                           "lowered to GPU ops: it runs its CPU kernel")
    raise Declined("an operand's rank was unknown when the model was optimized, so the Einsum was not lowered "
                   "to Transpose/Reshape/MatMul layers: it runs its CPU kernel")


__all__ = ["IDENTITY", "MAX_TAPS", "Operand", "const_operand", "device_operand", "fused", "gemm", "host_value",
           "padded_cols"]
