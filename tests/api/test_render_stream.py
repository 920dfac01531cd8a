"""The render variant of the shared command stream (issue 19; the ground gpu-pixel stands on, issue 20): a
fragment program drawn over a texture in the gpu-pixel layout gives the numpy answer, draws into the same
targets share a pass, and a draw that reads the open pass's target starts a new one."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import requires_gpu

from wgsentis.backends.gpu.device import get_context, map_for_reading, wgsl_source
from wgsentis.backends.gpu.memory import UniformArena
from wgsentis.backends.gpu.steps import Draw
from wgsentis.backends.gpu.streams import RenderStream
from wgsentis.backends.gpu.tensors import GTexture, pack_params, pipeline_key
from wgsentis.backends.pixel_layout import TextureLayout

pytestmark = requires_gpu


def _texture(ctx, layout: TextureLayout, value: np.ndarray | None = None) -> GTexture:
    usage = ctx.wgpu.TextureUsage
    texture = ctx.device.create_texture(size=(layout.width, layout.height, 1), format=layout.format,
                                        usage=usage.COPY_DST | usage.COPY_SRC | usage.TEXTURE_BINDING
                                        | usage.RENDER_ATTACHMENT)
    if value is not None:
        ctx.queue.write_texture({"texture": texture}, layout.pack(value),
                                {"bytes_per_row": layout.width * 16, "rows_per_image": layout.height},
                                (layout.width, layout.height, 1))
    return GTexture(texture, (layout.height, 4 * layout.width), "test")


def _read(ctx, layout: TextureLayout, tex: GTexture, encoder) -> np.ndarray:
    buffer = ctx.device.create_buffer(size=layout.readback_bytes,
                                      usage=ctx.wgpu.BufferUsage.COPY_DST | ctx.wgpu.BufferUsage.MAP_READ)
    encoder.copy_texture_to_buffer({"texture": tex.texture},
                                   {"buffer": buffer, "bytes_per_row": layout.row_bytes,
                                    "rows_per_image": layout.height}, (layout.width, layout.height, 1))
    ctx.queue.submit([encoder.finish()])
    map_for_reading(buffer, "the render test's output")
    out = layout.unpack(buffer.read_mapped(copy=True))
    buffer.unmap()
    return out


def _unary(ctx, expr: str, x: GTexture, y: GTexture, arena: UniformArena) -> Draw:
    subs = {"EXPR": expr}
    key = pipeline_key("pixel/unary.wgsl", subs, {}, [("texture", 2)], stage="render", targets=("rgba32float",))
    pipeline, layout = ctx.render_pipeline(key, wgsl_source("pixel/unary.wgsl", subs), {}, "test unary",
                                           ["rgba32float"])
    ubuf, offset = arena.allocate(pack_params([x.shape[0] * x.shape[1] // 4, int(np.log2(x.shape[1] // 4)), 0.0,
                                               0.0, 0.0], "pixel/unary.wgsl"))
    draw = Draw(pipeline, None, [y], 0, layout, [x, {"buffer": ubuf, "offset": offset, "size": UniformArena.SLOT}],
                "test unary")
    draw.bind(ctx.device)
    return draw


@pytest.mark.parametrize("shape,axis", [((1, 5, 7, 3), 1), ((300, 3), -1), ((2, 1031), 0)])
def test_draws_over_the_pixel_layout_give_the_numpy_answer(shape, axis):
    ctx = get_context()
    layout = TextureLayout.of(shape, np.float32, axis, max_dim=int(ctx.limits["max-texture-dimension-2d"]))
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    tx, ty, tz = _texture(ctx, layout, x), _texture(ctx, layout), _texture(ctx, layout)
    arena = UniformArena(ctx)
    stream = RenderStream(ctx.device)
    stream.draw(_unary(ctx, "max(v, 0.0)", tx, ty, arena))
    first = stream.current_pass
    stream.draw(_unary(ctx, "v * 2.0", tx, ty, arena))  # same target, reads another texture: the same pass
    assert stream.current_pass is first
    stream.draw(_unary(ctx, "v - 1.0", ty, tz, arena))  # reads the open pass's target: a new pass
    assert stream.current_pass is not first
    np.testing.assert_array_equal(_read(ctx, layout, tz, stream.take()), x * 2.0 - 1.0)


def test_the_pipeline_key_tells_stages_and_targets_apart():
    base = pipeline_key("pixel/unary.wgsl", {}, {}, [("texture", 2)], stage="render", targets=("rgba32float",))
    assert base != pipeline_key("pixel/unary.wgsl", {}, {}, [("texture", 2)], stage="compute")
    assert base != pipeline_key("pixel/unary.wgsl", {}, {}, [("texture", 2)], stage="render",
                                targets=("rgba32sint",))
    assert base != pipeline_key("pixel/unary.wgsl", {}, {}, [("texture", 2)], stage="render",
                                targets=("rgba32float", "rgba32float"))
