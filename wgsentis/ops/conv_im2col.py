"""Convolutions lowered onto one product on the CPU: kn2row (stride 1: the stacked tap weights times the input
planes in place, then shifted sums of the product's rows) and im2col (the input windows gathered into columns,
then one sgemm per group and image, in chunks of output rows that stay in cache). ops/conv.py's ``conv_nd``
picks them."""

from __future__ import annotations

import math

import numpy as np

from wgsentis.ops.conv_windows import FLOAT_KINDS, ConvEpilogue, FlatWindows, derived_weights, pad_spatial, window_view
from wgsentis.ops.conv_winograd import winograd_applies
from wgsentis.ops.parallel import MIN_SPLIT_FLOPS, TRANSIENT, HostWorkspace, par_matmul, run_split

# Bytes of one column block's tap products in the kn2row form: (K*M, columns) float32 per product.
KN2ROW_BLOCK_BYTES = 2 << 20
KN2ROW_MIN_BLOCK_COLUMNS = 256


def kn2row_applies(x: np.ndarray, w: np.ndarray, group: int, strides, dilations, begins, ends, outs,
                   winograd: bool = True) -> bool:
    """Whether a stride-1 convolution runs as kn2row: where it has at most half as many output channels as
    input channels (its K shifted sums of M rows cost less than im2col's gather of K*C rows), and on planes
    of at most 4x4 Winograd tiles where Winograd would run (its transforms and edge overhang weigh most
    there). Interleaved per layer against the path it replaces, one kernel thread, BLAS on two: DenseNet's
    128->32 3x3 at 56/28/14/7 0.79/0.62/0.53/0.74, PP-OCR det's 96->24 at 160..20 0.71-0.77, Inception
    v2's 14x14 layers 0.69-0.81 (192 channels and up 0.97-1.02). It lost where M >= C on im2col (1.2-2.5)
    and on larger planes under Winograd (1.15-3.2). ``winograd``: whether the program allows Winograd."""
    if x.ndim != 4 or x.dtype not in FLOAT_KINDS or group != 1 or tuple(strides) != (1, 1):
        return False
    if w.shape[2] * w.shape[3] == 1 or min(*begins, *ends) < 0 or 0 in outs:
        return False
    m, c = w.shape[:2]
    if 2 * m <= c:
        return True
    tiles = -(-outs[0] // 4) * -(-outs[1] // 4)
    return tiles <= 16 and winograd and winograd_applies(x, w, group, strides, dilations, begins, ends, outs)


def conv_kn2row(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, dilations, begins, outs, threads: int,
                 workspace: HostWorkspace, cache: dict | None, epilogue: ConvEpilogue | None) -> np.ndarray:
    """Stride-1 2-D convolution as kn2row: one product of every tap's weights stacked, (K*M, C), with the
    zero-padded input planes taken flat (``FlatWindows``), then the output as the sum of K shifted slices of
    it, one per tap: tap (i, j) of output position p reads the product at p + i*wq + j (dilated). No gather
    of the input: the products read it in place, and the shifted sums run over M rows where im2col gathers
    K*C. In column blocks whose products (about ``KN2ROW_BLOCK_BYTES``) stay in cache for the sums; each
    block's product covers the furthest tap beyond it. Blocks split over ``threads``. ``epilogue`` carries
    no bias: it is added with the crop."""
    n, c, h, wd = x.shape
    m = w.shape[0]
    kh, kw = w.shape[2:]
    k = kh * kw
    geo = FlatWindows((h, wd), (kh, kw), (1, 1), dilations, begins, outs, workspace)
    stacked = derived_weights(cache, "kn2row_weights", (w,),  # (K*M, C), tap-major
                              lambda: np.ascontiguousarray(w.transpose(2, 3, 0, 1).reshape(k * m, c)))
    offsets = [offset for _, offset in geo.taps]
    reach = max(offsets)
    block = max(KN2ROW_MIN_BLOCK_COLUMNS, KN2ROW_BLOCK_BYTES // (k * m * x.itemsize))
    blocks = -(-geo.length // block)
    y = np.empty((n, m, *outs), dtype=x.dtype)
    y3 = y.reshape(n, m, -1)
    bias = None if b is None else b.reshape(m, 1, 1)
    parts = threads if 2 * k * m * c * geo.length >= MIN_SPLIT_FLOPS else 1
    for image in range(n):
        flat = geo.padded(x[image], 0, "kn2row").reshape(c, -1)  # (C, hq*wq)
        acc = workspace.scratch("kn2row_acc", (m, outs[0] * geo.wq), x.dtype)

        def columns(lo: int, hi: int, flat=flat, acc=acc) -> None:
            for first in range(lo * block, min(hi * block, geo.length), block):
                width = min(block, geo.length - first)
                products = workspace.scratch("kn2row_products", (k * m, width + reach), x.dtype)
                np.matmul(stacked, flat[:, first:first + width + reach], out=products)
                taps = products.reshape(k, m, width + reach)
                out = acc[:, first:first + width]
                np.add(taps[0, :, offsets[0]:offsets[0] + width], taps[1, :, offsets[1]:offsets[1] + width], out=out)
                for t in range(2, k):
                    out += taps[t, :, offsets[t]:offsets[t] + width]

        run_split(blocks, parts, columns, workspace=workspace)
        if bias is None:
            y[image] = geo.crop(acc)
        else:
            np.add(geo.crop(acc), bias, out=y[image])
        if epilogue is not None:
            epilogue.apply(y3[image:image + 1], (slice(image, image + 1), slice(None), slice(None)))
    return y


# Bytes of gathered im2col columns per product: each chunk of output rows is gathered, then multiplied
# while its columns are still in cache (alternating 1, 2 and 4 MiB chunks with whole-image columns: best
# at 2-4 MiB, VGG-19's 64->64 3x3 at 224x224 42.8 -> 37.3 ms on one thread).
IM2COL_CHUNK_BYTES = 2 << 20
# ... but at least this many columns per product: deep columns (C*K > 512) in 2 MiB make products too
# narrow for BLAS's threads (ZFNet-512's 512->512 3x3 at 12x12 got 2 MiB / 18 KiB = 113 columns).
# Interleaved, one kernel thread and BLAS on 2 (spin-wait mode): that layer 5.6 -> 4.8 ms, ZFNet's
# 96->256 5x5/2 5.6 -> 5.1 ms, VGG-19's 512->512 3x3 at 14x14 6.8 -> 6.1 ms, all such layers of the
# reference models 83.8 -> 78.9 ms; on the blocking pool (banded, BLAS on 1) 108.6 -> 108.0 ms.
IM2COL_MIN_CHUNK_COLUMNS = 1024


def im2col_gemm_by_rows(windows: np.ndarray, w_mat: np.ndarray, extra: int, outs, threads: int,
                         workspace: HostWorkspace, epilogue: ConvEpilogue | None) -> np.ndarray:
    """One image's im2col product in chunks of output rows: each chunk's columns are gathered into a
    scratch of about ``IM2COL_CHUNK_BYTES`` (at least ``IM2COL_MIN_CHUNK_COLUMNS`` wide) and multiplied
    while they are in cache, instead of gathering every column first (VGG-19's first layers: 115 MB of
    them). With ``threads`` > 1 the rows split into one band per thread, so each thread gathers its own
    columns too. ``windows``:
    (C, *K, *out); ``w_mat``: (M, C*K [+1]), the bias as its last column when ``extra``. Returns (M, P).

    Measured alternating with the whole-image gather then a split product, two threads: VGG-19's 64->64
    3x3 at 224x224 31.6 -> 21.5 ms, PP-OCR det's 24->24 3x3 at 160x160 3.92 -> 1.89 ms, ResNet-50's
    7x7/2 stem 2.64 -> 2.11 ms (banded, before chunking), 128->128 at 28x28 1.39 -> 1.23 ms."""
    m, width = w_mat.shape
    inner = math.prod(outs[1:])  # output positions per output row
    out = np.empty((m, math.prod(outs)), dtype=w_mat.dtype)  # (M, P)
    chunk_rows = max(1, IM2COL_CHUNK_BYTES // (width * inner * w_mat.dtype.itemsize),
                     -(-IM2COL_MIN_CHUNK_COLUMNS // inner))
    rest = (slice(None),) * (len(outs) - 1)
    hook = epilogue.matmul_hook(False) if epilogue is not None else None

    def band(lo: int, hi: int) -> None:
        for first in range(lo, hi, chunk_rows):
            last = min(hi, first + chunk_rows)
            # (C*K [+1], rows*inner)
            cols = workspace.scratch("im2col_chunk", (width, (last - first) * inner), w_mat.dtype)
            gathered = windows[(Ellipsis, slice(first, last), *rest)]
            np.copyto(cols[:width - extra].reshape(gathered.shape), gathered)
            if extra:
                cols[width - 1] = 1
            span = slice(first * inner, last * inner)
            part = out[:, span]
            np.matmul(w_mat, cols, out=part)
            if hook is not None:
                hook(part, slice(None), span)

    run_split(outs[0], threads, band, workspace=workspace)
    return out


def im2col_gemm(x, w, b, *, group, strides, dilations, begins, ends, outs, threads=1,
                 workspace: HostWorkspace = TRANSIENT, epilogue: ConvEpilogue | None = None,
                 cache: dict | None = None) -> np.ndarray:
    """General conv: im2col of the padded input, then one sgemm per group (and image).

    The columns are laid out (C_g*K, P) so ``W (M_g, C_g*K) @ cols`` is already NCHW; with one
    group the bias rides along as an extra ones-row of the columns (no separate pass), and the weights
    with the bias column are kept in ``cache`` between runs."""
    n, c = x.shape[:2]
    m, c_g = w.shape[:2]
    kernel = w.shape[2:]
    k_size = math.prod(kernel)
    out_size = math.prod(outs)
    xp = pad_spatial(x, begins, ends)
    windows = window_view(xp, kernel, strides, dilations, outs)  # (N, C, *K, *out)
    if group == 1:
        rows = c * k_size
        w_mat = w.reshape(m, rows)
        extra = 0 if b is None else 1
        if b is not None:
            # The weights with the bias as a last column: a copy of all the weights, so it is made once
            # per layer where they are constants (ResNet-50's 512->512 3x3: 9.4 MB each run).
            w_mat = derived_weights(cache, "im2col_weights", (w, b),
                                    lambda: np.concatenate([w.reshape(m, rows), b.reshape(m, 1)], axis=1))
        if n == 1:
            split = (threads > 1 and outs[0] >= 2 * threads
                     and 2 * m * (rows + extra) * out_size >= MIN_SPLIT_FLOPS)
            # Split by bands of output rows (columns of the product) where N >= M; otherwise each band
            # would pack all of the larger weights again, and the whole-image product splits by rows.
            if not split or out_size >= m:
                y = im2col_gemm_by_rows(windows[0], w_mat, extra, outs, threads if split else 1, workspace,
                                         epilogue)
                return y.reshape(1, m, out_size)
        cols = workspace.scratch("im2col", (n, rows + extra, out_size), x.dtype)  # (N, C*K [+1], P)
        np.copyto(cols[:, :rows].reshape(windows.shape), windows)
        if b is not None:
            cols[:, rows] = 1
        if n == 1:
            hook = epilogue.matmul_hook(False) if epilogue is not None else None
            return par_matmul(w_mat, cols[0], threads, hook, workspace=workspace).reshape(1, m, out_size)
        return par_matmul(w_mat, cols, threads, epilogue.matmul_hook(True) if epilogue is not None else None,
                          workspace=workspace)
    cols = windows.reshape(n, group, c_g * k_size, out_size)
    y = par_matmul(w.reshape(group, m // group, c_g * k_size), cols, threads, workspace=workspace)
    y = y.reshape(n, m, out_size)
    if b is not None:
        y += b.reshape(1, m, 1)
    return y
