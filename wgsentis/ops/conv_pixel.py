"""gpu-pixel programs of the conv family: Conv (1-D/2-D/3-D, pads, strides, dilations, auto_pad, groups, bias,
fused activation), FusedConv (Conv + a residual Z in the same draw) and ConvTranspose (gather form, every
attribute), all drawn by wgsl/pixel/conv.wgsl.

The input is switched to channels blocked (axis 1) and so is the output: a fragment draws four output channels at
up to 8 output columns, one render target each (as many as the device's color attachments allow), which a second
draw (wgsl/pixel/matmul_assemble.wgsl) interleaves into the output; where those targets would pass
MAX_TARGET_BYTES the output is drawn in chunks of its rows, the targets reused. The weights are read on the host
(``host_inputs``; initializers in practice) and packed once per weight array (``ConstantStore.derived``) into one
texture whose texels each hold four consecutive output channels for one (input channel, tap), followed by the
bias: per tap and input block, four weight texels, one input texel per column and a 4x4 matrix-vector product per
column. Groups need no path of their own: an output block reads the input blocks its channels' groups span, with
zero weights for channels of another group; depthwise convolutions (one channel per group) multiply texel by
texel. Weights that live only on the device, other dtypes and ranks above 3-D fall back.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy as np

from wgsentis.backends.gpu.shader_gen import pixel_conv_subs, pixel_winograd_in_subs, pixel_winograd_out_subs
from wgsentis.backends.gpu.tensors import GTensor, loop_passes
from wgsentis.ops.conv import conv_geometry, conv_transpose_geometry, spatial_attrs
from wgsentis.ops.matmul_gpu import fused, host_value
from wgsentis.ops.matmul_pixel import divided, interleave, product, rows_per_fragment
from wgsentis.ops.registry import GPU_PIXEL, register

_SHADER = "pixel/conv.wgsl"
_WINOGRAD_IN = "pixel/winograd_in.wgsl"
_WINOGRAD_OUT = "pixel/winograd_out.wgsl"


def _first_blocks(m: int, cg: int, mg: int) -> tuple[np.ndarray, np.ndarray]:
    """Per output block: the first input block its channels' groups read (cb0, as conv.wgsl computes it) and
    one past the last."""
    mb = np.arange(-(-m // 4))
    first = (4 * mb // mg) * cg // 4
    last = -(-(np.minimum(4 * mb + 3, m - 1) // mg + 1) * cg // 4)
    return first, last


def _span(m: int, cg: int, mg: int) -> int:
    """NB: the most input blocks one output block reads."""
    first, last = _first_blocks(m, cg, mg)
    return int((last - first).max())


def _pack(w_oc: np.ndarray, b: np.ndarray | None, mg: int, depthwise: bool, nb: int) -> np.ndarray:
    """The weight texture of conv.wgsl from ``w_oc`` (M, C/group, K) (output channel, its group's input channel,
    tap) and the bias: (texels, 4) float32, NB (``nb``) the input blocks an output block reads.

    General form: (MB, K, NB, 4 input lanes, 4 output lanes), W[4mb + o, c, k] at [mb, k, c // 4 - cb0(mb),
    c % 4, o] for each input channel c of o's group, zero elsewhere; depthwise: (MB, K, 4 output lanes). The bias
    (MB texels, zero without one) follows."""
    m, cg, taps = w_oc.shape
    mb_all = -(-m // 4)
    bias = np.zeros((mb_all * 4,), np.float32)
    if b is not None:
        bias[:m] = b
    if depthwise:
        packed = np.zeros((mb_all * 4, taps), np.float32)
        packed[:m] = w_oc[:, 0, :]
        body = packed.reshape(mb_all, 4, taps).transpose(0, 2, 1).reshape(-1, 4)  # (MB * K, 4)
        return np.concatenate([body, bias.reshape(-1, 4)])
    o = np.arange(m)
    first, _last = _first_blocks(m, cg, mg)
    packed = np.zeros((mb_all, taps, nb, 4, 4), np.float32)
    c = (o // mg)[:, None] * cg + np.arange(cg)[None, :]  # (M, cg): input channel of each weight
    mb = (o // 4)[:, None].repeat(cg, 1)
    packed[mb, :, c // 4 - first[mb], c % 4, (o % 4)[:, None].repeat(cg, 1)] = w_oc  # (M, cg, K) lands per tap
    return np.concatenate([packed.reshape(-1, 4), bias.reshape(-1, 4)])


def _frame3(values: list[int], fill: int) -> list[int]:
    """Per-axis values of a 1-D/2-D/3-D convolution in the 3-D frame (leading axes ``fill``)."""
    return [fill] * (3 - len(values)) + list(values)


def _padded_w(auto_pad: str, pads: list[int], kernel_w: int, dilation_w: int) -> bool:
    """Whether a Conv's taps may read W padding, from its attributes alone (so the pipeline serves every input
    size): explicit W pads, or SAME padding with a window wider than one (SAME pads a 1-wide window by nothing).
    Without pads no tap leaves the input: ow = (W - span) // stride + 1, so (ow - 1) * stride + span - 1 < W."""
    nd = len(pads) // 2
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        return (kernel_w - 1) * dilation_w > 0
    return auto_pad != "VALID" and (pads[nd - 1] != 0 or pads[2 * nd - 1] != 0)


