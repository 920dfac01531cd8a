"""Depthwise convolutions on the CPU (one filter per channel, Conv with group == C == M): three 2-D forms, each
where it was measured to win (tap by tap on flat phase planes for large planes, one small product per channel
over gathered columns for small ones, channels-last for many channels over small planes), and a tap-by-tap
form of any rank. ops/conv.py's ``conv_nd`` picks among them."""

from __future__ import annotations

import itertools

import numpy as np
from numpy.lib.stride_tricks import as_strided

from wgsentis.ops.conv_windows import ConvEpilogue, FlatWindows, pad_spatial, tap_slices, window_view
from wgsentis.ops.parallel import HostWorkspace, run_split

_PARALLEL_MIN_ELEMENTS = 1 << 16  # below this, thread hand-off costs more than it saves
# Gathered elements (N * C * K * P) below which one thread runs the depthwise columns form: alternating
# runs, 2^16 against 2^20: PP-LCNet 9.5 -> 8.3 ms, shufflenet 19.7 -> 19.1, PP-OCR det 138 -> 135.
DEPTHWISE_COLS_MIN_SPLIT = 1 << 20
# Accumulator bytes per block of channels in the tap-by-tap depthwise form, which serves the large planes:
# each tap passes twice over the block. A sweep of fixed block sizes found the best at 0.4-1.6 MB of
# accumulator on every such layer; this budget, interleaved against whole channel ranges on one thread:
# PP-OCR det's 16ch@320x320 4.9 -> 3.6 ms, 32ch@320x320/2 7.2 -> 4.6 ms, 48ch@160x160 3.5 -> 3.1 ms,
# its other tap-by-tap layers within 5%.
DEPTHWISE_BLOCK_BYTES = 1 << 20
# Elements of one channels-last pass per thread below which the channels-last depthwise form stays on one thread.
CHANNELS_LAST_MIN_PASS = 1 << 16


