"""Signal-processing operators (numpy kernels): DFT, STFT, the Hann/Hamming/Blackman windows and
MelWeightMatrix. Complex tensors use ONNX's real layout: a trailing axis of size 2 (real, imag), or
of size 1 for a real signal.
"""

from __future__ import annotations

import numpy as np

from wgsentis.dtypes import ONNX_TO_NUMPY
from wgsentis.ops.registry import register, register_flops


def _to_complex(x: np.ndarray) -> np.ndarray:
    """(..., 1) real or (..., 2) real/imag -> complex array without the trailing axis.

    float64 signals are transformed in complex128, all others in complex64 (numpy's FFT keeps
    single precision, which is what the spec's reference results use).
    """
    real_dtype = np.float64 if x.dtype == np.float64 else np.float32
    if x.shape[-1] == 1:
        return x[..., 0].astype(real_dtype)
    if x.shape[-1] == 2:
        return x[..., 0].astype(real_dtype) + np.complex64(1j) * x[..., 1].astype(real_dtype)
    raise ValueError(f"last dimension of a signal must be 1 (real) or 2 (complex), got {x.shape[-1]}")


def _from_complex(z: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """complex array -> (..., 2) real/imag array of ``dtype``."""
    return np.stack((z.real, z.imag), axis=-1).astype(dtype)


def _dft(x: np.ndarray, dft_length, axis: int, inverse: int, onesided: int) -> np.ndarray:
    if x.ndim < 2:
        raise ValueError(f"DFT input must have rank >= 2, got shape {x.shape}")
    axis = int(axis)
    if not -x.ndim <= axis < x.ndim - 1 and axis != -1:
        raise ValueError(f"DFT axis {axis} out of range for shape {x.shape}")
    axis %= x.ndim
    if axis == x.ndim - 1:
        raise ValueError("DFT axis cannot be the trailing real/imag axis")
    signal = _to_complex(x)
    if dft_length is not None:
        n = int(np.asarray(dft_length).reshape(-1)[0])
    elif inverse and onesided:
        n = 2 * (x.shape[axis] - 1)
    else:
        n = x.shape[axis]
    if inverse:
        if onesided:
            # One-sided spectrum in, real signal of n samples out.
            return np.fft.irfft(signal, n=n, axis=axis)[..., None].astype(x.dtype)
        return _from_complex(np.fft.ifft(signal, n=n, axis=axis), x.dtype)
    spectrum = np.fft.fft(signal, n=n, axis=axis)
    if onesided:
        spectrum = np.take(spectrum, np.arange(n // 2 + 1), axis=axis)
    return _from_complex(spectrum, x.dtype)


@register("DFT", 17)
def dft_17(ctx, input, dft_length=None, *, axis=1, inverse=0, onesided=0):
    """Discrete Fourier transform along ``axis`` (an attribute until opset 20)."""
    return _dft(input, dft_length, axis, inverse, onesided)


@register("DFT", 20)
def dft_20(ctx, input, dft_length=None, axis=None, *, inverse=0, onesided=0):
    """Discrete Fourier transform along ``axis`` (an optional scalar input, default -2)."""
    axis_value = -2 if axis is None else int(np.asarray(axis).reshape(-1)[0])
    return _dft(input, dft_length, axis_value, inverse, onesided)


@register_flops("DFT", "STFT")
def _fft_flops(layer, in_shapes, out_shapes):
    """5 N log2 N per transformed complex vector (the classic radix-2 FFT count)."""
    out = out_shapes[0] if out_shapes else None
    if out is None or len(out) < 2:
        return 0
    n = max(int(out[-2]), 2)
    vectors = int(np.prod(out[:-2])) if len(out) > 2 else 1
    return int(5 * n * np.log2(n) * vectors)


@register("STFT", 17)
def stft(ctx, signal, frame_step, window=None, frame_length=None, *, onesided=1):
    """Short-time Fourier transform of (B, L, 1|2) -> (B, frames, bins, 2)."""
    step = int(np.asarray(frame_step).reshape(-1)[0])
    if frame_length is not None:
        length = int(np.asarray(frame_length).reshape(-1)[0])
    elif window is not None:
        length = window.shape[0]
    else:
        raise ValueError("STFT needs a window or a frame_length")
    if window is not None and window.shape[0] != length:
        raise ValueError(f"window length {window.shape[0]} differs from frame_length {length}")
    x = _to_complex(signal)  # (B, L)
    n_frames = 1 + (x.shape[1] - length) // step
    if n_frames < 1:
        raise ValueError(f"signal of length {x.shape[1]} is shorter than frame_length {length}")
    starts = np.arange(n_frames) * step
    frames = x[:, starts[:, None] + np.arange(length)[None, :]]  # (B, frames, length)
    if window is not None:
        frames = frames * window.astype(frames.real.dtype)
    if onesided and signal.shape[-1] == 1:
        spectrum = np.fft.rfft(frames.real, n=length, axis=-1)
    else:
        spectrum = np.fft.fft(frames, n=length, axis=-1)
        if onesided:
            spectrum = spectrum[..., : length // 2 + 1]
    return _from_complex(spectrum, signal.dtype)


def _window_positions(size, periodic: int) -> tuple[np.ndarray, int]:
    n = int(np.asarray(size).reshape(-1)[0])
    denominator = n if periodic else n - 1
    return np.arange(n, dtype=np.float64), max(denominator, 1)


@register("HannWindow", 17)
def hann_window(ctx, size, *, output_datatype=1, periodic=1):
    positions, denom = _window_positions(size, periodic)
    window = 0.5 - 0.5 * np.cos(2 * np.pi * positions / denom)
    return window.astype(ONNX_TO_NUMPY[int(output_datatype)])


@register("HammingWindow", 17)
def hamming_window(ctx, size, *, output_datatype=1, periodic=1):
    positions, denom = _window_positions(size, periodic)
    a0 = 25 / 46
    window = a0 - (1 - a0) * np.cos(2 * np.pi * positions / denom)
    return window.astype(ONNX_TO_NUMPY[int(output_datatype)])


@register("BlackmanWindow", 17)
def blackman_window(ctx, size, *, output_datatype=1, periodic=1):
    positions, denom = _window_positions(size, periodic)
    window = (0.42 - 0.5 * np.cos(2 * np.pi * positions / denom)
              + 0.08 * np.cos(4 * np.pi * positions / denom))
    return window.astype(ONNX_TO_NUMPY[int(output_datatype)])


@register("MelWeightMatrix", 17)
def mel_weight_matrix(ctx, num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz, *,
                      output_datatype=1):
    """(dft_length // 2 + 1, num_mel_bins) triangular filters evenly spaced on the mel scale."""
    num_mel_bins = int(np.asarray(num_mel_bins).reshape(-1)[0])
    dft_length = int(np.asarray(dft_length).reshape(-1)[0])
    sample_rate = np.asarray(sample_rate).reshape(-1)[0]
    lower = np.asarray(lower_edge_hertz).reshape(-1)[0]
    upper = np.asarray(upper_edge_hertz).reshape(-1)[0]
    num_spectrogram_bins = dft_length // 2 + 1
    bins = np.arange(num_mel_bins + 2)
    low_mel = 2595 * np.log1p(lower / 700) / np.log(10)
    high_mel = 2595 * np.log1p(upper / 700) / np.log(10)
    mel_step = (high_mel - low_mel) / bins.shape[0]
    hertz = 700 * np.expm1((bins * mel_step + low_mel) / 2595 * np.log(10))
    edges = (((dft_length + 1) * hertz) // sample_rate).astype(np.int64)
    output = np.zeros((num_spectrogram_bins, num_mel_bins))
    for i in range(num_mel_bins):
        left, center, right = int(edges[i]), int(edges[i + 1]), int(edges[i + 2])
        if center == left:
            output[center, i] = 1
        else:
            j = np.arange(left, center + 1)
            output[j, i] = (j - left) / (center - left)
        if right > center:
            j = np.arange(center, right)
            output[j, i] = (right - j) / (right - center)
    return output.astype(ONNX_TO_NUMPY[int(output_datatype)])