def _float_input(x: Any) -> bool:
    return getattr(x, "dtype", None) == np.float32 and isinstance(x, np.ndarray | GTensor)


def _draw(rec, layer, X, w_oc: np.ndarray, b: np.ndarray | None, sources: tuple, *, group: int,
          out_shape: tuple[int, ...], kernel: list[int], strides: list[int], dilations: list[int],
          begins: list[int], transposed: bool, padded_w: bool = True, residual: Any = None) -> GTensor | None:
    """Record the draw of conv.wgsl for Y (``out_shape``) from X with the weights ``w_oc`` (M, C/group, K);
    None where it cannot (the caller falls back). ``padded_w``: whether the attributes let a tap read W padding
    (``_padded_w``); False drops the bounds check along W (CHECK_W) for every size alike."""
    c = X.shape[1]
    m, cg = w_oc.shape[:2]
    mg = m // group
    depthwise = cg == 1 and mg == 1
    kd, kh, kw = _frame3(kernel, 1)
    nb = 1 if depthwise else _span(m, cg, mg)
    if not rec.loops_fit(loop_passes(kd, kh, kw, 1 if depthwise else nb)):
        return None  # lavapipe would end the loops early
    operands = _operands(rec, layer, X, out_shape, residual)
    if operands is None or operands[1].size == 0:
        return None if operands is None else operands[1]
    x, y, z = operands
    packed = rec.program.constants.derived(("pixelConv", transposed, group), sources,
                                           lambda: _pack(w_oc, b, mg, depthwise, nb))
    wt = rec.upload(packed, f"{layer.name}:W")
    act = fused(layer)
    od, oh, ow = _frame3(list(out_shape[2:]), 1)
    d, h, wd = _frame3(list(X.shape[2:]), 1)
    mb_all = -(-m // 4)
    taps = kd * kh * kw
    bias_at = mb_all * taps * (1 if depthwise else 4 * nb)
    # Several output columns per fragment (render targets) share each weight load; interleaved into Y after.
    rows = rows_per_fragment(rec, ow)
    owr = -(-ow // rows)
    prefix = out_shape[0] * mb_all * od * oh  # Y's texels per output column
    chunk = prefix if rows == 1 else chunk_prefixes(prefix, ow, owr * rows, y.layout.width)
    # (chunk, OW / rows, 4) with its last axis blocked: texel prefix * OWr + owi, four channels.
    targets = [y] if rows == 1 else [rec.alloc((chunk, owr, 4), np.float32, -1) for _ in range(rows)]
    pd = _frame3(begins, 0)
    params: list[int | float] = [targets[0].layout.texels, targets[0].layout.shift, x.layout.shift,
                                 wt.layout.shift, owr, oh, od, mb_all, wd, h, d, -(-c // 4), nb, mg, cg, m, bias_at,
                                 *[int(p) & 0xFFFFFFFF for p in pd], *[float(v) for v in act[1]], ow,
                                 z.layout.shift if z is not None else 0]
    sd, sh, sw = _frame3(strides, 1)
    dd, dh, dw = _frame3(dilations, 1)
    constants = {"KD": kd, "KH": kh, "KW": kw, "SD": sd, "SH": sh, "SW": sw, "DD": dd, "DH": dh, "DW": dw,
                 "TRANSPOSED": int(transposed), "DEPTHWISE": int(depthwise),
                 "CHECK_W": int(transposed or padded_w)}
    inputs = [x, wt] if z is None else [x, wt, z]
    subs = pixel_conv_subs(rows, z is not None, divided(rec, act[0]))
    if chunk == prefix:
        rec.draw(_SHADER, inputs, targets, params, constants=constants, subs=subs)
        if rows > 1:
            interleave(rec, targets, y, 1, ow, owr)
        return y
    # Y in chunks of prefixes, each whole texel rows of Y: the targets drawn for one chunk, then interleaved into
    # its rows, and reused by the next (the same fragments and weight loads as one draw, a fraction of the
    # targets' memory beside Y).
    width = y.layout.width
    for first in range(0, prefix, chunk):
        count = min(chunk, prefix - first)
        params[0] = count * owr
        rec.draw(_SHADER, inputs, targets, [*params, first], constants=constants, subs=subs)
        top, bottom = first * ow // width, -(-(first + count) * ow // width)
        interleave(rec, targets, y, 1, ow, owr, first, (top, bottom - top))
    return y


# A many-target conv's render targets beside its output, at most (where Y is larger): they are as large as Y, and
# at PP-OCR det's largest conv (13 MB of them) they set the plan's largest live set, in textures of their own
# that no other tensor could use (1.71x the live set by packing alone, 1.43x in chunks under this).
MAX_TARGET_BYTES = 4 << 20


def chunk_prefixes(prefix: int, ow: int, columns: int, width: int) -> int:
    """How many of a conv's ``prefix`` output rows (``ow`` columns each, ``columns`` of them in its targets'
    texels) one chunk draws: all where its targets fit in MAX_TARGET_BYTES, else a multiple of the rows that
    end on a texel row of Y (``width`` texels wide: a chunk's draw covers whole rows) within it, at least one."""
    step = width // math.gcd(width, ow)
    fit = MAX_TARGET_BYTES // (16 * columns)
    if prefix * columns * 16 <= MAX_TARGET_BYTES or step >= prefix:
        return prefix
    return min(prefix, max(step, fit // step * step))


# -- Winograd -----------------------------------------------------------------------------------------------------
# F(S x S, 3x3) (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks"), the matrices gpu-compute uses
# (ops/conv_winograd_gpu.py): B^T (A x A), G (A x 3), A^T (S x A), A = S + 2 the input tile side.
_F2 = (np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64),
       np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]]),
       np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64))
