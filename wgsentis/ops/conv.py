"""Convolution operators: Conv, ConvTranspose, ConvInteger, QLinearConv, DeformConv.

Every convolution is lowered onto BLAS: the input windows are gathered (im2col) with
``as_strided`` views on the padded input, laid out as ``(N, group, C_g * K, P)`` so that one
batched ``np.matmul`` with the ``(group, M_g, C_g * K)`` weights yields the output directly in
NCHW order. Two shapes get their own path because they dominate CNN latency: a 1x1 convolution
is a plain matmul on the reshaped input (no im2col at all), and a depthwise convolution is a
sum over kernel taps of shifted-slice multiply-adds (k*k vectorised ops, no matmul). Stride-1 3x3
layers run as Winograd F(4x4, 3x3) on wide planes, and as kn2row (one product of the stacked tap
weights, then shifted sums of its rows) where output channels are few or planes small.
Transposed convolution is the adjoint: one matmul produces the columns, which are scatter-added
(col2im) tap by tap into the output, or written where taps never overlap.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np
from numpy.lib.stride_tricks import as_strided

from wgsentis.ops.kernel_options import kernel_options
from wgsentis.ops.parallel import (
    MIN_SPLIT_FLOPS,
    TRANSIENT,
    HostWorkspace,
    blas_threads,
    kernel_threads,
    kernel_workspace,
    par_matmul,
    run_split,
)
from wgsentis.ops.registry import register, register_flops

_FLOAT_KINDS = (np.dtype(np.float32), np.dtype(np.float64))


# --------------------------------------------------------------------------------------------
# Shared geometry helpers (also used by pool.py)
# --------------------------------------------------------------------------------------------

def spatial_attrs(nd: int, kernel_shape, strides, dilations, pads) -> tuple[list[int], list[int], list[int]]:
    """Strides, dilations and pads with their ONNX defaults for ``nd`` spatial dims."""
    del kernel_shape
    strides = [int(s) for s in strides] if strides else [1] * nd
    dilations = [int(d) for d in dilations] if dilations else [1] * nd
    pads = [int(p) for p in pads] if pads else [0] * (2 * nd)
    if len(strides) != nd or len(dilations) != nd or len(pads) != 2 * nd:
        raise ValueError(f"strides/dilations/pads do not match {nd} spatial dims "
                         f"(strides={strides}, dilations={dilations}, pads={pads})")
    return strides, dilations, pads


def conv_geometry(in_spatial, kernel, strides, dilations, pads, auto_pad: str
                  ) -> tuple[list[int], list[int], list[int]]:
    """(pads_begin, pads_end, out_spatial) of a convolution, resolving ``auto_pad``."""
    begins, ends, outs = [], [], []
    nd = len(in_spatial)
    for i in range(nd):
        size, span, s = in_spatial[i], (kernel[i] - 1) * dilations[i] + 1, strides[i]
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out = -(-size // s)
            total = max(0, (out - 1) * s + span - size)
            small = total // 2
            b, e = (small, total - small) if auto_pad == "SAME_UPPER" else (total - small, small)
        elif auto_pad == "VALID":
            b = e = 0
            out = (size - span) // s + 1
        elif auto_pad in ("NOTSET", ""):
            b, e = pads[i], pads[nd + i]
            out = (size + b + e - span) // s + 1
        else:
            raise ValueError(f"unknown auto_pad {auto_pad!r}")
        if out <= 0:
            raise ValueError(f"convolution output would be empty: input {list(in_spatial)}, kernel "
                             f"{list(kernel)}, strides {strides}, dilations {dilations}, pads {b},{e}")
        begins.append(b)
        ends.append(e)
        outs.append(out)
    return begins, ends, outs


def pad_spatial(x: np.ndarray, begins, ends, value=0) -> np.ndarray:
    """Pad the spatial dims (2..) of ``x`` (negative pads crop); returns ``x`` itself when nothing changes."""
    if not any(begins) and not any(ends):
        return x
    if any(b < 0 for b in begins) or any(e < 0 for e in ends):
        crop = tuple(slice(max(0, -b), n - max(0, -e)) for b, e, n in zip(begins, ends, x.shape[2:], strict=True))
        x = x[(slice(None), slice(None), *crop)]
        begins = [max(0, b) for b in begins]
        ends = [max(0, e) for e in ends]
        if not any(begins) and not any(ends):
            return x
    sizes = tuple(n + b + e for n, b, e in zip(x.shape[2:], begins, ends, strict=True))
    out = np.full(x.shape[:2] + sizes, value, dtype=x.dtype)
    out[(slice(None), slice(None), *(slice(b, b + n) for b, n in zip(begins, x.shape[2:], strict=True)))] = x
    return out


def window_view(xp: np.ndarray, kernel, strides, dilations, out_spatial) -> np.ndarray:
    """Read-only view ``(N, C, *kernel, *out)`` of the windows of the padded input ``xp``."""
    s_n, s_c, *s_sp = xp.strides
    shape = tuple(xp.shape[:2]) + tuple(kernel) + tuple(out_spatial)
    tap_steps = tuple(s * d for s, d in zip(s_sp, dilations, strict=True))
    out_steps = tuple(s * st for s, st in zip(s_sp, strides, strict=True))
    view_strides = (s_n, s_c, *tap_steps, *out_steps)
    return as_strided(xp, shape, view_strides, writeable=False)


def tap_slices(tap, strides, dilations, out_spatial) -> tuple[slice, ...]:
    """Slices of the padded input that kernel position ``tap`` reads for every output position."""
    spans = zip(tap, dilations, strides, out_spatial, strict=True)
    return (slice(None), slice(None), *(slice(t * d, t * d + (o - 1) * s + 1, s) for t, d, s, o in spans))


def compute_dtype(x: np.ndarray) -> np.dtype:
    """float32/float64 compute as themselves; narrower floats (float16, bfloat16) go through float32."""
    return x.dtype if x.dtype in _FLOAT_KINDS else np.dtype(np.float32)


# --------------------------------------------------------------------------------------------
# Conv
# --------------------------------------------------------------------------------------------

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


def derived_weights(cache: dict | None, key: str, sources: tuple[np.ndarray, ...],
                    derive: Callable[[], np.ndarray]) -> np.ndarray:
    """``derive()``: weights derived from ``sources`` (a layer's W, B), kept in the layer's ``cache`` under
    ``key`` while the sources are the same arrays; derived afresh on every call without a cache (W or B
    may change between runs)."""
    entry = cache.get(key) if cache is not None else None
    if entry is None or any(kept is not source for kept, source in zip(entry[0], sources, strict=True)):
        entry = (sources, derive())
        if cache is not None:
            cache[key] = entry
    return entry[1]


def fill_padded(padded: np.ndarray, src: np.ndarray, begins, value=0) -> None:
    """Write ``src`` (rows, h, w) into ``padded`` at offset ``begins`` and ``value`` into the border only
    (the interior is overwritten by the copy, so it is never filled first)."""
    top, left = begins
    h, w = src.shape[1:]
    padded[:, :top] = value
    padded[:, top + h:] = value
    padded[:, top:top + h, :left] = value
    padded[:, top:top + h, left + w:] = value
    padded[:, top:top + h, left:left + w] = src


class ConvEpilogue:
    """What a convolution applies to its output after the products: the bias (where the path has not
    folded it into the products), a residual of the output's shape (FusedConv), the fused activation.
    Paths apply it part by part, on the thread that computed the part while it is in cache, instead of
    one pass per step over the whole output; ``apply(part, index)`` takes ``part = y3[index]`` with
    ``y3`` the output viewed as (N, M, P) and ``index`` three slices."""

    __slots__ = ("activation", "bias", "residual")

    def __init__(self, bias: np.ndarray | None, residual: np.ndarray | None, activation) -> None:
        self.bias = bias  # (1, M, 1)
        self.residual = residual  # (N, M, P)
        self.activation = activation  # in-place function, or None

    def without_bias(self) -> ConvEpilogue:
        return ConvEpilogue(None, self.residual, self.activation)

    def apply(self, part: np.ndarray, index: tuple[slice, slice, slice]) -> None:
        if self.bias is not None:
            part += self.bias[:, index[1]]
        if self.residual is not None:
            part += self.residual[index]
        if self.activation is not None:
            self.activation(part)

    def matmul_hook(self, batched: bool):
        """``apply`` as a ``par_matmul`` epilogue for a product whose output is (M, P) (one image) or
        (N, M, P) (``batched``)."""
        if batched:
            return lambda part, rows, cols: self.apply(part, (slice(None), rows, cols))
        return lambda part, rows, cols: self.apply(part[None], (slice(0, 1), rows, cols))


class FlatWindows:
    """A 2-D windowed op (depthwise conv, pools) laid out on flattened stride-phase planes.

    Each padded input plane is split into its stride phases (space-to-depth) so that every kernel
    tap reads one *contiguous* run of a flattened phase plane: numpy then runs long unit-stride
    inner loops instead of short strided ones. An output row is ``wq`` wide in that layout; the
    ``wq - ow`` wrap-around columns per row are computed and dropped by ``crop``. Its planes and accumulators
    are scratch of ``workspace`` (the running program's)."""

    __slots__ = ("begins", "copy_h", "copy_w", "hq", "length", "outs", "strides", "taps", "workspace", "wq")

    def __init__(self, in_hw, kernel, strides, dilations, begins, outs,
                 workspace: HostWorkspace = TRANSIENT) -> None:
        h, wd = in_hw
        kh, kw = kernel
        sh, sw = strides
        dh, dw = dilations
        oh, ow = outs
        self.strides, self.begins, self.outs = (sh, sw), tuple(begins), (oh, ow)
        self.workspace = workspace
        self.hq = oh + (kh - 1) * dh // sh  # phase-plane rows/cols needed by the furthest tap
        self.wq = ow + (kw - 1) * dw // sw
        self.length = (oh - 1) * self.wq + ow  # flat span covering every valid output position
        self.copy_h = min(h, self.hq * sh - begins[0])
        self.copy_w = min(wd, self.wq * sw - begins[1])
        # (phase, offset) of every tap in row-major kernel order
        self.taps = [(((i * dh) % sh) * sw + (j * dw) % sw, ((i * dh) // sh) * self.wq + (j * dw) // sw)
                     for i in range(kh) for j in range(kw)]

    def padded(self, planes: np.ndarray, pad_value, key: str) -> np.ndarray:
        """``planes`` (rows, h, w) padded with ``pad_value`` to (rows, hq*sh, wq*sw), which every window
        fits; per-thread scratch named after ``key``."""
        sh, sw = self.strides
        rows = planes.shape[0]
        padded = self.workspace.scratch(key + "_padded", (rows, self.hq * sh, self.wq * sw), planes.dtype)
        fill_padded(padded, planes[:, :self.copy_h, :self.copy_w], self.begins, pad_value)
        return padded

    def phases(self, planes: np.ndarray, pad_value, key: str) -> np.ndarray:
        """``(sh*sw, rows, hq*wq)`` phase planes of ``planes`` (rows, h, w), padded with ``pad_value``;
        per-thread scratch named after ``key``."""
        sh, sw = self.strides
        rows = planes.shape[0]
        padded = self.padded(planes, pad_value, key)
        if sh == 1 and sw == 1:
            return padded.reshape(1, rows, self.hq * self.wq)
        # (rows, hq, sh, wq, sw) -> (sh*sw, rows, hq*wq): phase (a, b) holds padded[a::sh, b::sw]
        phases = self.workspace.scratch(key + "_phases", (sh, sw, rows, self.hq, self.wq), planes.dtype)
        np.copyto(phases, padded.reshape(rows, self.hq, sh, self.wq, sw).transpose(2, 4, 0, 1, 3))
        return phases.reshape(sh * sw, rows, self.hq * self.wq)

    def phases_channels_last(self, planes: np.ndarray, key: str) -> np.ndarray:
        """``(sh*sw, hq*wq, rows)`` zero-padded phase planes of ``planes`` (rows, h, w), channels last (the
        rows are the inner axis); per-thread scratch named after ``key``."""
        sh, sw = self.strides
        rows = planes.shape[0]
        padded = self.workspace.scratch(key + "_padded", (self.hq * sh, self.wq * sw, rows), planes.dtype)
        # (rows, H, W) view of the channels-last buffer: the border fill and the copy write through it
        fill_padded(padded.transpose(2, 0, 1), planes[:, :self.copy_h, :self.copy_w], self.begins)
        if sh == 1 and sw == 1:
            return padded.reshape(1, self.hq * self.wq, rows)
        # (hq, sh, wq, sw, rows) -> (sh*sw, hq*wq, rows): phase (a, b) holds padded[a::sh, b::sw]
        phases = self.workspace.scratch(key + "_phases", (sh, sw, self.hq, self.wq, rows), planes.dtype)
        np.copyto(phases, padded.reshape(self.hq, sh, self.wq, sw, rows).transpose(1, 3, 0, 2, 4))
        return phases.reshape(sh * sw, self.hq * self.wq, rows)

    def accumulator(self, rows: int, dtype, key: str) -> tuple[np.ndarray, np.ndarray]:
        """A scratch ``(rows, oh*wq)`` result and its ``(rows, length)`` view that the taps fill."""
        acc = self.workspace.scratch(key + "_acc", (rows, self.outs[0] * self.wq), dtype)
        return acc, acc[:, :self.length]

    def crop(self, acc: np.ndarray) -> np.ndarray:
        """The ``(rows, oh, ow)`` outputs of an accumulator, wrap-around columns dropped (a view)."""
        oh, ow = self.outs
        return acc.reshape(acc.shape[0], oh, self.wq)[:, :, :ow]


def _conv_depthwise_2d(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, strides, dilations, begins,
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


def _conv_depthwise_2d_cols(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, strides, dilations, begins, ends,
                            outs, threads: int, workspace: HostWorkspace,
                            epilogue: ConvEpilogue | None = None) -> np.ndarray:
    """Depthwise 2-D conv as one small product per channel: the channel's kh*kw shifted planes gathered
    into (K, P) columns, then (1, K) @ (K, P) for every (image, channel) in one stacked matmul. Two
    numpy passes per tap (``_conv_depthwise_2d``) cost more than one gather of all taps and a product
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


def _conv_depthwise_2d_channels_last(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, strides, dilations,
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


def _conv_depthwise(xp: np.ndarray, w: np.ndarray, strides, dilations, out_spatial) -> np.ndarray:
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


def _conv_winograd_3x3(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, begins, outs, threads: int,
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
    if x.ndim != 4 or x.dtype not in _FLOAT_KINDS or group != 1 or tuple(strides) != (1, 1):
        return False
    if w.shape[2] * w.shape[3] == 1 or min(*begins, *ends) < 0 or 0 in outs:
        return False
    m, c = w.shape[:2]
    if 2 * m <= c:
        return True
    tiles = -(-outs[0] // 4) * -(-outs[1] // 4)
    return tiles <= 16 and winograd and winograd_applies(x, w, group, strides, dilations, begins, ends, outs)


def _conv_kn2row(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, dilations, begins, outs, threads: int,
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


def _im2col_gemm_by_rows(windows: np.ndarray, w_mat: np.ndarray, extra: int, outs, threads: int,
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


def _im2col_gemm(x, w, b, *, group, strides, dilations, begins, ends, outs, threads=1,
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
                y = _im2col_gemm_by_rows(windows[0], w_mat, extra, outs, threads if split else 1, workspace,
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


def conv_nd(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, *, group: int, strides, dilations,
            pads, auto_pad: str, threads: int = 1, cache: dict | None = None, residual: np.ndarray | None = None,
            activation=None, winograd: bool = True, workspace: HostWorkspace = TRANSIENT) -> np.ndarray:
    """Float N-D convolution in the compute dtype of ``x`` (``x``, ``w``, ``b`` already that dtype):
    ``activation(conv(x) + residual)``. ``cache``: where derived weights (Winograd's, im2col's with the
    bias) are kept between runs of the same layer, None where W or B may change between runs;
    ``residual``: broadcastable to the output; ``activation``: an in-place function
    (``KernelContext.take_activation``); ``winograd``: whether 3x3 layers may take Winograd F(4x4, 3x3)
    (``KernelOptions.cpu_winograd``); ``workspace``: the running program's scratch buffers and thread pools."""
    if x.ndim < 3 or w.ndim != x.ndim:
        raise ValueError(f"Conv expects X and W of equal rank >= 3, got X{list(x.shape)} W{list(w.shape)}")
    n, c = x.shape[:2]
    m, c_g = w.shape[:2]
    kernel = w.shape[2:]
    nd = len(kernel)
    if c != c_g * group or m % group:
        raise ValueError(f"Conv channels do not match: X has {c} channels, W {list(w.shape)}, group {group}")
    begins, ends, outs = conv_geometry(x.shape[2:], kernel, strides, dilations, pads, auto_pad)
    m_g = m // group
    out_size = math.prod(outs)
    k_size = math.prod(kernel)
    out_shape = (n, m, *outs)
    # The residual and activation ride in the paths' epilogues when the residual has the output's shape;
    # a broadcast residual is added after the whole output, then the activation.
    full_residual = residual is not None and residual.shape == out_shape and residual.dtype == x.dtype
    late = residual is not None and not full_residual
    epilogue = ConvEpilogue(None if b is None else b.reshape(1, m, 1),
                            residual.reshape(n, m, out_size) if full_residual else None, None if late else activation)
    if epilogue.bias is None and epilogue.residual is None and epilogue.activation is None:
        epilogue = None
    bare = epilogue.without_bias() if epilogue is not None else None
    if bare is not None and bare.residual is None and bare.activation is None:
        bare = None
    bias_done = applied = False

    if k_size == 1 and not any(begins) and not any(ends):
        # 1x1: no im2col; (G, M_g, C_g) @ (N, G, C_g, P) gives NCHW directly.
        xs = x
        if any(s != 1 for s in strides):
            xs = x[(slice(None), slice(None),
                    *(slice(0, (o - 1) * s + 1, s) for o, s in zip(outs, strides, strict=True)))]
        if group == 1:
            hook = epilogue.matmul_hook(n > 1) if epilogue is not None else None
            operand = xs.reshape(c, out_size) if n == 1 else xs.reshape(n, c, out_size)
            y = par_matmul(w.reshape(m, c), operand, threads, hook, workspace=workspace)
            bias_done = applied = True
        else:
            y = par_matmul(w.reshape(group, m_g, c_g), xs.reshape(n, group, c_g, out_size), threads,
                           workspace=workspace)
    elif group == c and c_g == 1 and m == c and nd == 2:
        # Many channels over small planes: channels-last. Otherwise small planes: one gather of every tap
        # and a product per channel; large ones (where the gathered columns leave the cache) run tap by
        # tap. Measured on 2 cores: the columns win by 1.2-1.7x up to 56x56 outputs at stride 1 and 28x28
        # strided, and lose ~0.7x at 112x112.
        bias_done, applied = True, n == 1
        if depthwise_channels_last_applies(c, kernel, outs):
            y = _conv_depthwise_2d_channels_last(x, w, b, strides, dilations, begins, outs, threads, workspace,
                                                 bare)
            applied = True
        elif out_size <= 1024 or (out_size <= 4096 and tuple(strides) == (1, 1)):
            y = _conv_depthwise_2d_cols(x, w, b, strides, dilations, begins, ends, outs, threads, workspace,
                                        epilogue if n == 1 else None)
        else:
            y = _conv_depthwise_2d(x, w, b, strides, dilations, begins, outs, threads, workspace,
                                   bare if n == 1 else None)
    elif kn2row_applies(x, w, group, strides, dilations, begins, ends, outs, winograd):
        y = _conv_kn2row(x, w, b, dilations, begins, outs, threads, workspace, cache, bare)
        bias_done = applied = True
    elif winograd and winograd_applies(x, w, group, strides, dilations, begins, ends, outs):
        y = _conv_winograd_3x3(x, w, b, begins, outs, threads, workspace, cache, bare)
        bias_done = applied = True
    elif group == c and c_g == 1 and m == c:
        y = _conv_depthwise(pad_spatial(x, begins, ends), w, strides, dilations, outs)
    else:
        y = _im2col_gemm(x, w, b, group=group, strides=strides, dilations=dilations, begins=begins, ends=ends,
                         outs=outs, threads=threads, workspace=workspace, epilogue=bare, cache=cache)
        bias_done, applied = True, group == 1
    y = y.reshape(out_shape)
    if b is not None and not bias_done:
        y += b.reshape((1, m) + (1,) * nd)
    if late:
        y = y + residual
        if activation is not None:
            activation(y)
    elif not applied and bare is not None:
        bare.apply(y.reshape(n, m, out_size), (slice(None),) * 3)
    return y


@register("Conv", 1)
def conv(ctx, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
         strides=None):
    """Conv: N-D convolution with auto_pad, pads, strides, dilations and groups."""
    return _conv(ctx, X, W, B, None, auto_pad=auto_pad, dilations=dilations, group=group,
                 kernel_shape=kernel_shape, pads=pads, strides=strides)


def _conv(ctx, X, W, B, Z, *, auto_pad, dilations, group, kernel_shape, pads, strides) -> np.ndarray:
    """Conv(X, W, B) [+ Z], with the layer's fused activation applied in the paths' epilogues where the
    input computes in its own dtype (float32/float64; narrower floats apply it after the cast back)."""
    strides, dilations, pads = spatial_attrs(X.ndim - 2, kernel_shape, strides, dilations, pads)
    if kernel_shape is not None and list(kernel_shape) != list(W.shape[2:]):
        raise ValueError(f"kernel_shape {list(kernel_shape)} does not match W {list(W.shape)}")
    dtype = compute_dtype(X)
    # Weights derived once and kept (Winograd's, im2col's with the bias) only where W and B are constants.
    constant_cache = getattr(ctx, "constant_cache", None)
    native = dtype == X.dtype and (Z is None or Z.dtype == X.dtype)
    activation = ctx.take_activation() if native and hasattr(ctx, "take_activation") else None
    if Z is not None and not native:
        Z = Z.astype(dtype)
    y = conv_nd(X.astype(dtype, copy=False), W.astype(dtype, copy=False),
                None if B is None else B.astype(dtype, copy=False),
                group=int(group), strides=strides, dilations=dilations, pads=pads, auto_pad=auto_pad,
                threads=kernel_threads(ctx), cache=constant_cache(1, 2) if constant_cache else None, residual=Z,
                activation=activation, winograd=kernel_options(ctx).cpu_winograd, workspace=kernel_workspace(ctx))
    return y.astype(X.dtype, copy=False)


# --------------------------------------------------------------------------------------------
# ConvTranspose
# --------------------------------------------------------------------------------------------

def conv_transpose_geometry(in_spatial, kernel, strides, dilations, pads, auto_pad, output_padding,
                            output_shape) -> tuple[list[int], list[int]]:
    """(pads_begin, out_spatial) of a transposed convolution, following the ONNX spec's rules."""
    nd = len(in_spatial)
    full = [strides[i] * (in_spatial[i] - 1) + output_padding[i] + (kernel[i] - 1) * dilations[i] + 1
            for i in range(nd)]
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if output_shape is None:
            # SAME: in * stride, but never beyond the full scatter extent (as onnxruntime, which
            # clamps the total padding at zero when kernel < stride).
            out = [min(in_spatial[i] * strides[i], full[i]) for i in range(nd)]
        else:
            out = [int(v) for v in output_shape][-nd:]
        begins = []
        for i in range(nd):
            total = full[i] - out[i]
            begins.append(total // 2 if auto_pad == "SAME_UPPER" else total - total // 2)
        return begins, out
    begins = pads[:nd] if auto_pad != "VALID" else [0] * nd
    ends = pads[nd:] if auto_pad != "VALID" else [0] * nd
    return list(begins), [full[i] - begins[i] - ends[i] for i in range(nd)]


def conv_transpose_nd(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, *, group: int, strides, dilations,
                      begins, outs) -> np.ndarray:
    """Transposed convolution: columns = W^T @ X per group, then col2im scatter-add per kernel tap."""
    n, c = x.shape[:2]
    in_spatial = x.shape[2:]
    kernel = w.shape[2:]
    nd = len(kernel)
    if w.shape[0] != c or c % group:
        raise ValueError(f"ConvTranspose channels do not match: X{list(x.shape)} W{list(w.shape)} group {group}")
    c_g, m_g = c // group, w.shape[1]
    m = m_g * group
    k_size = math.prod(kernel)
    in_size = math.prod(in_spatial)
    # (G, M_g*K, C_g) @ (N, G, C_g, P_in) -> (N, G, M_g*K, P_in)
    w_t = w.reshape(group, c_g, m_g * k_size).transpose(0, 2, 1)
    cols = np.matmul(w_t, x.reshape(n, group, c_g, in_size))
    cols = cols.reshape((n, m, *kernel, *in_spatial))
    # Buffer covering both the full scatter range and the requested window (pads may be negative).
    lead = [max(0, -bg) for bg in begins]
    full = [(in_spatial[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 for i in range(nd)]
    buf_shape = [max(lead[i] + full[i], lead[i] + begins[i] + outs[i]) for i in range(nd)]
    # Taps that never land on the same output (stride beyond the dilated kernel: the 2x2/2 upsampling of
    # detection heads) are written, not added, with the bias on the way: no zero fill where they cover
    # every output, no read-modify-write, no bias pass (PP-OCR det's 24ch@160 2x2/2: 3.9 -> 2.8 ms).
    disjoint = all((kernel[i] - 1) * dilations[i] < strides[i] for i in range(nd))
    # Kernel == stride, undilated, no padding or output padding: every output gets exactly one tap.
    covered = all(kernel[i] == strides[i] and dilations[i] == 1 for i in range(nd))
    covered = covered and buf_shape == full and not any(lead)
    bias = None if b is None else b.reshape((1, m) + (1,) * nd).astype(cols.dtype, copy=False)
    tap_bias = covered and bias is not None  # the bias rides with each output's one tap
    buf = (np.empty if covered else np.zeros)((n, m, *buf_shape), dtype=cols.dtype)
    for tap in itertools.product(*(range(k) for k in kernel)):
        starts = [lead[i] + tap[i] * dilations[i] for i in range(nd)]
        region = (slice(None), slice(None),
                  *(slice(starts[i], starts[i] + (in_spatial[i] - 1) * strides[i] + 1, strides[i])
                    for i in range(nd)))
        contribution = cols[(slice(None), slice(None), *tap)]
        if not disjoint:
            buf[region] += contribution
        elif tap_bias:
            np.add(contribution, bias, out=buf[region])
        else:
            buf[region] = contribution
    crop = (slice(None), slice(None),
            *(slice(lead[i] + begins[i], lead[i] + begins[i] + outs[i]) for i in range(nd)))
    y = buf[crop]
    if bias is not None and not tap_bias:
        y = y + bias
    return np.ascontiguousarray(y)


@register("ConvTranspose", 1)
def conv_transpose(ctx, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                   output_padding=None, output_shape=None, pads=None, strides=None):
    """ConvTranspose: output_padding, output_shape, auto_pad, groups and dilations."""
    nd = X.ndim - 2
    strides, dilations, pads = spatial_attrs(nd, kernel_shape, strides, dilations, pads)
    output_padding = [int(v) for v in output_padding] if output_padding else [0] * nd
    output_padding = output_padding[-nd:] if len(output_padding) >= nd else output_padding + [0] * nd
    begins, outs = conv_transpose_geometry(X.shape[2:], W.shape[2:], strides, dilations, pads, auto_pad,
                                           output_padding, output_shape)
    dtype = compute_dtype(X)
    y = conv_transpose_nd(X.astype(dtype, copy=False), W.astype(dtype, copy=False),
                          None if B is None else B.astype(dtype, copy=False), group=int(group),
                          strides=strides, dilations=dilations, begins=begins, outs=outs)
    return y.astype(X.dtype, copy=False)


# --------------------------------------------------------------------------------------------
# DeformConv
# --------------------------------------------------------------------------------------------

def _bilinear_gather(img: np.ndarray, ys: np.ndarray, xs: np.ndarray) -> np.ndarray:
    """Bilinear samples of ``img`` (N, G, Cg, H, W) at (N, G, *P) positions; zero outside the image."""
    n, g, c_g, h, w = img.shape
    y0 = np.floor(ys)
    x0 = np.floor(xs)
    wy1 = ys - y0
    wx1 = xs - x0
    y0 = y0.astype(np.int64)
    x0 = x0.astype(np.int64)
    flat = img.reshape(n, g, c_g, h * w)
    out = np.zeros((n, g, c_g, *ys.shape[2:]), dtype=img.dtype)
    n_idx = np.arange(n).reshape((n, 1) + (1,) * (ys.ndim - 2))
    g_idx = np.arange(g).reshape((1, g) + (1,) * (ys.ndim - 2))
    for dy, dx in ((0, 0), (0, 1), (1, 0), (1, 1)):
        yy = y0 + dy
        xx = x0 + dx
        weight = (wy1 if dy else 1 - wy1) * (wx1 if dx else 1 - wx1)
        valid = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
        index = np.where(valid, yy * w + xx, 0)
        # (N, G, *P, Cg) -> move channels next to group
        vals = flat.transpose(0, 1, 3, 2)[n_idx, g_idx, index]
        vals = np.moveaxis(vals, -1, 2)
        out += vals * np.where(valid, weight, 0).astype(img.dtype)[:, :, None]
    return out


@register("DeformConv", 19)
def deform_conv(ctx, X, W, offset, B=None, mask=None, *, dilations=None, group=1, kernel_shape=None,
                offset_group=1, pads=None, strides=None):
    """DeformConv (2-D): bilinear sampling at offset kernel positions, optional mask, then one grouped gemm."""
    if X.ndim != 4:
        raise ValueError("DeformConv supports 2-D inputs (N, C, H, W) only")
    dtype = compute_dtype(X)
    x = X.astype(dtype, copy=False)
    w = W.astype(dtype, copy=False)
    n, c, h, wd = x.shape
    m, c_g = w.shape[:2]
    kh, kw = w.shape[2:]
    strides, dilations, pads = spatial_attrs(2, kernel_shape, strides, dilations, pads)
    _, _, (oh, ow) = conv_geometry((h, wd), (kh, kw), strides, dilations, pads, "NOTSET")
    og = int(offset_group)
    k_size = kh * kw
    off = offset.astype(dtype, copy=False).reshape(n, og, k_size, 2, oh, ow)
    msk = None if mask is None else mask.astype(dtype, copy=False).reshape(n, og, k_size, oh, ow)
    base_y = (np.arange(oh) * strides[0] - pads[0]).astype(dtype)[:, None]  # (oh, 1)
    base_x = (np.arange(ow) * strides[1] - pads[1]).astype(dtype)[None, :]  # (1, ow)
    img = x.reshape(n, og, c // og, h, wd)
    cols = np.empty((n, og, c // og, k_size, oh, ow), dtype=dtype)
    for k_index, (ki, kj) in enumerate(itertools.product(range(kh), range(kw))):
        ys = base_y + ki * dilations[0] + off[:, :, k_index, 0]  # (N, og, oh, ow)
        xs = base_x + kj * dilations[1] + off[:, :, k_index, 1]
        sampled = _bilinear_gather(img, ys, xs)  # (N, og, C/og, oh, ow)
        if msk is not None:
            sampled *= msk[:, :, k_index][:, :, None]
        cols[:, :, :, k_index] = sampled
    cols = cols.reshape(n, group, c_g * k_size, oh * ow)
    y = np.matmul(w.reshape(group, m // group, c_g * k_size), cols).reshape(n, m, oh, ow)
    if B is not None:
        y += B.astype(dtype).reshape(1, m, 1, 1)
    return y.astype(X.dtype, copy=False)


# --------------------------------------------------------------------------------------------
# FLOPs
# --------------------------------------------------------------------------------------------

@register("FusedConv", 1)
def fused_conv(ctx, X, W, B=None, Z=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
               pads=None, strides=None):
    """FusedConv (a Conv and the residual Add after it, ``passes.fuse.FuseResidualAdd``): Conv(X, W, B) + Z
    with Z broadcast as the Add did; the Add's activation is applied on the result."""
    if Z is None:
        raise ValueError("FusedConv needs its residual input Z")
    return _conv(ctx, X, W, B, Z, auto_pad=auto_pad, dilations=dilations, group=group,
                 kernel_shape=kernel_shape, pads=pads, strides=strides)


@register_flops("FusedConv")
def fused_conv_flops(layer, in_shapes, out_shapes) -> int:
    """The convolution's FLOPs (bias included) and one add per output element."""
    out = out_shapes[0] if out_shapes and out_shapes[0] is not None else None
    return conv_flops(layer, in_shapes[:3], out_shapes) + (math.prod(out) if out is not None else 0)


@register_flops("Conv", "ConvInteger", "QLinearConv", "DeformConv")
def conv_flops(layer, in_shapes, out_shapes) -> int:
    """2 FLOPs per multiply-add: 2 * N * M * prod(out_spatial) * (C / group) * prod(kernel), + bias adds."""
    w_index = 3 if layer.op_type == "QLinearConv" else 1
    if not out_shapes or out_shapes[0] is None or len(in_shapes) <= w_index or in_shapes[w_index] is None:
        return 0
    w_shape = in_shapes[w_index]
    macs = math.prod(out_shapes[0]) * math.prod(w_shape[1:])
    return 2 * macs + (math.prod(out_shapes[0]) if len(in_shapes) > 2 and layer.op_type in ("Conv", "FusedConv")
                       and in_shapes[2] is not None else 0)


@register_flops("ConvTranspose")
def conv_transpose_flops(layer, in_shapes, out_shapes) -> int:
    """2 FLOPs per multiply-add: 2 * N * C_in * prod(in_spatial) * (M / group) * prod(kernel), + bias adds."""
    if len(in_shapes) < 2 or in_shapes[0] is None or in_shapes[1] is None:
        return 0
    x_shape, w_shape = in_shapes[0], in_shapes[1]
    bias = (math.prod(out_shapes[0]) if len(in_shapes) > 2 and in_shapes[2] is not None and out_shapes
            and out_shapes[0] is not None else 0)
    return 2 * math.prod(x_shape) * math.prod(w_shape[1:]) + bias
