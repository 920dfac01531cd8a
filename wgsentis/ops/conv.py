"""Convolution operators: Conv, FusedConv, ConvTranspose, DeformConv (ConvInteger and QLinearConv in
ops/quant.py run ``conv_nd`` too); the geometry of outputs and pads every backend shares.

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

``conv_nd`` picks the form; the forms live beside it: ops/conv_depthwise.py, ops/conv_winograd.py,
ops/conv_im2col.py (kn2row and im2col), and what they share in ops/conv_windows.py.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from wgsentis.ops.conv_depthwise import (
    conv_depthwise_2d,
    conv_depthwise_2d_channels_last,
    conv_depthwise_2d_cols,
    conv_depthwise_nd,
    depthwise_channels_last_applies,
)
from wgsentis.ops.conv_im2col import conv_kn2row, im2col_gemm, kn2row_applies
from wgsentis.ops.conv_windows import FLOAT_KINDS, ConvEpilogue, pad_spatial
from wgsentis.ops.conv_winograd import conv_winograd_3x3, winograd_applies
from wgsentis.ops.kernel_options import kernel_options
from wgsentis.ops.parallel import TRANSIENT, HostWorkspace, kernel_threads, kernel_workspace, par_matmul
from wgsentis.ops.registry import register, register_flops


# --------------------------------------------------------------------------------------------
# Geometry (every backend's convolutions and pools, and the memory budget, read it)
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


def compute_dtype(x: np.ndarray) -> np.dtype:
    """float32/float64 compute as themselves; narrower floats (float16, bfloat16) go through float32."""
    return x.dtype if x.dtype in FLOAT_KINDS else np.dtype(np.float32)


# --------------------------------------------------------------------------------------------
# Conv
# --------------------------------------------------------------------------------------------

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
            y = conv_depthwise_2d_channels_last(x, w, b, strides, dilations, begins, outs, threads, workspace,
                                                 bare)
            applied = True
        elif out_size <= 1024 or (out_size <= 4096 and tuple(strides) == (1, 1)):
            y = conv_depthwise_2d_cols(x, w, b, strides, dilations, begins, ends, outs, threads, workspace,
                                        epilogue if n == 1 else None)
        else:
            y = conv_depthwise_2d(x, w, b, strides, dilations, begins, outs, threads, workspace,
                                   bare if n == 1 else None)
    elif kn2row_applies(x, w, group, strides, dilations, begins, ends, outs, winograd):
        y = conv_kn2row(x, w, b, dilations, begins, outs, threads, workspace, cache, bare)
        bias_done = applied = True
    elif winograd and winograd_applies(x, w, group, strides, dilations, begins, ends, outs):
        y = conv_winograd_3x3(x, w, b, begins, outs, threads, workspace, cache, bare)
        bias_done = applied = True
    elif group == c and c_g == 1 and m == c:
        y = conv_depthwise_nd(pad_spatial(x, begins, ends), w, strides, dilations, outs)
    else:
        y = im2col_gemm(x, w, b, group=group, strides=strides, dilations=dilations, begins=begins, ends=ends,
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
