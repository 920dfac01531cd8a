"""gpu-compute programs of the conv family: Conv (1-D/2-D, pads/strides/dilations, auto_pad, groups,
bias, fused activation) and ConvTranspose (gather form).

Conv picks the first path that applies:
- depthwise (one input channel per group): a direct kernel, one output per invocation;
- 1x1, no padding, one group: the input reaches a texture (a transfer copy into a linear texture at
  stride 1 with whole-texel planes; else a copy shader into a storage texture, subsampling by the
  stride), then is multiplied by the weight texture (``_pointwise_texture``); without textures, a
  matmul of the weight (C_out, C_in) with each image seen as (C_in, H*W), no copy at all;
- 3x3, stride 1, one group: Winograd F(4x4, 3x3) (ops/conv_winograd_gpu.py, 4x fewer multiply-adds) where the
  output is at least 8x8 and the weights float32, else F(2x2, 3x3) (2.25x);
- one group: im2col into a storage texture (``_im2col_texture``), one row per (channel, tap);
- otherwise implicit GEMM over shifted input copies (``_implicit``) or im2col into a buffer, both
  read by the register-tiled matmul of ``matmul_gpu`` as storage buffers.
lavapipe fetches textures far faster than storage buffers, hence the copies into textures; each
layer's texture comes from a pool shared by the layers (``Recorder.scratch_texture``).
Where a path's scratch (columns, shifted copies, Winograd's V and products) would pass the device's
binding limit (a storage buffer) or texture size (a scratch texture), the path runs in tiles
(``conv_tiles_gpu.cover_tiles``): blocks of whole images, else of output rows of one image (Winograd: rows
of tiles), each tile's scratch filled from X (the rows it needs, halo included) and its products stored into
its part of Y; the scratch is made once, for the largest tile, and reused. Where X or Y itself passes the binding
limit, the convolution runs in tiles one level up (``_conv_operand_tiles``): blocks of whole images binding
windows of X and Y (``Recorder.window``), else output rows of one image whose input rows (with the halo) are
copied into a staging tensor and whose outputs are copied back, each tile a convolution of its own that
picks its path as above.
Weights and bias are read on the host (``host_inputs``; they are initializers in practice) and
repacked once ((C_out, K) rows padded to a multiple of 4); the matmul reads them through a texture
where one fits (``matmul_gpu.const_operand``).
"""

from __future__ import annotations

import copy
import math

import numpy as np

from wgsentis.ops.conv import conv_geometry, conv_transpose_geometry, spatial_attrs
from wgsentis.backends.gpu.dtypes import TooLargeForDevice
from wgsentis.backends.gpu.tensors import GTensor, fits_binding, loop_passes
from wgsentis.backends.gpu.tensors import UDIV_MAX_DIVISOR, udiv_words
from wgsentis.ops.conv_tiles_gpu import Tile, buffer_fits, cover_tiles, largest, pad4, row_granule, texture_fits
from wgsentis.ops.conv_winograd_gpu import conv_winograd
from wgsentis.ops.elementwise_gpu import binary
from wgsentis.ops.matmul_gpu import (MAX_TAPS, Operand, const_operand, device_operand, fused, gemm, host_value,
                                     padded_cols)
from wgsentis.ops.registry import GPU_COMPUTE, register

_ZERO = np.zeros(4, np.float32)  # binds as one vec4 too
# Convolutions copy their input planes (1x1, _pointwise_texture) or im2col columns (_im2col_texture) into a
# texture first, 1x1 stride-1 inputs by a transfer copy into a linear texture rather than a copy shader
# (to_texture.wgsl), unless the program's KernelOptions turn it off (``texture_inputs``, ``linear_inputs``).


def _divisor(d: int) -> list[int | float]:
    """The two uniform words of a size a conv shader divides by (wgsl/common/udiv.wgsl's ``udiv``): sizes are
    uniforms, not override constants, so one pipeline serves every input size. The output sizes divided by stay
    far below udiv's 2^24 (the dispatch grids and texture sizes bound them, as each caller says); past it the
    layer falls back to its CPU kernel rather than divide wrongly."""
    if not 1 <= d <= UDIV_MAX_DIVISOR:
        raise TooLargeForDevice(f"a conv shader's divisor {d} is outside udiv's 1..{UDIV_MAX_DIVISOR}")
    return [*udiv_words(d)]


def _as_2d(x_shape, w_shape, strides, dilations, pads, nd):
    """1-D convolutions as 2-D ones with a unit height."""
    if nd == 2:
        return tuple(x_shape), tuple(w_shape), strides, dilations, pads
    return ((*x_shape[:2], 1, x_shape[2]), (*w_shape[:2], 1, w_shape[2]), [1, strides[0]], [1, dilations[0]],
            [0, pads[0], 0, pads[1]])


