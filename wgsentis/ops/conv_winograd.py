"""Winograd F(4x4, 3x3) convolution on the CPU: 3x3 stride-1 float32 layers on planes wide enough for its
tiles, where it was measured to win over im2col (``winograd_applies``); ops/conv.py's ``conv_nd`` takes it
unless the program's KernelOptions turn ``cpu_winograd`` off."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from wgsentis.ops.conv_windows import ConvEpilogue, derived_weights, fill_padded
from wgsentis.ops.parallel import MIN_SPLIT_FLOPS, HostWorkspace, blas_threads, run_split

# Winograd F(4x4, 3x3) (interpolation points 0, +-1, +-2 and infinity): a 4x4 output tile from a 6x6
# input tile with 36 products per (input, output) channel pair where the direct form takes 144.
_WINO_BT = np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                     [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], np.float64)
_WINO_G = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                    [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]], np.float64)
_WINO_AT = np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0],
                     [0, 1, -1, 8, -8, 1]], np.float64)
# The 2-D transforms separably, two small products each (the matrix over the tile rows of every column,
# then over the columns, a batch of six, no transposes between): 3x fewer operations than one (36, 36)
# product on the flattened tiles, but bound by memory traffic once the tiles leave the cache. So the
# separable form up to 2^16 tile columns (channels x tiles), the Kronecker product beyond. Alternating,
# whole layers: DenseNet's 128->32 at 56x56 and 28x28 1.10x, 64->96 at 28x28 1.05x; VGG's 64->64 at
# 224x224 0.91-0.97x separable, so it keeps the single product. Where BLAS runs several threads (spin-wait
# mode) the single product always wins, since BLAS splits it while the separable form's thin products
# stay on one thread: interleaved, every Winograd layer of the reference models, 246 -> 239 ms (0.89-0.99
# per layer, VGG-19's 64->64 at 224x224 1.03).
_WINO_BT32 = _WINO_BT.astype(np.float32)
_WINO_AT32 = _WINO_AT.astype(np.float32)
SEPARABLE_MAX_COLUMNS = 1 << 16
_WINO_IN = np.kron(_WINO_BT, _WINO_BT).astype(np.float32)
_WINO_OUT = np.kron(_WINO_AT, _WINO_AT).astype(np.float32)

# Use it where it wins on 2 cores (measured against im2col + sgemm, one layer at a time, alternating):
# - at least 36 tiles, or 9 where the transformed weights (36 * C * M floats, 4x the 3x3 weights) stay
#   in cache: the products read them once per run, so with few tiles they are bound by memory
#   (ZFNet's 512->512 at 12x12, 38 MB of weights: 1.2x alone, a loss inside the model; 512->512 at 7x7
#   0.7x even alone);
# - at most 35% of the computed outputs in edge-tile overhang (13x13 outputs compute 16x16: 0.8-1.0x;
#   14x14 computes 16x16 and wins 1.0-1.6x);
# - at least 64 input channels: the 36 products are C deep (16->64 at 55x55 0.5x, 32->128 at 27x27
#   0.8x), and 16 output channels.
# Wins seen: 64->64 at 56x56 1.2-1.6x, 128->128 at 28x28 1.3-1.8x, 96->24 at 160x160 1.7x, 128->32 at
# 56x56 1.6-1.7x, 512->512 at 12x12 1.2x, VGG-19's 512->512 at 28x28 2.3x. (A program whose KernelOptions
# turn ``cpu_winograd`` off never takes it.)
WINOGRAD_MIN_TILES = 36
WINOGRAD_CACHED_MIN_TILES = 9
WINOGRAD_CACHED_WEIGHT_BYTES = 8 << 20
WINOGRAD_MAX_OVERHANG = 1.35  # computed outputs (whole tiles) / wanted outputs
WINOGRAD_MIN_IN_CHANNELS = 64
WINOGRAD_MIN_OUT_CHANNELS = 16


def winograd_applies(x: np.ndarray, w: np.ndarray, group: int, strides, dilations, begins, ends, outs) -> bool:
    """Whether a convolution runs as Winograd F(4x4, 3x3) on the CPU (where the program allows it)."""
    if x.ndim != 4 or x.dtype != np.float32 or group != 1 or tuple(w.shape[2:]) != (3, 3):
        return False
    if tuple(strides) != (1, 1) or tuple(dilations) != (1, 1) or min(*begins, *ends) < 0:
        return False
    m, c = w.shape[:2]
    if c < WINOGRAD_MIN_IN_CHANNELS or m < WINOGRAD_MIN_OUT_CHANNELS:
        return False
    th, tw = -(-outs[0] // 4), -(-outs[1] // 4)
    tiles = th * tw
    cached = 36 * c * m * x.itemsize <= WINOGRAD_CACHED_WEIGHT_BYTES
    enough = tiles >= WINOGRAD_MIN_TILES or (cached and tiles >= WINOGRAD_CACHED_MIN_TILES)
    return enough and 16 * tiles <= WINOGRAD_MAX_OVERHANG * outs[0] * outs[1]


def winograd_weights(w: np.ndarray) -> np.ndarray:
    """(36, M, C) transformed 3x3 weights G w G^T, computed in float64."""
    m, c = w.shape[:2]
    u = np.einsum("ai,mcij,bj->abmc", _WINO_G, w.astype(np.float64), _WINO_G)
    return np.ascontiguousarray(u.reshape(36, m, c).astype(w.dtype))


def _winograd_transform(matrix: np.ndarray, kron: np.ndarray, tiles: np.ndarray, out: np.ndarray,
                        workspace: HostWorkspace) -> None:
    """``out`` (r*r, n) = (matrix x matrix) applied to float32 ``tiles`` (6*6, n): ``matrix`` (r, 6) over
    each tile's rows, then its columns; ``kron`` is the same as one (r*r, 36) product."""
    r = matrix.shape[0]
    n = tiles.shape[1]
    if n > SEPARABLE_MAX_COLUMNS or blas_threads() > 1:
        np.matmul(kron, tiles, out=out)
        return
    rows = workspace.scratch("wino_rows", (r, 6 * n), tiles.dtype)
    np.matmul(matrix, tiles.reshape(6, 6 * n), out=rows)  # (r, 6 cols, n)
    np.matmul(matrix, rows.reshape(r, 6, n), out=out.reshape(r, r, n))


