"""How the gpu-pixel backend lays a tensor out in a texture.

A tensor is one 2-D texture of four-lane texels: ``rgba32float`` for float32, ``rgba32sint`` for int32, int64
within the int32 range and bool. One axis is *blocked*: its elements go four to a texel (the last block padded
with zeros), and the tensor's other axes, with the blocked axis replaced by its block count, are folded
row-major into a linear texel index ``t``. The texture is ``width`` texels wide, a power of two, so a shader
finds texel ``t`` at ``(t & (width - 1), t >> log2(width))`` with a mask and a shift (Sentis' TextureTensorData
packs the same way; TF.js packs 2x2). Each op states which axis it wants blocked; where producer and consumer
disagree a layout switch converts, and where the layouts coincide it is a view.

``TextureLayout.pack`` gives the texels to upload and ``unpack`` reads them back from a buffer whose rows are
padded to 256 bytes, as ``copy_texture_to_buffer`` writes them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from wgsentis.errors import DeviceError

LANES = 4
ROW_ALIGN = 256  # bytes per row of a texture-to-buffer copy must be a multiple of this
_I32_MIN, _I32_MAX = -(2**31), 2**31 - 1
FORMATS = {"f32": "rgba32float", "i32": "rgba32sint"}


def texel_kind(dtype: np.dtype) -> str | None:
    """"f32" or "i32": how a dtype's elements sit in texel lanes; None when it cannot live in a texture."""
    dtype = np.dtype(dtype)
    if dtype in (np.dtype(np.float32), np.dtype(np.float16)):  # float16 widened (see backends/gpu/dtypes.py)
        return "f32"
    if dtype in (np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.bool_), np.dtype(np.int8), np.dtype(np.uint8),
                 np.dtype(np.int16), np.dtype(np.uint16)):
        return "i32"
    return None