def _float_weights(X, W, B) -> tuple[np.ndarray, np.ndarray | None] | None:
    """The host weight and bias of a float32 1-D/2-D (transposed) convolution, or None where the GPU
    programs do not apply (other dtypes or ranks, weights only on the device)."""
    w = host_value(W)
    b = None if B is None else host_value(B)
    if getattr(X, "dtype", None) != np.float32 or w is None or w.dtype != np.float32:
        return None
    if B is not None and (b is None or b.dtype != np.float32):
        return None
    if X.ndim - 2 not in (1, 2) or w.ndim != X.ndim:
        return None
    return w, b


@register("Conv", 1, backend=GPU_COMPUTE, host_inputs=(1, 2))
def conv(rec, layer, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
         pads=None, strides=None, residual=None, **attrs):
    """Conv on the GPU; returns NotImplemented for 3-D and above, or device-only weights.
    ``residual`` (FusedConv): a tensor of the output's shape added before bias and activation; it is
    copied into the output (a memcpy) and every path accumulates onto it."""
    weights = _float_weights(X, W, B)
    if weights is None:
        return NotImplemented
    w, b = weights
    nd = X.ndim - 2
    if kernel_shape is not None and list(kernel_shape) != list(w.shape[2:]):
        return NotImplemented
    group = int(group)
    n, c = X.shape[:2]
    m = w.shape[0]
    if c % group or m % group or w.shape[1] != c // group:
        return NotImplemented
    strides, dilations, pads = spatial_attrs(nd, kernel_shape, strides, dilations, pads)
    begins, _ends, outs = conv_geometry(X.shape[2:], w.shape[2:], strides, dilations, pads, auto_pad)
    _x_shape, _w_shape, st, dl, pd = _as_2d(X.shape, w.shape, strides, dilations, begins + begins, nd)
    acc = residual is not None
    if acc and (not isinstance(residual, GTensor) or residual.alloc is None or residual.dtype != np.float32
                or tuple(residual.shape) != (n, m, *outs)):
        return NotImplemented  # a host constant, a split or broadcast tensor: FusedConv adds it separately
    y = rec.alloc((n, m, *outs), np.float32)
    if y.size == 0:
        return y
    act = fused(layer)
    bias_t = None if b is None else rec.upload(b, f"{layer.name}:B")
    if acc:
        rec.copy(residual, 0, y, 0, y.size)
    limit = rec.ctx.max_binding
    if fits_binding(X, limit) and fits_binding(y, limit):
        done = _conv_paths(rec, layer, X, y, w, b, bias_t, group, st, dl, pd, act, acc)
    else:
        done = _conv_operand_tiles(rec, layer, X, y, w, b, bias_t, group, st, dl, pd, act, acc)
    return y if done else NotImplemented


def _conv_operand_tiles(rec, layer, X, y, w, b, bias_t, group, st, dl, pd, act, acc) -> bool:
    """A convolution whose X or Y passes the binding limit, in tiles (``cover_tiles``): blocks of whole images, else
    blocks of output rows of one image, each tile's part of X (its input rows, halo included) and of Y within the
    limit, each run by ``_conv_paths`` as a convolution of its own (its top padding what lies above its first
    input row). A block of whole images that starts where a binding may binds its windows of X and Y
    (``Recorder.window``); any other tile's X part is copied into a staging tensor (a transfer copy per image,
    or per channel for rows of one image, whose parts of X are strided), and its outputs computed there and
    copied into Y (after the residual is copied in, with ``acc``). Returns False when not even one output row of
    one image fits, or a tile's convolution has no path that takes it."""
    n, c = X.shape[:2]
    m = y.shape[1]
    h, wd = X.shape[2:] if X.ndim == 4 else (1, X.shape[2])
    oh, ow = y.shape[2:] if y.ndim == 4 else (1, y.shape[2])
    span = (w.shape[2] - 1) * dl[0] + 1 if w.ndim == 4 else 1  # input rows one output row reads
    limit = rec.ctx.max_binding // 16 * 16

    def input_rows(row0: int, rows: int) -> tuple[int, int]:
        """The input rows [first, last) output rows row0 .. row0 + rows read (within X)."""
        if rows == oh:
            return 0, h
        top = row0 * st[0] - pd[0]
        return max(0, top), min(h, top + (rows - 1) * st[0] + span)

    def fits(images: int, rows: int) -> bool:
        ih = h if rows == oh else min(h, (rows - 1) * st[0] + span)
        return 4 * images * c * ih * wd <= limit and 4 * images * m * rows * ow <= limit

    tiles = cover_tiles(n, oh, fits)
    if tiles is None:
        return X.ndim == 3 and _conv_column_tiles(rec, layer, X, y, w, b, bias_t, group, st, dl, pd, act, acc)

    def windowed(tile: Tile) -> tuple[bool, bool]:
        """Whether the tile binds windows of X and of Y (whole images starting where a binding may)."""
        if tile.rows != oh:
            return False, False
        return ((4 * tile.image0 * c * h * wd) % rec.window_align == 0,
                (4 * tile.image0 * m * oh * ow) % rec.window_align == 0)

    x_stage = max((t.images * c * (input_rows(t.row0, t.rows)[1] - input_rows(t.row0, t.rows)[0]) * wd
                   for t in tiles if not windowed(t)[0]), default=0)
    y_stage = max((t.images * m * t.rows * ow for t in tiles if not windowed(t)[1]), default=0)
    xs = rec.alloc((x_stage,), np.float32) if x_stage else None  # made once, for the largest tile
    ys = rec.alloc((y_stage,), np.float32) if y_stage else None
    try:
        for tile in tiles:
            rec.begin_tile()
            iy0, iy1 = input_rows(tile.row0, tile.rows)
            ih = iy1 - iy0
            x_shape = (tile.images, c, ih, wd) if X.ndim == 4 else (tile.images, c, wd)
            y_shape = (tile.images, m, tile.rows, ow) if y.ndim == 4 else (tile.images, m, ow)
            x_window, y_window = windowed(tile)
            x_first, y_first = tile.image0 * c * h * wd, tile.image0 * m * oh * ow
            if x_window:
                x_part = rec.window(X, x_first, x_shape)
            else:
                x_part = rec.window(xs, 0, x_shape)
                _copy_planes(rec, X, x_first + iy0 * wd, h * wd, x_part, 0, ih * wd, tile.images * c)
            y_part = rec.window(y, y_first, y_shape) if y_window else rec.window(ys, 0, y_shape)
            y_at = y_first + tile.row0 * ow
            if acc and not y_window:  # the residual (already in Y) is where this tile accumulates
                _copy_planes(rec, y, y_at, oh * ow, y_part, 0, tile.rows * ow, tile.images * m)
            top = pd[0] - tile.row0 * st[0] + iy0  # rows of padding above the tile's first input row
            if not _conv_paths(rec, layer, x_part, y_part, w, b, bias_t, group, st, dl, [top, pd[1], top, pd[1]],
                               act, acc):
                return False
            if not y_window:
                _copy_planes(rec, y_part, 0, tile.rows * ow, y, y_at, oh * ow, tile.images * m)
    finally:
        rec.end_tiles()
    return True