def conv_depthwise_2d(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, strides, dilations, begins,
                       outs, threads: int, workspace: HostWorkspace,
                       epilogue: ConvEpilogue | None = None) -> np.ndarray:
    """Depthwise 2-D conv (one filter per channel) as k*k multiply-adds on flat phase planes
    (``FlatWindows``). Channel ranges run in parallel threads (padding, taps and the crop included)."""
    n, c, h, wd = x.shape
    kh, kw = w.shape[2:]
    geo = FlatWindows((h, wd), (kh, kw), strides, dilations, begins, outs, workspace)
    planes = x.reshape(n * c, h, wd)
    w_cols = np.tile(w.reshape(c, kh * kw), (n, 1))  # (N*C, K)
    bias = None if b is None else np.tile(b.reshape(c, 1), (n, 1))
    y = np.empty((n * c, *outs), dtype=x.dtype)

    def work(lo: int, hi: int) -> None:
        for first in range(lo, hi, block):
            channels(first, min(hi, first + block))

    def channels(lo: int, hi: int) -> None:
        rows = hi - lo
        phases = geo.phases(planes[lo:hi], 0, "dw")
        acc, acc_view = geo.accumulator(rows, x.dtype, "dw")
        tmp = workspace.scratch("dw_tmp", (rows, geo.length), x.dtype)
        weights = w_cols[lo:hi]
        for k, (phase, offset) in enumerate(geo.taps):
            src = phases[phase, :, offset:offset + geo.length]
            if k == 0:
                np.multiply(src, weights[:, 0:1], out=acc_view)
            else:
                np.multiply(src, weights[:, k:k + 1], out=tmp)
                acc_view += tmp
        if bias is not None:
            acc_view += bias[lo:hi]
        y[lo:hi] = geo.crop(acc)
        if epilogue is not None:  # one image: rows are channels
            epilogue.apply(y3[:, lo:hi], (slice(None), slice(lo, hi), slice(None)))

    y3 = y.reshape(1, n * c, -1)
    # Channels in blocks whose accumulator stays near DEPTHWISE_BLOCK_BYTES, so the 2k passes over it
    # (k taps) hit the cache rather than memory.
    block = max(1, DEPTHWISE_BLOCK_BYTES // (geo.length * x.dtype.itemsize))
    big = n * c * outs[0] * outs[1] >= _PARALLEL_MIN_ELEMENTS
    run_split(n * c, threads if big else 1, work, workspace=workspace)
    return y.reshape(n, c, *outs)


def conv_depthwise_2d_cols(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, strides, dilations, begins, ends,
                            outs, threads: int, workspace: HostWorkspace,
                            epilogue: ConvEpilogue | None = None) -> np.ndarray:
    """Depthwise 2-D conv as one small product per channel: the channel's kh*kw shifted planes gathered
    into (K, P) columns, then (1, K) @ (K, P) for every (image, channel) in one stacked matmul. Two
    numpy passes per tap (``conv_depthwise_2d``) cost more than one gather of all taps and a product
    (PP-LCNet's 5x5 layers: 0.84 -> 0.51 ms at 256ch@14, 136ch@28 3x3: 0.58 -> 0.33 ms). Channel ranges
    run in parallel threads. (Gathering from flat phase planes instead, tap by tap, measured 1.5-1.9x
    slower: 25 short copies per channel range cost more than one strided copy.)"""
    n, c = x.shape[:2]
    kh, kw = w.shape[2:]
    oh, ow = outs
    k, p = kh * kw, oh * ow
    xp = pad_spatial(x, begins, ends)
    # (N*C, kh, kw, oh, ow): merging N and C of the padded (contiguous) input keeps it a view.
    windows = window_view(xp, (kh, kw), strides, dilations, outs).reshape(n * c, kh, kw, oh, ow)
    w_rows = np.tile(w.reshape(c, 1, k), (n, 1, 1))  # (N*C, 1, K)
    y = np.empty((n * c, 1, p), dtype=x.dtype)
    y3 = y.reshape(1, n * c, p)  # one image (the only case with an epilogue): rows are channels

    def work(lo: int, hi: int) -> None:
        cols = workspace.scratch("dwc_cols", (hi - lo, k, p), x.dtype)
        np.copyto(cols.reshape(hi - lo, kh, kw, oh, ow), windows[lo:hi])
        np.matmul(w_rows[lo:hi], cols, out=y[lo:hi])
        if epilogue is not None:  # the epilogue carries the bias
            epilogue.apply(y3[:, lo:hi], (slice(None), slice(lo, hi), slice(None)))

    big = n * c * k * p >= DEPTHWISE_COLS_MIN_SPLIT
    run_split(n * c, threads if big else 1, work, workspace=workspace)
    y = y.reshape(n, c, oh, ow)
    if b is not None and epilogue is None:
        y += b.reshape(1, c, 1, 1)
    return y


def conv_depthwise_2d_channels_last(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, strides, dilations,
                                     begins, outs, threads: int, workspace: HostWorkspace,
                                     epilogue: ConvEpilogue | None = None) -> np.ndarray:
    """Depthwise 2-D conv on channels-last flat phase planes: each image's padded planes are laid out as
    (hq*wq, C), so one tap is a single (L, C) * (C,) multiply-add over every channel and position, and
    at stride 1 all taps are one einsum over a strided view. Where planes are small and channels many,
    the channels-first forms run numpy's loops over hundreds of short rows, or a product per channel;
    here every pass is one long contiguous run (PP-LCNet's 512ch@7 5x5: 0.53 -> 0.22 ms, ShuffleNet's
    272ch@14 3x3: 0.23 -> 0.15 ms, one thread, before the einsum). Channel ranges run in parallel
    threads; ``epilogue`` (no bias: it is added here) runs on each range."""
    n, c, h, wd = x.shape
    kh, kw = w.shape[2:]
    oh, ow = outs
    sh, sw = strides
    geo = FlatWindows((h, wd), (kh, kw), strides, dilations, begins, outs, workspace)
    w_taps = np.ascontiguousarray(w.reshape(c, kh * kw).T)  # (K, C)
    dh, dw = dilations
    y = np.empty((n, c, oh, ow), dtype=x.dtype)
    y3 = y.reshape(n, c, oh * ow)

    def work(lo: int, hi: int) -> None:
        cs = hi - lo
        weights = w_taps[:, lo:hi]
        for image in range(n):
            phases = geo.phases_channels_last(x[image, lo:hi], "dwl")
            acc = workspace.scratch("dwl_acc", (oh * geo.wq, cs), x.dtype)
            acc_view = acc[:geo.length]
            if sh == 1 and sw == 1:
                # Every tap reads the one plane at offset (i*dh)*wq + j*dw: all taps are one (kh, kw, L, C)
                # strided view, summed against their (kh, kw, C) weights by one einsum whose inner loop
                # runs along the channels (alternating, one thread: 256ch@14 5x5 0.67 -> 0.51 ms,
                # 384ch@20 5x5 1.28 -> 0.91 ms, 272ch@14 3x3 0.26 -> 0.24 ms). Strided, the taps split
                # over the phase planes into small grids, where einsums lose to the loop below (0.8x).
                step = phases.strides[2]
                view = as_strided(phases[0], (kh, kw, geo.length, cs),
                                  (dh * geo.wq * cs * step, dw * cs * step, cs * step, step), writeable=False)
                np.einsum("ablc,abc->lc", view, weights.reshape(kh, kw, cs), out=acc_view)
            else:
                tmp = workspace.scratch("dwl_tmp", (geo.length, cs), x.dtype)
                for k, (phase, offset) in enumerate(geo.taps):
                    src = phases[phase, offset:offset + geo.length]
                    if k == 0:
                        np.multiply(src, weights[0], out=acc_view)
                    else:
                        np.multiply(src, weights[k], out=tmp)
                        acc_view += tmp
            if b is not None:
                acc_view += b[lo:hi]
            y[image, lo:hi] = acc.reshape(oh, geo.wq, cs)[:, :ow].transpose(2, 0, 1)
        if epilogue is not None:
            epilogue.apply(y3[:, lo:hi], (slice(None), slice(lo, hi), slice(None)))

    # Split only where each thread's passes stay long: a pass is one numpy call, and two threads making
    # many short calls wait on each other for the GIL (256ch@14 5x5: 0.53 ms on one thread, 0.82 on two).
    parts = max(1, min(threads, geo.length * c // CHANNELS_LAST_MIN_PASS))
    run_split(c, parts, work, workspace=workspace)
    return y


def depthwise_channels_last_applies(c: int, kernel, outs) -> bool:
    """Whether a 2-D depthwise conv runs channels-last: many channels over small planes, where it beat
    both channels-first forms on every such layer of the reference models (one and two threads), and
    5x5 kernels on mid-size planes (PP-OCR det's 192ch@40: 2.4 -> 1.9 ms on two threads). Wide
    planes of few rows (PP-OCR cls's 2x96) and planes from 28x28 up with 3x3 kernels lose."""
    out_size = outs[0] * outs[1]
    if c >= 64 and out_size <= 400 and min(outs) >= 4:
        return True
    return kernel[0] * kernel[1] >= 25 and c >= 128 and out_size <= 1600 and min(outs) >= 4


def conv_depthwise_nd(xp: np.ndarray, w: np.ndarray, strides, dilations, out_spatial) -> np.ndarray:
    """Depthwise conv of any rank: sum over kernel taps of strided slice * per-channel weight."""
    n, c = xp.shape[:2]
    kernel = w.shape[2:]
    nd = len(kernel)
    y = np.empty((n, c, *out_spatial), dtype=xp.dtype)
    tmp = np.empty_like(y)
    w_cols = w.reshape(c, -1)  # (C, K)
    bshape = (1, c) + (1,) * nd
    for k_index, tap in enumerate(itertools.product(*(range(k) for k in kernel))):
        src = xp[tap_slices(tap, strides, dilations, out_spatial)]
        w_tap = w_cols[:, k_index].reshape(bshape)
        if k_index == 0:
            np.multiply(src, w_tap, out=y)
        else:
            np.multiply(src, w_tap, out=tmp)
            y += tmp
    return y