_F4 = (np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0],
                 [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], np.float64),
       np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
                 [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]]),
       np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]], np.float64))
# Below these input and output channel counts the transforms (three draws and per-fragment costs on lavapipe)
# cost more than the products save: measured on DenseNet-121 (128 -> 32) and SqueezeNet (16-64 -> 64-256), where
# Winograd was slower than the direct program, against ResNet-50 and Inception v1 (64-512 each way), faster.
WINOGRAD_MIN_CHANNELS = 64
WINOGRAD_MIN_OUTPUT_CHANNELS = 64
WINOGRAD4_MIN_SIDE = 8  # F(4x4) where the output is at least this on both sides (smaller ones waste their tiles)


def _winograd_applies(X, w: np.ndarray, group: int, strides: list[int], dilations: list[int]) -> bool:
    """Whether Conv takes Winograd: 2-D, 3x3, stride 1, dilation 1, one group, enough input channels."""
    return (X.ndim == 4 and tuple(w.shape[2:]) == (3, 3) and group == 1 and list(strides) == [1, 1]
            and list(dilations) == [1, 1] and X.shape[1] >= WINOGRAD_MIN_CHANNELS
            and w.shape[0] >= WINOGRAD_MIN_OUTPUT_CHANNELS)


def _winograd_weights(w: np.ndarray, g: np.ndarray) -> np.ndarray:
    """(M, C, 3, 3) -> U = G w G^T as (A, A, C, M) float32: U[i, j] the B operand of product (i, j)."""
    return np.einsum("ai,mcij,bj->abcm", g, w.astype(np.float64), g).astype(np.float32)