@dataclass(frozen=True)
class TextureLayout:
    """A tensor's place in a texture: ``shape`` with ``axis`` blocked four to a texel, ``texels`` in all,
    ``width`` x ``height`` texels (width a power of two)."""

    shape: tuple[int, ...]
    axis: int
    dtype: np.dtype
    width: int
    height: int

    @classmethod
    def of(cls, shape: tuple[int, ...] | list[int], dtype: np.dtype, axis: int = -1, *, max_dim: int = 8192,
           name: str = "") -> TextureLayout:
        """The layout of a tensor of ``shape`` and ``dtype`` with ``axis`` blocked (negative: from the end; a
        scalar blocks nothing), in textures of at most ``max_dim`` texels a side. Raises DeviceError naming
        ``name`` when no such texture holds it."""
        shape = tuple(int(d) for d in shape)
        dtype = np.dtype(dtype)
        what = f"tensor '{name}' {dtype.name}{list(shape)}" if name else f"a tensor {dtype.name}{list(shape)}"
        if texel_kind(dtype) is None:
            raise DeviceError(f"{what}: dtype {dtype.name} cannot live in a texture")
        rank = len(shape)
        if rank and not -rank <= axis < rank:
            raise DeviceError(f"{what}: axis {axis} to block is out of range for rank {rank}")
        axis = axis % rank if rank else 0
        texels = _texels(shape, axis)
        # As square as a power-of-two width allows: the fewest texels past the end, and both sides within limits.
        width = 1 << max(0, math.ceil(math.log2(max(1, math.isqrt(texels - 1) + 1)))) if texels > 1 else 1
        width = min(width, 1 << int(math.log2(max_dim)))
        height = max(1, -(-texels // width))
        if height > max_dim:
            raise DeviceError(f"{what}: {texels:,} texels need a {width} x {height} texture, past the device's "
                              f"{max_dim} texels a side (maxTextureDimension2D)")
        return cls(shape, axis, dtype, width, height)

    @property
    def kind(self) -> str:
        return texel_kind(self.dtype) or ""

    @property
    def format(self) -> str:
        """The texture format: rgba32float or rgba32sint."""
        return FORMATS[self.kind]

    @property
    def blocked_shape(self) -> tuple[int, ...]:
        """The shape in texels: the blocked axis replaced by its number of blocks of four."""
        if not self.shape:
            return ()
        return tuple(-(-d // LANES) if i == self.axis else d for i, d in enumerate(self.shape))

    @property
    def texels(self) -> int:
        return _texels(self.shape, self.axis)

    @property
    def shift(self) -> int:
        """log2(width): texel t lies at (t & (width - 1), t >> shift)."""
        return self.width.bit_length() - 1

    @property
    def row_bytes(self) -> int:
        """Bytes per texture row in a texture-to-buffer copy (padded to 256)."""
        return -(-self.width * 16 // ROW_ALIGN) * ROW_ALIGN

    @property
    def readback_bytes(self) -> int:
        return self.row_bytes * self.height

    def lane_params(self) -> list[int]:
        """The three words pixel/lanes.wgsl reads: texels after each block of the blocked axis, its number of
        blocks, and the elements in its last block (0: four)."""
        if not self.shape:
            return [1, 1, 1]
        blocked = self.blocked_shape
        return [max(1, math.prod(blocked[self.axis + 1:])), max(1, blocked[self.axis]), self.shape[self.axis] % LANES]

    def view_as(self, shape: tuple[int, ...]) -> TextureLayout | None:
        """The layout of this tensor's texels read as ``shape`` (a reshape that moves no element), or None when
        the reshape moves elements: some axis of ``shape`` must be the blocked axis with the same elements
        before and after it."""
        shape = tuple(int(d) for d in shape)
        if shape == self.shape:
            return self
        if math.prod(shape) != math.prod(self.shape):
            return None
        if not self.shape or not shape:
            return TextureLayout(shape, 0, self.dtype, self.width, self.height) if math.prod(shape) == 1 else None
        before = math.prod(self.shape[: self.axis])
        after = math.prod(self.shape[self.axis + 1:])
        d = self.shape[self.axis]
        for a, n in enumerate(shape):
            if n == d and math.prod(shape[:a]) == before and math.prod(shape[a + 1:]) == after:
                return TextureLayout(shape, a, self.dtype, self.width, self.height)
        return None

    def pack(self, value: np.ndarray) -> np.ndarray:
        """``value`` as (height, width, 4) texels (float32 or int32), the blocked axis four to a texel, zeros past
        the tensor's end. int64 values outside the int32 range raise DeviceError."""
        value = np.asarray(value)
        if tuple(value.shape) != self.shape:
            raise DeviceError(f"pack: value of shape {list(value.shape)} for a layout of {list(self.shape)}")
        lanes = _as_lanes(value, self.kind)
        out = np.zeros((self.height * self.width, LANES), lanes.dtype)
        if self.shape:
            # The axes before and after the blocked one folded (row-major, so the texel order is the same): any
            # rank numpy holds packs, with no axis added past its limit of 64.
            before, d, after = self._folded()
            blocks = -(-d // LANES)
            padded = np.zeros((before, blocks * LANES, after), lanes.dtype)
            padded[:, :d] = lanes.reshape(before, d, after)
            # (before, blocks, 4, after) -> (before, blocks, after, 4): the four lanes of a block last.
            blocked = np.moveaxis(padded.reshape(before, blocks, LANES, after), 2, -1)
            out[: self.texels] = blocked.reshape(-1, LANES)
        else:
            out[0, 0] = lanes
        return out.reshape(self.height, self.width, LANES)

    def unpack(self, raw: np.ndarray | bytes | memoryview) -> np.ndarray:
        """The tensor from the bytes of a texture-to-buffer copy (``row_bytes`` per row)."""
        data = np.frombuffer(raw, dtype=np.uint8)
        if data.size < self.readback_bytes:
            raise DeviceError(f"unpack: {data.size} bytes for a texture readback of {self.readback_bytes}")
        rows = data[: self.readback_bytes].reshape(self.height, self.row_bytes)[:, : self.width * 16]
        lanes = np.ascontiguousarray(rows).view(np.float32 if self.kind == "f32" else np.int32).reshape(-1, LANES)
        lanes = lanes[: self.texels]
        if not self.shape:
            return _from_lanes(lanes[0, 0], self.dtype).reshape(())
        before, d, after = self._folded()
        blocks = -(-d // LANES)
        split = np.moveaxis(lanes.reshape(before, blocks, after, LANES), -1, 2)  # (before, blocks, 4, after)
        value = split.reshape(before, blocks * LANES, after)[:, :d].reshape(self.shape)
        return _from_lanes(np.ascontiguousarray(value), self.dtype)

    def _folded(self) -> tuple[int, int, int]:
        """(elements before the blocked axis, its length, elements after it) of a tensor of rank >= 1."""
        return (math.prod(self.shape[: self.axis]), self.shape[self.axis], math.prod(self.shape[self.axis + 1:]))


MAX_RANK = 6  # the rank wgsl/pixel/addressing.wgsl addresses


def addressing_params(layout: TextureLayout, rank: int = MAX_RANK) -> list[int]:
    """The 14 words wgsl/pixel/addressing.wgsl reads for ``layout``'s tensor in a frame of MAX_RANK dims (its
    shape right-aligned, leading dims 1): dims, texel strides (the blocked axis counting blocks), the blocked
    axis in that frame, log2 of the width. Raises DeviceError past MAX_RANK."""
    if len(layout.shape) > MAX_RANK:
        raise DeviceError(f"rank {len(layout.shape)} is past the {MAX_RANK} dims a pixel program addresses")
    lead = MAX_RANK - len(layout.shape)
    dims = [1] * lead + list(layout.shape)
    blocked = [1] * lead + list(layout.blocked_shape)
    strides = [0] * MAX_RANK
    step = 1
    for i in range(MAX_RANK - 1, -1, -1):
        strides[i] = step
        step *= blocked[i]
    axis = lead + layout.axis if layout.shape else MAX_RANK - 1
    return [*dims, *strides, axis, layout.shift]


def _texels(shape: tuple[int, ...], axis: int) -> int:
    if not shape:
        return 1
    return math.prod(-(-d // LANES) if i == axis else d for i, d in enumerate(shape))


def _as_lanes(value: np.ndarray, kind: str) -> np.ndarray:
    if kind == "f32":
        return value.astype(np.float32, copy=False)
    if value.dtype == np.int64 and value.size and (value.min() < _I32_MIN or value.max() > _I32_MAX):
        raise DeviceError("int64 values outside the int32 range cannot live in an rgba32sint texture")
    return value.astype(np.int32)


def _from_lanes(lanes: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if dtype == np.bool_:
        return lanes != 0
    return lanes.astype(dtype, copy=True)
