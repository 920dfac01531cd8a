"""The gpu-pixel texture layout (issue 20): a blocked axis four to a texel, the other axes folded row-major into
a power-of-two-wide texture; packing and unpacking are exact, on the host and through a real texture."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import read_texture, requires_gpu, texture_of

from wgsentis.backends.pixel_layout import LANES, TextureLayout
from wgsentis.errors import DeviceError

SHAPES = [(), (1,), (3,), (4,), (5,), (2, 3), (1, 7, 1), (2, 5, 3, 3), (1, 64, 9, 9), (3, 1, 0, 2)]


def _value(shape: tuple[int, ...], dtype: np.dtype, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == np.float32:
        v = rng.standard_normal(shape).astype(np.float32)
        flat = v.reshape(-1)
        specials = np.array([np.nan, np.inf, -np.inf, -0.0, 1e-40], np.float32)  # bit-exact through lanes
        flat[: min(flat.size, specials.size)] = specials[: flat.size]
        return v
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    return rng.integers(-(2**31), 2**31 - 1, size=shape).astype(dtype)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.bool_])
def test_pack_and_unpack_round_trip_on_every_axis(shape, dtype):
    value = _value(shape, np.dtype(dtype))
    for axis in range(-max(1, len(shape)), max(1, len(shape))) if shape else [0]:
        layout = TextureLayout.of(shape, dtype, axis)
        assert layout.width & (layout.width - 1) == 0  # a power of two: addressing is mask and shift
        assert layout.width * layout.height >= layout.texels
        texels = layout.pack(value)
        assert texels.shape == (layout.height, layout.width, LANES)
        padded = np.zeros((layout.height, layout.row_bytes // 16, LANES), texels.dtype)
        padded[:, : layout.width] = texels
        back = layout.unpack(padded.tobytes())
        assert back.dtype == np.dtype(dtype) and back.shape == tuple(shape)
        if dtype == np.float32:  # bit for bit: NaN, infinities, -0 and denormals among the values
            np.testing.assert_array_equal(back.reshape(-1).view(np.uint32), value.reshape(-1).view(np.uint32))
        else:
            np.testing.assert_array_equal(back, value)


def test_an_element_lies_at_its_block_texel_and_lane():
    shape, axis = (2, 6, 3), 1
    layout = TextureLayout.of(shape, np.float32, axis)
    value = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    texels = layout.pack(value).reshape(-1, LANES)
    blocked = layout.blocked_shape  # (2, 2, 3)
    for index in np.ndindex(*shape):
        block = list(index)
        block[axis] //= LANES
        t = int(np.ravel_multi_index(block, blocked))
        x, y = t & (layout.width - 1), t >> layout.shift
        assert texels[y * layout.width + x, index[axis] % LANES] == value[index]


def test_a_tensor_past_the_texture_limit_is_refused_by_name():
    with pytest.raises(DeviceError, match=r"tensor 'huge'.*past the device's 64 texels a side"):
        TextureLayout.of((64 * 64 * 4 + 4,), np.float32, max_dim=64, name="huge")
    assert TextureLayout.of((64 * 64 * 4,), np.float32, max_dim=64).height == 64
    with pytest.raises(DeviceError, match="int32 range"):
        TextureLayout.of((2,), np.int64).pack(np.array([2**40, 1], np.int64))
    with pytest.raises(DeviceError, match="cannot live in a texture"):
        TextureLayout.of((2,), np.float64)


@requires_gpu
@pytest.mark.parametrize("shape,dtype,axis", [((1, 5, 7, 3), np.float32, 1), ((300, 3), np.float32, -1),
                                              ((4, 1, 9), np.int32, 0), ((17,), np.bool_, 0)])
def test_a_real_texture_round_trips_bit_exact(shape, dtype, axis):
    """Upload the packed texels into an rgba32float/rgba32sint texture, copy it to a buffer with 256-byte rows
    and unpack: the same bits come back (NaN, infinities, -0 and denormals among them)."""
    from wgsentis.backends.gpu.device import get_context

    ctx = get_context()
    layout = TextureLayout.of(shape, dtype, axis, max_dim=int(ctx.limits["max-texture-dimension-2d"]))
    value = _value(shape, np.dtype(dtype), seed=1)
    back = read_texture(ctx, layout, texture_of(ctx, layout, value))
    if dtype == np.float32:
        np.testing.assert_array_equal(back.view(np.uint32), value.view(np.uint32))
    else:
        np.testing.assert_array_equal(back, value)