def _conv_column_tiles(rec, layer, X, y, w, b, bias_t, group, st, dl, pd, act, acc) -> bool:
    """A 1-D convolution whose one image (its single row) passes the binding limit across its channels (a minute
    of audio into a 512-channel front end): blocks of output columns of one image, each tile's input columns
    (halo included) copied into a staging tensor per channel, its outputs computed there by ``_conv_paths`` (its
    left padding what lies before its first input column) and copied into Y per channel. Returns False when not
    even one output column fits."""
    n, c, wd = X.shape
    m, ow = y.shape[1:]
    span = (w.shape[2] - 1) * dl[1] + 1  # input columns one output column reads
    limit = rec.ctx.max_binding // 16 * 16

    def input_cols(col0: int, cols: int) -> tuple[int, int]:
        """The input columns [first, last) output columns col0 .. col0 + cols read (within X)."""
        left = col0 * st[1] - pd[1]
        return max(0, left), min(wd, left + (cols - 1) * st[1] + span)

    def fits(cols: int) -> bool:
        return 4 * c * min(wd, (cols - 1) * st[1] + span) <= limit and 4 * m * cols <= limit

    per = largest(fits, ow)
    if per == 0:
        return False
    per = -(-ow // -(-ow // per))  # as many blocks, as even as they go
    xs = rec.alloc((c * min(wd, (per - 1) * st[1] + span),), np.float32)
    ys = rec.alloc((m * per,), np.float32)
    try:
        for image in range(n):
            for col0 in range(0, ow, per):
                rec.begin_tile()
                cols = min(per, ow - col0)
                ix0, ix1 = input_cols(col0, cols)
                x_part = rec.window(xs, 0, (1, c, ix1 - ix0))
                _copy_planes(rec, X, image * c * wd + ix0, wd, x_part, 0, ix1 - ix0, c)
                y_part = rec.window(ys, 0, (1, m, cols))
                y_at = image * m * ow + col0
                if acc:  # the residual (already in Y) is where this tile accumulates
                    _copy_planes(rec, y, y_at, ow, y_part, 0, cols, m)
                left = pd[1] - col0 * st[1] + ix0  # columns of padding before the tile's first input column
                if not _conv_paths(rec, layer, x_part, y_part, w, b, bias_t, group, st, dl, [pd[0], left, pd[0], left],
                                   act, acc):
                    return False
                _copy_planes(rec, y_part, 0, cols, y, y_at, ow, m)
    finally:
        rec.end_tiles()
    return True


def _copy_planes(rec, src, src_at: int, src_plane: int, dst, dst_at: int, dst_plane: int, planes: int) -> None:
    """Copy ``planes`` runs of elements between a tensor and a tile's staging part (a transfer copy each): from
    ``src`` element ``src_at`` on, one run every ``src_plane`` elements, to ``dst`` from ``dst_at``, one every
    ``dst_plane``; each run as long as the shorter stride (the staging side's). Runs of whole planes lie one
    after another: one copy."""
    run = min(src_plane, dst_plane)
    if src_plane == dst_plane:
        rec.copy(src, src_at, dst, dst_at, planes * run)
        return
    for k in range(planes):
        rec.copy(src, src_at + k * src_plane, dst, dst_at + k * dst_plane, run)


def _conv_paths(rec, layer, X, y, w, b, bias_t, group, st, dl, pd, act, acc) -> bool:
    """Record the convolution of X into y (both bound whole: tensors, or a tile's windows or staging parts) by
    the first path that applies (see the module docstring); ``pd`` the top and left padding, twice, and
    ``acc`` whether y holds a residual to accumulate onto. Returns False when none does."""
    n, c = X.shape[:2]
    m = y.shape[1]
    h, wd = X.shape[2:] if X.ndim == 4 else (1, X.shape[2])
    kh, kw = w.shape[2:] if w.ndim == 4 else (1, w.shape[2])
    oh, ow = y.shape[2:] if y.ndim == 4 else (1, y.shape[2])
    p = oh * ow
    cg, mg = c // group, m // group

    if group == c and cg == 1:  # depthwise (channel multiplier mg)
        wt = rec.upload(w, f"{layer.name}:W")
        params = [y.size, m, oh, ow, h, wd, kh, kw, st[0], st[1], pd[0], pd[1], dl[0], dl[1], mg, c,
                  int(b is not None) | (2 if acc else 0), *act[1]]
        ow4 = -(-ow // 4)  # four outputs of a row per invocation
        params[0] = n * m * oh * ow4
        params.append(n * m)  # 20: planes
        # 21, 22: ow4 as udiv's divisor words, not an override constant, so a new width compiles no pipeline. Its one
        # udiv per invocation measured as fast as the constant it replaces on lavapipe, 1.00-1.01x (GPU time,
        # alternating in one process: 3x3 on (1, 64, 112, 112) 7.17 -> 7.21 ms, 5x5 on (1, 256, 48, 30) 9.10 ->
        # 9.20 ms). Numerator s < oh * ow4 <= 64 * the grid's x limit, far below 2^31.
        params += _divisor(ow4)
        limit = rec.ctx.max_workgroups
        grid = (-(-(oh * ow4) // 64), min(n * m, limit), -(-(n * m) // limit))
        bias = bias_t if bias_t is not None else rec.upload(rec.static(_ZERO), "zero")
        rec.dispatch("compute/depthwise.wgsl", [X, wt, bias],
                     [y], params, grid, workgroup=64, subs={"ACT": act[0]},
                     constants={"KH": kh, "KW": kw, "SH": st[0], "SW": st[1], "DH": dl[0], "DW": dl[1], "M": m,
                                "MULT": mg}, loops=loop_passes(kh, kw) + loop_passes(4))
        return True

    k = cg * kh * kw
    kp = pad4(k)
    w_mat = rec.derived(("convW", group), (w,), lambda: _weight_rows(w, group, kp))  # (group, mg, kp)
    y3 = rec.view(y, (n, m, p))
    pointwise = kh == kw == 1 and pd == [0, 0, 0, 0] and group == 1
    if pointwise and _pointwise_texture(rec, layer, X, w_mat, y3, st, (oh, ow), bias_t, act, acc):
        return True
    if pointwise and st == [1, 1] and p % 4 == 0:
        # (C_out, C_in) @ (C_in, H*W) per image: the input is the B operand as it lies.
        a_op = const_operand(rec, w_mat, f"{layer.name}:W")
        _image_gemm(rec, a_op, Operand(X, p, 1, [c * p]), y3, c, bias_t, act, acc)
        return True
    if conv_winograd(rec, layer, X, w, b, bias_t, y, group, (kh, kw), (oh, ow), st, dl, pd, act, acc):
        return True
    if group == 1 and _im2col_texture(rec, layer, X, w_mat, y3, k, kp, (h, wd), (kh, kw), (oh, ow), st, dl, pd,
                                      bias_t, act, acc):
        return True
    if _implicit(rec, layer, X, w, b, bias_t, y3, group, (h, wd), (kh, kw), (oh, ow), st, dl, pd, act, acc):
        return True
    return _im2col(rec, layer, X, w_mat, b, bias_t, y3, group, k, kp, (h, wd), (kh, kw), (oh, ow), st, dl, pd, act,
                   acc)


def _im2col(rec, layer, X, w_mat, b, bias_t, y3, group, k, kp, hw, ksize, outs, st, dl, pd, act, acc=False) -> bool:
    """im2col into a buffer (im2col.wgsl, per group and tile (n, Kp, Pp) columns) and the matmul of each
    group's weight rows with them. Returns False when not even one output row fits a buffer."""
    n, c = X.shape[:2]
    m = y3.shape[1]
    cg, mg = c // group, m // group
    oh, ow = outs
    p = oh * ow
    tiles = cover_tiles(n, oh, lambda images, rows: buffer_fits(rec, images * kp * pad4(rows * ow)), row_granule(ow))
    if tiles is None:
        return False
    cols = rec.alloc((max(t.images * kp * pad4(t.rows * ow) for t in tiles),), np.float32)
    for g in range(group):
        a_op = const_operand(rec, _group_rows(rec, w_mat, g), f"{layer.name}:W[{g}]")
        bias_g = _group_bias(rec, layer, b, bias_t, g, group)
        for tile in tiles:
            tp = tile.rows * ow
            pp = pad4(tp)
            rows = tile.images * kp * tile.rows
            params = [rows, kp, pp, k, tp, c, hw[0], hw[1], ksize[0], ksize[1], st[0], st[1], pd[0], pd[1], dl[0],
                      dl[1], ow, g * cg, tile.rows, tile.row0, tile.image0]
            # Its padding-column loop and both row loops (a zero row or a copied one) run in every invocation batch.
            rec.dispatch("compute/im2col.wgsl", [X], [cols], params, rows, workgroup=64,
                         loops=loop_passes(pp - tp) + 2 * loop_passes(ow))
            # Output rows of group g start at channel g*mg: offset Y through the column offset.
            gemm(rec, a_op, Operand(cols, pp, 1, [kp * pp]), y3, mg, tp, kp, y_row=p,
                 y_col0=_tile_col0(tile, m, p, ow) + g * mg * p, y_batch=[m * p], batch_shape=[tile.images],
                 bias=bias_g, bias_strides=(1, 0), act=act, accumulate=acc)
    return True


def _tile_col0(tile: Tile, m: int, p: int, ow: int) -> int:
    """The element index in Y (N, M, P) of ``tile``'s first output in channel 0."""
    return tile.image0 * m * p + tile.row0 * ow


def _group_bias(rec, layer, b, bias_t, g: int, group: int):
    """The bias of group ``g``'s output channels (all of it with one group)."""
    if b is None or group == 1:
        return bias_t
    mg = b.shape[0] // group
    return rec.upload(rec.derived(("convB", g, group), (b,), lambda: b[g * mg:(g + 1) * mg]), f"{layer.name}:B[{g}]")


@register("FusedConv", 1, backend=GPU_COMPUTE, host_inputs=(1, 2))
def fused_conv(rec, layer, X, W, B=None, Z=None, **attrs):
    """FusedConv (passes.fuse.FuseResidualAdd): act(Conv(X, W, B) + Z). Z of the output's shape rides in
    the convolution's epilogue; a broadcast Z takes a separate add."""
    if Z is None:
        return NotImplemented
    y = conv(rec, layer, X, W, B, residual=Z, **attrs)
    if y is not NotImplemented:
        return y
    plain = copy.copy(layer)
    plain.fused_activation = None
    y = conv(rec, plain, X, W, B, **attrs)
    if y is NotImplemented or getattr(Z, "dtype", None) != np.float32:
        return NotImplemented
    return binary(rec, y, Z, "a + b", np.float32, layer.name, fused(layer))


def _pointwise_texture(rec, layer, X, w_mat, y3, st, outs, bias_t, act, acc=False) -> bool:
    """A 1x1 convolution (any stride, one group) with both operands as textures: the input planes
    (subsampled by the stride) are copied into a storage texture (to_texture.wgsl), one plane per row,
    and multiplied by the weight texture. Returns False when textures do not apply or fit."""
    n, c = X.shape[:2]
    h, wd = X.shape[2:] if X.ndim == 4 else (1, X.shape[2])
    oh, ow = outs
    p = oh * ow
    if not rec.program.kernels.texture_inputs:
        return False
    a_op = const_operand(rec, w_mat, f"{layer.name}:W")
    if a_op.tex is None:
        return False
    if rec.program.kernels.linear_inputs and st == [1, 1] and p % 4 == 0 and p == h * wd:
        # The planes lie in the buffer as the matmul reads them: a transfer copy into a linear texture.
        x_tex = rec.scratch_texture(n * c, p, "conv input (linear)") if texture_fits(rec, n * c * p) else None
        if x_tex is None:
            return False
        rec.copy_to_texture(X, x_tex)
        _image_gemm(rec, a_op, Operand.of_linear_texture(x_tex, p, [c * p]), y3, c, bias_t, act, acc)
        return True
    x_tex = rec.scratch_texture(n * c, 4 * -(-p // 4), "conv input planes (linear)") \
        if texture_fits(rec, n * c * 4 * -(-p // 4)) and ow <= UDIV_MAX_DIVISOR else None  # (udiv's range)
    if x_tex is None:
        return False
    width = -(-p // 4)
    rows = n * c
    limit = rec.ctx.max_workgroups
    grid = (-(-width // 128), min(rows, limit), -(-rows // limit))  # two texels per invocation
    # The strides as override constants (the layer's structure); ow in uniforms (9, 10: udiv's divisor words), so a
    # new input size compiles no pipeline. Two texels per invocation share the udiv: 0.87-1.01x the shader with ow
    # baked in on lavapipe (GPU time, alternating in one process: 1x1 stride 2 on (1, 64, 112, 112) 0.65 -> 0.65
    # ms, 1x1 on (1, 96, 57, 57) 0.77 -> 0.68 ms); a udiv per texel measured 1.05-1.13x. Numerator 4 * texel <
    # 4 * 128 * the grid's x limit, far below 2^31.
    rec.dispatch("compute/to_texture.wgsl", [X], [], [rows * width, width, p, ow, h * wd, wd, st[0], st[1], rows,
                                                       *_divisor(ow)],
                 grid, workgroup=64, textures=[x_tex], constants={"SH": st[0], "SW": st[1]})
    _image_gemm(rec, a_op, _texture_rows(x_tex, c, p), y3, c, bias_t, act, acc)
    return True


def _im2col_texture(rec, layer, X, w_mat, y3, k, kp, hw, ksize, outs, st, dl, pd, bias_t, act, acc=False) -> bool:
    """One-group convolution as im2col into a storage texture (im2col_tex.wgsl, rows n * Kp + kk, one
    column per output pixel) and the matmul with both operands as textures, tile by tile where the columns
    would pass the texture's size. Returns False when textures do not apply or fit."""
    if not rec.program.kernels.texture_inputs:
        return False
    n = X.shape[0]
    oh, ow = outs
    a_op = const_operand(rec, w_mat, f"{layer.name}:W")
    if a_op.tex is None:
        return False
    limit = rec.ctx.max_workgroups
    if kp > limit or ow > UDIV_MAX_DIVISOR:  # (past udiv's range, below: the next path)
        return False

    def fits(images: int, rows: int) -> bool:
        width = -(-rows * ow // 4)
        return texture_fits(rec, images * kp * 4 * width) and images <= limit and -(-width // 64) <= limit

    tiles = cover_tiles(n, oh, fits, row_granule(ow))
    if tiles is None:
        return False
    cols = rec.scratch_texture(max(t.images * kp for t in tiles), 4 * -(-max(t.rows for t in tiles) * ow // 4),
                               "conv columns (linear)")
    if cols is None:
        return False
    # The kernel geometry as override constants (the layer's structure); ow in uniforms (20, 21: udiv's divisor
    # words), so a new input size compiles no pipeline. Two texels per invocation share the udiv: 0.94-0.95x the
    # shader with ow baked in on lavapipe (GPU time of the columns, alternating in one process: 3x3 stride 2 on
    # (1, 32, 112, 112) 2.10 -> 2.00 ms, 5x5 on (1, 16, 60, 60) 3.23 -> 3.00 ms; with the matmul 0.97-0.98x); a
    # udiv per texel measured 1.07x. Numerator 4 * texel < 4 * 64 * the grid's x limit (``fits``), far below 2^31.
    constants = {"KH": ksize[0], "KW": ksize[1], "SH": st[0], "SW": st[1], "DH": dl[0], "DW": dl[1]}
    ow_words = _divisor(ow)
    for tile in tiles:
        tp = tile.rows * ow
        width = -(-tp // 4)
        params = [width, width, kp, k, tp, X.shape[1], hw[0], hw[1], ksize[0], ksize[1], st[0], st[1], pd[0], pd[1],
                  dl[0], dl[1], ow, 0, tile.row0, tile.image0, *ow_words]
        rec.dispatch("compute/im2col_tex.wgsl", [X], [], params, (-(-width // 128), kp, tile.images), workgroup=64,
                     textures=[cols], constants=constants)
        _image_gemm(rec, a_op, _texture_rows(cols, kp, tp), y3, kp, bias_t, act, acc, tile, ow)
    return True


def _texture_rows(tex, k: int, p: int) -> Operand:
    """The B operand held in ``k`` rows per image of a linear texture a layer program wrote, one row of P
    columns (padded to whole texels) each."""
    row = 4 * -(-p // 4)
    return Operand.of_linear_texture(tex, row, [k * row])


def _image_gemm(rec, a_op, b_op, y3, k: int, bias_t, act, acc=False, tile: Tile | None = None, ow: int = 0) -> None:
    """Y (N, C_out, P) = act(W @ B + bias [+ Y]) per image: the weight rows ``a_op`` times the K rows
    of image n in ``b_op``. With ``tile`` (output rows of ``ow`` pixels), only its images and rows, which
    ``b_op`` holds from the tile's first image and output pixel on."""
    n, m, p = y3.shape
    cols, col0 = p, 0
    if tile is not None:
        n, cols, col0 = tile.images, tile.rows * ow, _tile_col0(tile, m, p, ow)
    gemm(rec, a_op, b_op, y3, m, cols, k, y_row=p, y_col0=col0, y_batch=[m * p], batch_shape=[n], bias=bias_t,
         bias_strides=(1, 0), act=act, accumulate=acc)


def _implicit(rec, layer, X, w, b, bias_t, y3, group, hw, ksize, outs, st, dl, pd, act, acc=False) -> bool:
    """Implicit GEMM: shifted copies of the input (conv_shift.wgsl), then one matmul with a K loop per
    kernel tap whose B rows are contiguous vec4 runs of a copy; tile by tile (each tile's copies hold its
    output rows and the rows below them its taps reach) where the copies would pass the binding limit.
    Returns False when it does not apply."""
    n, c = X.shape[:2]
    m = w.shape[0]
    cg, mg = c // group, m // group
    kh, kw = ksize
    oh, ow = outs
    taps = kh * kw
    phases = sorted({(ky * dl[0]) % st[0] for ky in range(kh)})
    copies = len(phases) * kw
    if taps > MAX_TAPS or copies > 50:
        return False
    cg4 = pad4(cg)
    wp = pad4(ow)
    halo = max((ky * dl[0]) // st[0] for ky in range(kh))  # copy rows a tile reads below its last output row
    tiles = cover_tiles(n, oh, lambda images, rows: buffer_fits(rec, images * copies * cg4 * (rows + halo) * wp))
    if tiles is None or cg4 * wp == 0:
        return False
    # Weights as (group, mg, taps * cg4) rows, k = tap * cg4 + c (tap-major), zero for c >= cg.
    w_mat = rec.derived(("convT", group), (w,), lambda: _tap_rows(w, group, cg4))
    copy_words = []
    for a in phases:
        for kx in range(kw):
            copy_words += [a, kx * dl[1] - pd[1]]
    xs = rec.alloc((max(t.images * copies * cg4 * (t.rows + halo) * wp for t in tiles),), np.float32)
    p = oh * ow
    for g in range(group):
        a_op = const_operand(rec, _group_rows(rec, w_mat, g), f"{layer.name}:WT[{g}]")
        bias_g = _group_bias(rec, layer, b, bias_t, g, group)
        for tile in tiles:
            hp = tile.rows + halo
            plane = hp * wp
            offsets = []
            for ky in range(kh):
                j0 = phases.index((ky * dl[0]) % st[0]) * kw
                for kx in range(kw):
                    offsets.append(((j0 + kx) * cg4 * hp + (ky * dl[0]) // st[0]) * wp // 4)
            rows = tile.images * copies * cg4 * hp
            params = [rows, wp // 4, hp, cg4, copies, c, g * cg, cg, hw[0], hw[1], st[0], st[1], ow, pd[0],
                      tile.row0, tile.image0, *copy_words]
            rec.dispatch("compute/conv_shift.wgsl", [X], [xs], params, rows, workgroup=64,
                         loops=loop_passes(wp // 4))
            gemm(rec, a_op, Operand(xs, plane, 1, [copies * cg4 * plane]), y3, mg, tile.rows * wp, cg4, y_row=p,
                 y_col0=_tile_col0(tile, m, p, ow) + g * mg * p, y_batch=[m * p], batch_shape=[tile.images],
                 bias=bias_g, bias_strides=(1, 0), act=act, taps=offsets, col_map=(wp, ow), accumulate=acc)
    return True


def _tap_rows(w: np.ndarray, group: int, cg4: int) -> np.ndarray:
    """(C_out, C_in/group, *kernel) -> (group, C_out/group, taps*cg4), tap-major, channels zero-padded."""
    m, cg = w.shape[:2]
    taps = math.prod(w.shape[2:])
    out = np.zeros((group, m // group, taps, cg4), np.float32)
    out[..., :cg] = w.reshape(group, m // group, cg, taps).transpose(0, 1, 3, 2)
    return out.reshape(group, m // group, taps * cg4)


def _weight_rows(w: np.ndarray, group: int, kp: int) -> np.ndarray:
    """(C_out, C_in/group, kh, kw) -> (group, C_out/group, kp) rows, zero-padded past K."""
    m = w.shape[0]
    k = math.prod(w.shape[1:])
    out = np.zeros((group, m // group, kp), np.float32)
    out[:, :, :k] = w.reshape(group, m // group, k)
    return out


def _group_rows(rec, w_mat: np.ndarray, g: int) -> np.ndarray:
    """The (C_out/group, K) weight rows of group ``g`` (kept alive, so its upload stays cached)."""
    return rec.derived(("group", g), (w_mat,), lambda: w_mat[g])


@register("ConvTranspose", 1, backend=GPU_COMPUTE, host_inputs=(1, 2))
def conv_transpose(rec, layer, X, W, B=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                   output_padding=None, output_shape=None, pads=None, strides=None, **attrs):
    """ConvTranspose (1-D/2-D): with one group, the product of the weight and the image, then a gather of
    the products per output pixel, a block of images at a time where the products of all would pass the
    binding limit; with groups, or where one image's products would, a direct gather kernel."""
    weights = _float_weights(X, W, B)
    if weights is None:
        return NotImplemented
    w, b = weights
    nd = X.ndim - 2
    group = int(group)
    n, c = X.shape[:2]
    if c % group or w.shape[0] != c:
        return NotImplemented
    mg = w.shape[1]
    m = mg * group
    strides, dilations, pads = spatial_attrs(nd, kernel_shape, strides, dilations, pads)
    output_padding = [int(v) for v in output_padding] if output_padding else [0] * nd
    output_padding = output_padding[-nd:] if len(output_padding) >= nd else output_padding + [0] * nd
    begins, outs = conv_transpose_geometry(X.shape[2:], w.shape[2:], strides, dilations, pads, auto_pad,
                                           output_padding, output_shape)
    x_shape, w_shape, st, dl, pd = _as_2d(X.shape, w.shape, strides, dilations, list(begins) * 2, nd)
    h, wd = x_shape[2:]
    kh, kw = w_shape[2:]
    oh, ow = (1, outs[0]) if nd == 1 else outs
    y = rec.alloc((n, m, *outs), np.float32)
    if y.size == 0:
        return y
    act = fused(layer)
    bias_t = rec.upload(b if b is not None else _ZERO, f"{layer.name}:B")
    taps = kh * kw
    plane = h * wd
    # Blocks of whole images whose products fit a buffer (each block's images copied out of X first).
    tiles = cover_tiles(n, 1, lambda images, _rows: buffer_fits(rec, images * m * taps * plane)
                   and (images == n or buffer_fits(rec, images * c * plane)))
    # (The product path binds Y whole, and X whole unless its images are copied out in blocks.)
    # (The gather's grid holds an output plane in x, four outputs per invocation, and it divides by ceil(ow / 4)
    # and M through udiv: within the grid and udiv's range, or the direct kernel.)
    ow4 = -(-ow // 4)
    limit = rec.ctx.max_workgroups
    if group == 1 and tiles is not None and fits_binding(y, rec.ctx.max_binding) and \
            (len(tiles) > 1 or fits_binding(X, rec.ctx.max_binding)) and -(-(oh * ow4) // 64) <= limit and \
            max(ow4, m) <= UDIV_MAX_DIVISOR:
        # The channel sums as one product, (M * kh * kw, C) @ (C, H * W) per image, then a gather of
        # at most ceil(kh / sh) * ceil(kw / sw) products per output pixel (conv_transpose_cols.wgsl).
        w_rows = rec.derived(("convTW",), (w,), lambda: padded_cols(w.reshape(c, m * taps).T.astype(np.float32)))
        a_op = const_operand(rec, w_rows, f"{layer.name}:W")
        most = max(t.images for t in tiles)
        cols = rec.alloc((most * m * taps * plane,), np.float32)
        x_block = X if len(tiles) == 1 else rec.alloc((most * c * plane,), np.float32)  # (images, C, H * W)
        b_op = None
        for tile in tiles:
            if x_block is not X:
                rec.copy(X, tile.image0 * c * plane, x_block, 0, tile.images * c * plane)
            if b_op is None:
                b_op = device_operand(rec, x_block, plane, [c * plane], f"{layer.name}:X")
            elif b_op.tex is not None:  # read through a texture device_operand filled: refill it
                rec.copy_to_texture(x_block, b_op.tex)
            gemm(rec, a_op, b_op, cols, m * taps, plane, c, y_row=plane, y_batch=[m * taps * plane],
                 batch_shape=[tile.images], final=False)
            planes = tile.images * m
            grid = (-(-(oh * ow4) // 64), min(planes, limit), -(-planes // limit))
            # The kernel and strides as override constants (the layer's structure); ceil(ow / 4) and M in uniforms
            # (19..22: udiv's divisor words), so a new input size compiles no pipeline. Four outputs of a row per
            # invocation share the row's tap tests and the divisions: 0.53-0.69x the shader with one output per
            # invocation and oh, ow baked in on lavapipe (GPU time, alternating in one process: 2x2 stride 2 from
            # (1, 64, 56, 56) to 32 channels 3.67 -> 1.89 ms, 3x3 stride 2 from (1, 32, 56, 56) to 16 channels 2.66
            # -> 1.82 ms; with the product 0.74-0.83x); one output per invocation with two udivs measured 1.10-1.18x.
            # Numerators below oh * ow4 (the grid's x) and the planes, far below 2^31.
            rec.dispatch("compute/conv_transpose_cols.wgsl", [cols, bias_t], [y],
                         [planes, m, oh, ow, h, wd, kh, kw, st[0], st[1], pd[0], pd[1], dl[0], dl[1],
                          int(b is not None), *act[1], tile.image0 * m * oh * ow, *_divisor(ow4), *_divisor(m)],
                         grid, workgroup=64, subs={"ACT": act[0]},
                         constants={"KH": kh, "KW": kw, "SH": st[0], "SW": st[1]},
                         loops=loop_passes(kh, kw) + loop_passes(4))
        return y
    if not fits_binding(X, rec.ctx.max_binding):
        return NotImplemented  # every output block may read any input pixel
    wt = rec.upload(w, f"{layer.name}:W")
    params = [y.size, m, oh, ow, h, wd, kh, kw, st[0], st[1], pd[0], pd[1], dl[0], dl[1], c, c // group, mg,
              int(b is not None), *act[1], 0]
    # An output past the binding limit: blocks of output elements, each binding its window of Y.
    for first, count in rec.element_blocks(y.size, [y]):
        params[0], params[-1] = count, first
        rec.dispatch("compute/conv_transpose.wgsl", [X, wt, bias_t],
                     [y if count == y.size else rec.window(y, first, (count,))], params, count, workgroup=64,
                     subs={"ACT": act[0]}, loops=loop_passes(kh, kw, c // group))
    return y


__all__ = ["conv", "conv_transpose"]