def _winograd(rec, layer, X, w: np.ndarray, b: np.ndarray | None, *, out_shape: tuple[int, ...],
              begins: list[int], residual: Any = None) -> GTensor | None:
    """Conv (3x3, stride 1) as Winograd F(4x4, 3x3) where the output is at least WINOGRAD4_MIN_SIDE on both
    sides, else F(2x2, 3x3): the input tiles transformed into V (winograd_in.wgsl, one render target per column
    j of the transformed tile), per j a batch of A pixel matmuls V[i, j] (T, C) @ U[i, j] (C, M) with the
    weights transformed on the host, and the products folded into the channels-blocked output with bias,
    residual and activation (winograd_out.wgsl). None where it does not fit (the direct program is tried next)."""

    n, c, h, wd = X.shape
    m = w.shape[0]
    oh, ow = out_shape[2:]
    four = rec.program.fast_winograd and min(oh, ow) >= WINOGRAD4_MIN_SIDE  # see conv_winograd_gpu.conv_winograd
    bt, g, a_t = _F4 if four else _F2
    side, a = a_t.shape
    th, tw = -(-oh // side), -(-ow // side)
    tiles = n * th * tw
    cb, mb = -(-c // 4), -(-m // 4)
    limit = int(rec.ctx.limits.get("max-texture-dimension-2d", 8192))
    if a * tiles * max(cb, mb) > limit * limit or not rec.loops_fit(loop_passes(c // 4)):
        return None
    operands = _operands(rec, layer, X, out_shape, residual)
    if operands is None or operands[1].size == 0:
        return None if operands is None else operands[1]
    x, y, z = operands
    u = rec.derived(("pixelWinograd", side), (w,), lambda: _winograd_weights(w, g))  # (A, A, C, M)
    bias = rec.upload(rec.derived(("pixelWinogradBias",), (w,) if b is None else (w, b),
                                  lambda: np.zeros(m, np.float32) if b is None else b), f"{layer.name}:B")
    # Target j: (A, T, C), C blocked, the elements (i, j) of the transformed input tiles.
    vs = [rec.alloc((a, tiles, c), np.float32, -1) for _ in range(a)]
    rec.draw(_WINOGRAD_IN, [x], vs, [vs[0].layout.texels, vs[0].layout.shift, x.layout.shift, cb, tiles, tw, th,
                                     wd, h, int(begins[0]) & 0xFFFFFFFF, int(begins[1]) & 0xFFFFFFFF],
             subs=pixel_winograd_in_subs(bt, side))
    plain = SimpleNamespace(fused_activation=None)  # the activation comes after the output transform
    prods = []
    for j in range(a):
        u_j = rec.upload(rec.derived(("pixelWinogradU", side, j), (u,), lambda j=j: np.ascontiguousarray(u[:, j])),
                         f"{layer.name}:U{j}")
        # (A, T, M), M blocked: products (i, j) of the tiles' transformed inputs and the transformed weights.
        prod = rec.alloc((a, tiles, m), np.float32, -1)
        if not product(rec, plain, vs[j], u_j, prod, m=tiles, n=m, k=c, batch=(a,),
                        a_strides=(cb, 1, [tiles * cb]), b_strides=(mb, 1, [c * mb])):
            return None
        prods.append(prod)
    act = fused(layer)
    # Target rx: (N * MB * OH, TW, 4), the output columns tx * S + rx, interleaved into Y after.
    targets = [rec.alloc((n * mb * oh, tw, 4), np.float32, -1) for _ in range(side)]
    params: list[int | float] = [targets[0].layout.texels, targets[0].layout.shift, prods[0].layout.shift,
                                 bias.layout.shift, z.layout.shift if z is not None else 0, tw, oh, mb, ow, th,
                                 tiles, m, *[float(v) for v in act[1]]]
    rec.draw(_WINOGRAD_OUT, [*prods, bias] if z is None else [*prods, bias, z], targets, params,
             subs=pixel_winograd_out_subs(a_t, z is not None, divided(rec, act[0])))
    interleave(rec, targets, y, 1, ow, tw)
    return y


def _operands(rec, layer, X, out_shape, residual) -> tuple[GTensor, GTensor, GTensor | None] | None:
    """A convolution's input with its channels blocked, its new output (channels blocked) and the residual Z
    ready to add to it (None without one); None where one of them cannot be drawn."""
    x = rec.tensor(X, f"{layer.name}:X", axis=1)
    if x is None:
        return None
    y = rec.alloc(out_shape, np.float32, 1)
    z = None
    if residual is not None and y.size:
        z = _residual(rec, residual, y)
        if z is None:
            return None
    return x, y, z


def _residual(rec, residual: Any, y: GTensor) -> GTensor | None:
    """FusedConv's Z in Y's layout (channels blocked): itself switched to axis 1 where it has Y's shape, else
    broadcast to it by a copy; None where it does not broadcast to Y."""
    if not _float_input(residual):
        return None
    shape = tuple(residual.shape)
    try:
        if np.broadcast_shapes(shape, y.shape) != tuple(y.shape):
            return None
    except ValueError:
        return None
    z = rec.tensor(residual, "residual", axis=1 if len(shape) > 1 else None)
    if z is None:
        return None
    if shape != tuple(y.shape) or z.layout.axis != 1:  # conv.wgsl reads Z at Y's texel indices
        z = rec.map([z], y.shape, np.float32, 1, "r = x0(c);")
    return z


def _conv_weights(X, W, B) -> tuple[np.ndarray, np.ndarray | None] | None:
    """The host float32 weight and bias of a 1-D/2-D/3-D convolution of float32 X, or None (fall back)."""
    w = host_value(W)
    b = None if B is None else host_value(B)
    if not _float_input(X) or w is None or w.dtype != np.float32 or X.ndim not in (3, 4, 5) or w.ndim != X.ndim:
        return None
    if B is not None and (b is None or b.dtype != np.float32 or b.ndim != 1):
        return None
    return w, b


@register("Conv", 1, backend=GPU_PIXEL, host_inputs=(1, 2))
def conv(rec, layer, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
         strides=None, residual=None, **attrs):
    """Conv drawn by conv.wgsl; ``residual`` (FusedConv): Z added before the fused activation."""
    weights = _conv_weights(X, W, B)
    if weights is None:
        return NotImplemented
    w, b = weights
    nd = X.ndim - 2
    group = int(group)
    n, c = X.shape[:2]
    m = w.shape[0]
    if kernel_shape is not None and list(kernel_shape) != list(w.shape[2:]):
        return NotImplemented
    if group <= 0 or c == 0 or c != w.shape[1] * group or m % group or (b is not None and b.shape[0] != m):
        return NotImplemented  # the CPU kernel names the mismatch
    try:
        strides, dilations, pads = spatial_attrs(nd, kernel_shape, strides, dilations, pads)
        begins, _ends, outs = conv_geometry(X.shape[2:], w.shape[2:], strides, dilations, pads, auto_pad)
    except ValueError:
        return NotImplemented
    if _winograd_applies(X, w, group, strides, dilations):
        y = _winograd(rec, layer, X, w, b, out_shape=(n, m, *outs), begins=begins, residual=residual)
        if y is not None:
            return y
    w_oc = rec.program.constants.derived(("pixelConvOC",), (w,), lambda: w.reshape(m, w.shape[1], -1))
    sources = (w,) if b is None else (w, b)
    y = _draw(rec, layer, X, w_oc, b, sources, group=group, out_shape=(n, m, *outs),
              kernel=list(w.shape[2:]), strides=strides, dilations=dilations, begins=begins, transposed=False,
              padded_w=_padded_w(auto_pad, pads, int(w.shape[-1]), dilations[-1]), residual=residual)
    return NotImplemented if y is None else y


@register("FusedConv", 1, backend=GPU_PIXEL, host_inputs=(1, 2))
def fused_conv(rec, layer, X, W, B=None, Z=None, **attrs):
    """FusedConv (passes.fuse.FuseResidualAdd): act(Conv(X, W, B) + Z), Z broadcast to the output."""
    if Z is None:
        return NotImplemented
    return conv(rec, layer, X, W, B, residual=Z, **attrs)


@register("ConvTranspose", 1, backend=GPU_PIXEL, host_inputs=(1, 2))
def conv_transpose(rec, layer, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                   output_padding=None, output_shape=None, pads=None, strides=None, **attrs):
    """ConvTranspose drawn by conv.wgsl in gather form: each output position sums the input positions that
    reach it."""
    weights = _conv_weights(X, W, B)
    if weights is None:
        return NotImplemented
    w, b = weights
    nd = X.ndim - 2
    group = int(group)
    n, c = X.shape[:2]
    if group <= 0 or c == 0 or w.shape[0] != c or c % group:
        return NotImplemented
    mg = w.shape[1]
    m = mg * group
    if (b is not None and b.shape[0] != m) or (kernel_shape is not None
                                               and list(kernel_shape) != list(w.shape[2:])):
        return NotImplemented
    try:
        strides, dilations, pads = spatial_attrs(nd, kernel_shape, strides, dilations, pads)
        output_padding = [int(v) for v in output_padding] if output_padding else [0] * nd
        output_padding = output_padding[-nd:] if len(output_padding) >= nd else output_padding + [0] * nd
        begins, outs = conv_transpose_geometry(X.shape[2:], w.shape[2:], strides, dilations, pads, auto_pad,
                                               output_padding, output_shape)
    except (ValueError, TypeError, IndexError):
        return NotImplemented
    if len(outs) != nd or any(o <= 0 for o in outs) or any(s <= 0 for s in strides):
        return NotImplemented
    cg = c // group
    taps = math.prod(w.shape[2:])

    def regroup() -> np.ndarray:
        # (C, M/group, K) -> (M, C/group, K): W[g * cg + ci, o] is output channel g * mg + o's input ci.
        return w.reshape(group, cg, mg, taps).transpose(0, 2, 1, 3).reshape(m, cg, taps)

    w_oc = rec.program.constants.derived(("pixelConvTOC", group), (w,), regroup)
    sources = (w,) if b is None else (w, b)
    y = _draw(rec, layer, X, w_oc, b, sources, group=group, out_shape=(n, m, *outs),
              kernel=list(w.shape[2:]), strides=strides, dilations=dilations, begins=list(begins), transposed=True)
    return NotImplemented if y is None else y

__all__ = ["conv", "conv_transpose", "fused_conv"]
