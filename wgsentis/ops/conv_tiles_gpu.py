"""Tiles of a gpu-compute convolution: where a path's scratch (columns, shifted copies, Winograd's V and products)
would pass the device's binding limit or texture size, the path runs block by block (``cover_tiles``): blocks of
whole images, else of output rows of one image. What the conv paths (ops/conv_gpu.py, ops/conv_winograd_gpu.py)
share to size them."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from wgsentis.backends.gpu.tensors import LINEAR_TEXELS, aligned


def pad4(v: int) -> int:
    return -(-v // 4) * 4


@dataclass(frozen=True)
class Tile:
    """A block of a convolution's output that one pass of a path computes: ``images`` images from
    ``image0``, ``rows`` output rows (Winograd: rows of output tiles) from ``row0``."""

    image0: int
    images: int
    row0: int
    rows: int


def largest(fits: Callable[[int], bool], top: int) -> int:
    """The largest v in [1, top] with fits(v) (fits shrinks as v grows), 0 when not even 1 fits."""
    lo, hi = 0, top
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def cover_tiles(n: int, rows: int, fits: Callable[[int, int], bool], granule: int = 1) -> list[Tile] | None:
    """The fewest tiles covering ``n`` images of ``rows`` output rows whose scratch fits (``fits(images,
    rows)``): the whole output where it fits, else blocks of whole images, else blocks of rows of one image
    (a multiple of ``granule`` rows, where possible, so that each block starts where Y's vec4 stores stay
    aligned). Blocks are balanced (the last is not a sliver). None when not even one row of one image fits."""
    if fits(n, rows):
        return [Tile(0, n, 0, rows)]
    if fits(1, rows):
        per = largest(lambda k: fits(k, rows), n)
        per = -(-n // -(-n // per))  # as many blocks, as even as they go
        return [Tile(i, min(per, n - i), 0, rows) for i in range(0, n, per)]
    per = largest(lambda r: fits(1, r), rows)
    if per == 0:
        return None
    step = granule if per >= granule else 1
    per = per // step * step
    even = -(-rows // -(-rows // per))  # as many blocks, as even as they go
    per = min(per, -(-even // step) * step)
    return [Tile(i, 1, r, min(per, rows - r)) for i in range(n) for r in range(0, rows, per)]


def buffer_fits(rec, floats: int) -> bool:
    """Whether a float32 scratch buffer of ``floats`` can be made and bound whole on this device."""
    return aligned(4 * floats) <= min(rec.ctx.max_binding, rec.ctx.max_buffer)


def texture_fits(rec, floats: int) -> bool:
    """Whether a linear scratch texture (``Recorder.scratch_texture``, LINEAR_TEXELS texels a row) of ``floats``
    fits this device."""
    side = int(rec.ctx.limits.get("max-texture-dimension-2d", 8192))
    return LINEAR_TEXELS <= side and -(-floats // (4 * LINEAR_TEXELS)) <= side


def row_granule(ow: int) -> int:
    """Output rows per tile step that keep a tile's first output a multiple of four elements into its plane."""
    return 4 // math.gcd(ow, 4)