def conv_winograd_3x3(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, begins, outs, threads: int,
                       workspace: HostWorkspace, cache: dict | None,
                       epilogue: ConvEpilogue | None = None) -> np.ndarray:
    """3x3 stride-1 convolution as Winograd F(4x4, 3x3), image by image, in two parallel phases:
    - over input-channel ranges: the zero-padded input cut into overlapping 6x6 tiles (one strided
      gather into (36, C_r*T)) and transformed by one product into V (36, C, T);
    - over output-channel ranges: the 36 (M_r, C) @ (C, T) products with the transformed weights, one
      product back to 4x4 tiles, scattered into the output with the bias.
    Each thread runs its range end to end: one hand-off per phase, not one per product."""
    n, c, h, wd = x.shape
    m = w.shape[0]
    oh, ow = outs
    th, tw = -(-oh // 4), -(-ow // 4)
    tiles = th * tw
    u = derived_weights(cache, "winograd4", (w,), lambda: winograd_weights(w))  # (36, M, C)
    top, left = begins
    hp, wp = 4 * th + 2, 4 * tw + 2
    y = np.empty((n, m, oh, ow), dtype=x.dtype)
    exact = oh == 4 * th and ow == 4 * tw
    bias = np.zeros((m, 1, 1, 1, 1), x.dtype) if b is None else b.reshape(m, 1, 1, 1, 1)
    parts = threads if 2 * 36 * m * c * tiles >= MIN_SPLIT_FLOPS else 1
    v = np.empty((36, c, tiles), dtype=x.dtype)  # shared by both phases: not per-thread scratch
    y3 = y.reshape(n, m, oh * ow)
    for i in range(n):
        image = x[i]

        def transform_in(lo: int, hi: int, image=image) -> None:
            rows = hi - lo
            padded = workspace.scratch("wino_padded", (rows, hp, wp), x.dtype)
            fill_padded(padded, image[lo:hi, :min(h, hp - top), :min(wd, wp - left)], begins)
            s_c, s_h, s_w = padded.strides
            # (6, 6, C_r, th, tw): tile (ty, tx) starts at row 4*ty, column 4*tx
            windows = as_strided(padded, (6, 6, rows, th, tw), (s_h, s_w, s_c, 4 * s_h, 4 * s_w),
                                 writeable=False)
            d = workspace.scratch("wino_d", (36, rows * tiles), x.dtype)
            np.copyto(d.reshape(6, 6, rows, th, tw), windows)
            _winograd_transform(_WINO_BT32, _WINO_IN, d, v[:, lo:hi].reshape(36, rows * tiles), workspace)

        def products_out(lo: int, hi: int, i=i) -> None:
            rows = hi - lo
            prod = workspace.scratch("wino_prod", (36, rows, tiles), x.dtype)
            np.matmul(u[:, lo:hi], v, out=prod)  # (36, M_r, T)
            back = workspace.scratch("wino_back", (16, rows * tiles), x.dtype)
            _winograd_transform(_WINO_AT32, _WINO_OUT, prod.reshape(36, rows * tiles), back, workspace)
            # (4, 4, M_r, th, tw) -> (M_r, th, 4, tw, 4): output row 4*ty + a, column 4*tx + b
            blocks = back.reshape(4, 4, rows, th, tw).transpose(2, 3, 0, 4, 1)
            if exact:
                np.add(blocks, bias[lo:hi], out=y[i, lo:hi].reshape(rows, th, 4, tw, 4))
            else:
                full = workspace.scratch("wino_out", (rows, th, 4, tw, 4), x.dtype)
                np.add(blocks, bias[lo:hi], out=full)
                y[i, lo:hi] = full.reshape(rows, 4 * th, 4 * tw)[:, :oh, :ow]
            if epilogue is not None:
                index = (slice(i, i + 1), slice(lo, hi), slice(None))
                epilogue.apply(y3[index], index)

        run_split(c, parts, transform_in, workspace=workspace)
        run_split(m, parts, products_out, workspace=workspace)
    return y
