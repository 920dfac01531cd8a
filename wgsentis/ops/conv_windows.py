"""The pieces the CPU convolutions and pools share: padding, window views and tap slices of the padded input,
flat stride-phase planes (``FlatWindows``), the border fill, weights derived once per layer, and the epilogue a
convolution applies part by part. The geometry of outputs and pads lives in ops/conv.py."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.lib.stride_tricks import as_strided

from wgsentis.ops.parallel import TRANSIENT, HostWorkspace

FLOAT_KINDS = (np.dtype(np.float32), np.dtype(np.float64))  # the dtypes the CPU convolutions compute in


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
