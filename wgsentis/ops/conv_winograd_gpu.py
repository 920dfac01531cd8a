"""gpu-compute Winograd convolutions for 3x3 stride-1 layers of one group: F(2x2, 3x3) by default, F(4x4, 3x3)
where the worker allows it (``Worker(fast_winograd=True)``); ops/conv_gpu.py's paths try ``conv_winograd`` before
im2col. The input tiles are transformed into V (a scratch texture where one holds a row of tiles, else a buffer),
multiplied by the transformed weights U in batched products and folded back with bias, residual and activation,
block by block of tiles where the scratch would pass the device's limits (ops/conv_tiles_gpu.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wgsentis.backends.gpu.shader_gen import winograd_v_binding
from wgsentis.backends.gpu.tensors import UDIV_MAX_DIVISOR, udiv_words
from wgsentis.ops.conv_tiles_gpu import Tile, buffer_fits, cover_tiles, pad4, texture_fits
from wgsentis.ops.matmul_gpu import Operand, const_operand, gemm

_ZERO = np.zeros(4, np.float32)  # binds as one vec4 too


# F(2x2, 3x3) transform matrices (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks").
_WINO_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
WINOGRAD_MIN_CHANNELS = 8  # below this the transforms cost more than the products they save
# F(4x4, 3x3) transform matrices (same source): 4x fewer multiply-adds than direct, and its transformed
# input is 2.25x the input where F(2x2)'s is 4x. Taken where the output is at least this many pixels on
# both sides (smaller planes waste much of their 4x4 tiles), with float32 weights; F(2x2, 3x3) otherwise.
_WINO4_G = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
                     [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])
WINOGRAD4_MIN_SIDE = 8


@dataclass(frozen=True)
class _WinogradForm:
    """What tells F(2x2, 3x3) and F(4x4, 3x3) apart once their weights are transformed."""

    shader: str  # compute/<shader>_in.wgsl and compute/<shader>_out.wgsl
    side: int  # output tile side
    xi: int  # elements of a transformed tile: the number of batched products


# Both forms hold a texture V in buffer order (a linear texture, gpu_compute.LINEAR_TEXELS texels a row).
_F2X2 = _WinogradForm("winograd", 2, 16)
_F4X4 = _WinogradForm("winograd4", 4, 36)


def conv_winograd(rec, layer, X, w, b, bias_t, y, group, ksize, outs, st, dl, pd, act, acc=False) -> bool:
    """Winograd for 3x3 stride-1 convolutions: F(4x4, 3x3) where the output is at least
    WINOGRAD4_MIN_SIDE on both sides and the weights float32 (``_winograd4``), else F(2x2, 3x3), 2.25x
    fewer multiply-adds than direct, with V (16, Cp, T) in a 2-D texture where one holds a row of tiles
    (lavapipe fetches textures far faster than buffers). Returns False when it does not apply."""
    c = X.shape[1]
    m = w.shape[0]
    if ksize != (3, 3) or st != [1, 1] or dl != [1, 1] or group != 1 or c < WINOGRAD_MIN_CHANNELS:
        return False
    oh, ow = outs
    # F(4x4) only where the worker allows it (Worker(fast_winograd=True)): its transforms (entries up to 8) give
    # 4-7x the rounding error of a direct sum (F(2x2): 0.6-1.0x, measured on 64-128 channel layers), which a
    # quantized model's re-quantizations amplify into flipped codes. Half-precision weights keep F(2x2) too.
    if rec.program.fast_winograd and min(oh, ow) >= WINOGRAD4_MIN_SIDE and not rec.half_weights and \
            _winograd4(rec, layer, X, w, b, bias_t, y, outs, pd, act, acc):
        return True
    plan = _winograd_tiles(rec, X, m, outs, _F2X2)
    if plan is None:
        return False
    cp = pad4(c)
    u = rec.derived(("winograd",), (w,), lambda: _winograd_weights(w, cp))  # (16, C_out, Cp)
    a_op = const_operand(rec, u, f"{layer.name}:WU", batch=[m * cp])
    _winograd_record(rec, _F2X2, X, y, a_op, outs, pd, plan, b is not None, bias_t, act, acc)
    return True


def _winograd4(rec, layer, X, w, b, bias_t, y, outs, pd, act, acc=False) -> bool:
    """Winograd F(4x4, 3x3): 6x6 input tiles stepping by 4, V (36, Cp, T) held in buffer order in a linear
    texture (36 * Cp rows would pass the texture height limit). Returns False when it does not fit
    (F(2x2) is tried next)."""
    m = w.shape[0]
    plan = _winograd_tiles(rec, X, m, outs, _F4X4)
    if plan is None:
        return False
    cp = pad4(X.shape[1])
    u = rec.derived(("winograd4",), (w,), lambda: _winograd_weights(w, cp, _WINO4_G))  # (36, C_out, Cp)
    a_op = const_operand(rec, u, f"{layer.name}:WU4", batch=[m * cp])
    if rec.program.kernels.texture_operands and a_op.tex is None:
        return False  # 36 * C_out rows past the texture limit: from a buffer, U would cost more than it saves
    _winograd_record(rec, _F4X4, X, y, a_op, outs, pd, plan, b is not None, bias_t, act, acc)
    return True


def _winograd_tiles(rec, X, m: int, outs, form: _WinogradForm) -> tuple[list[Tile], bool] | None:
    """The blocks of tiles (``Tile`` rows are rows of output tiles) whose V and products (a buffer) fit the
    device, and whether V is held in a scratch texture (where textures are on and one holds a row of tiles;
    else in a buffer); None when not even one row of tiles fits."""
    n, c = X.shape[:2]
    cp = pad4(c)
    th, tw = -(-outs[0] // form.side), -(-outs[1] // form.side)
    # The transforms divide through udiv (winograd_tiles.wgsl), exact for numerators below 2^31 and divisors up to
    # 2^24: a block's V (xi * Cp * tp floats, Cp >= 8) fits a binding or texture of at most 2^30 floats, so tp
    # and with it every divisor (tw, th, tp / 4) stays within 2^23, and the numerators (invocations, Cp * tp / 4
    # and M * tp / 4 texels of V and the products; tiles) within 2^28. The check is for the grid alone.
    if max(tw, th) > UDIV_MAX_DIVISOR:
        return None
    for v_fits in (texture_fits, buffer_fits) if rec.program.kernels.texture_operands else (buffer_fits,):
        def fits(images: int, rows: int, v_fits=v_fits) -> bool:
            tp = pad4(images * rows * tw)
            return v_fits(rec, form.xi * cp * tp) and buffer_fits(rec, form.xi * m * tp)

        tiles = cover_tiles(n, th, fits)
        if tiles is not None:
            return tiles, v_fits is texture_fits
    return None


def _winograd_record(rec, form: _WinogradForm, X, y, a_op, outs, pd, plan: tuple[list[Tile], bool], has_bias,
                     bias_t, act, acc) -> None:
    """Record a Winograd convolution, block by block of tiles (``plan``: ``_winograd_tiles``): the input tiles
    transformed into V (a scratch texture, or a buffer), ``form.xi`` batched products with the transformed
    weights U (``a_op``), and the outputs folded back with bias, the residual (``acc``) and the activation.
    V and the products are made once, for the largest block."""
    tiles, v_in_texture = plan
    c, h, wd = X.shape[1:]
    m = y.shape[1]
    oh, ow = outs
    tw = -(-ow // form.side)
    cp = pad4(c)
    tp_most = max(pad4(t.images * t.rows * tw) for t in tiles)
    v_tex = rec.scratch_texture(form.xi * cp, tp_most, f"{form.shader} V (linear)") if v_in_texture else None
    v = None if v_tex is not None else rec.alloc((form.xi * cp * tp_most,), np.float32)
    prod = rec.alloc((form.xi * m * tp_most,), np.float32)
    bias = bias_t if bias_t is not None else rec.upload(rec.static(_ZERO), "zero")
    for tile in tiles:
        th = tile.rows
        count = tile.images * th * tw  # tiles in this block
        tp = pad4(count)
        # The tile grid in uniform words, udiv's divisor words (winograd_tiles.wgsl), not override constants: a new
        # image size compiles no pipeline. GPU time vs the grid as constants on lavapipe (64->64 channels at 56x56,
        # median paired ratios alternating in one process, 12-20 rounds): the input transforms, three udivs for four
        # tiles, 0.99-1.03x (F(2x2)) and 1.00-1.01x (F(4x4); 1.04-1.09x between alternating processes, noisier);
        # the output transforms, four tiles an invocation read as vec4s (one tile an invocation paid 1.14x and
        # 1.06x for its udivs), 0.71-0.79x and 0.61-0.74x; the whole layer 0.96x and 1.00x.
        grid = [*udiv_words(tw), *udiv_words(th)]
        params = [cp * tp // 4, count, tw, th, c, h, wd, pd[0], pd[1], cp, tp, tile.image0, tile.row0, *grid,
                  *udiv_words(tp // 4)]
        if v_tex is not None:
            rec.dispatch(f"compute/{form.shader}_in.wgsl", [X], [], params, cp * tp // 4, workgroup=64,
                         textures=[v_tex], subs=winograd_v_binding(texture=True))
            b_op = Operand.of_linear_texture(v_tex, tp, [cp * tp])
        else:
            rec.dispatch(f"compute/{form.shader}_in.wgsl", [X], [v], params, cp * tp // 4, workgroup=64,
                         subs=winograd_v_binding(texture=False))
            b_op = Operand(v, tp, 1, [cp * tp])
        gemm(rec, a_op, b_op, prod, m, count, cp, y_row=tp, y_batch=[m * tp], batch_shape=[form.xi], final=False)
        rec.dispatch(f"compute/{form.shader}_out.wgsl", [prod, bias], [y],
                     [m * tp // 4, count, tw, th, m, oh, ow, tp, int(has_bias) | (2 if acc else 0), *act[1],
                      tile.image0, tile.row0, *grid, *udiv_words(tp // 4)], m * tp // 4,
                     workgroup=64, subs={"ACT": act[0]})


def _winograd_weights(w: np.ndarray, cp: int, g_matrix: np.ndarray = _WINO_G) -> np.ndarray:
    """(C_out, C_in, 3, 3) -> U = G g G^T as (s*s, C_out, Cp) for G (s, 3), xi = s * row + column, zero
    past C_in."""
    m, c = w.shape[:2]
    side = g_matrix.shape[0]
    u = np.einsum("ai,mcij,bj->abmc", g_matrix, w.astype(np.float64), g_matrix).reshape(side * side, m, c)
    out = np.zeros((side * side, m, cp), np.float32)
    out[..., :c] = u
    return out
