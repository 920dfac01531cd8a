"""gpu-pixel programs of Resize and Upsample (resize.py): every mode and coordinate transformation from the CPU
kernel's own tap tables (resize_gpu.resize_tables), combined in its order."""

from __future__ import annotations

import numpy as np

from wgsentis.backends.gpu.shader_gen import resize_program
from wgsentis.backends.gpu.tensors import loop_passes
from wgsentis.backends.pixel_layout import MAX_RANK
from wgsentis.ops.resize import resize_args
from wgsentis.ops.resize_gpu import resize_tables
from wgsentis.ops.tensor_gpu import storage_bits
from wgsentis.ops.tensor_pixel import affine_copy, pixel, pixel_tensor


def _resize(rec, layer, X, scales, sizes, roi, *, mode, ctm, nearest_mode, cubic_a=-0.75, exclude_outside=0,
            extrapolation_value=0.0, antialias=0, axes=None, policy="stretch"):
    """Resize from the CPU kernel's own tap tables (resize_gpu.resize_tables), combined in its order (resize.py,
    ONNX Runtime's): nearest copies its tap; linear ("corners") sums (w_inner * ... * w_outer) * x over the taps'
    tensor product from the first term; cubic ("passes") nests one sum from 0 per axis, adding x * w / divisor.
    Texel by texel where the blocked axis is not interpolated. Products that are added are rounded on their own
    (an XOR with a zero the compiler cannot see), so no driver contracts them into FMAs."""
    x = pixel_tensor(rec, X)
    if x is None or antialias or mode not in ("nearest", "linear", "cubic") or not x.shape:
        return NotImplemented
    if mode != "nearest" and x.dtype != np.float32:
        return NotImplemented  # integer interpolation (ORT's fixed point, truncation) runs on the CPU
    out_shape, tables, _crop, combine = resize_tables(
        tuple(x.shape), scales, sizes, roi, mode=mode, ctm=ctm, nearest_mode=nearest_mode, cubic_a=cubic_a,
        exclude_outside=exclude_outside, axes=axes, policy=policy)
    extrap = storage_bits(np.asarray(extrapolation_value).astype(x.dtype), x.dtype)
    resized = [a for a, t in enumerate(tables) if t is not None]
    if not resized:
        return affine_copy(rec, x, out_shape, list(range(len(out_shape))), [0] * len(out_shape),
                           [1] * len(out_shape))
    words, offsets = [], []
    for a in resized:
        taps, weights, outside, divisors = tables[a]
        offsets.append(sum(w.size for w in words))
        # Per output index o: its taps, their weights, the outside flag and the divisor, as float32
        # (indices < 2^24).
        n = taps.shape[1]
        rows = np.concatenate([taps.astype(np.float32), weights, outside.astype(np.float32)[:, None],
                               divisors[:, None]], axis=1)
        words.append(rows.reshape(-1))
        if n > 64 or taps.max(initial=0) >= 1 << 24:
            return NotImplemented
    table = np.concatenate(words).astype(np.float32)
    tb = rec.upload(table, f"{layer.name}:taps", 0)
    rank = len(x.shape)
    lead = MAX_RANK - rank
    divides = any(np.any(tables[a][3] != 1) for a in resized)
    # Texel by texel needs no division: texels.wgsl has no math.wgsl (cubic with exclude_outside draws by element).
    texel = x.layout.axis not in resized and x.layout.kind == "f32" and not divides
    if not rec.loops_fit(loop_passes(*[tables[a][0].shape[1] for a in resized]) * 8):
        return NotImplemented  # each tap's addressing loops count too
    # The table offsets travel as words pe(1 + k): the source depends on the axes and their tap counts only.
    body, helpers = resize_program([(lead + a, tables[a][0].shape[1]) for a in resized], combine, texel,
                                   x.layout.kind, rec.ctx.division_function)
    draw = rec.texels if texel else rec.map
    return draw([x, tb], out_shape, x.dtype, x.layout.axis, body, [extrap, *offsets], helpers=helpers)


@pixel("Resize", 10, host_inputs=(1,))
def resize_10(rec, layer, X, scales, *, mode="nearest", **attrs):
    return _resize(rec, layer, X, scales, None, None, **resize_args(10, {"mode": mode}))


@pixel("Resize", 11, host_inputs=(1, 2, 3))
def resize(rec, layer, X, roi=None, scales=None, sizes=None, **attrs):
    return _resize(rec, layer, X, scales, sizes, roi, **resize_args(11, attrs))


@pixel("Upsample", 9, host_inputs=(1,))
def upsample_9(rec, layer, X, scales, *, mode="nearest", **attrs):
    return resize_10(rec, layer, X, scales, mode=mode)
