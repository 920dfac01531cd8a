"""The render variant of the shared command stream (issue 19; the ground gpu-pixel stands on, issue 20): a
fragment program drawn over a texture in the gpu-pixel layout gives the numpy answer, draws into the same
targets share a pass, and a draw that reads the open pass's target starts a new one."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import read_texture, requires_gpu, texture_of

from wgsentis.backends.gpu.device import get_context, wgsl_source
from wgsentis.backends.gpu.memory import UniformArena
from wgsentis.backends.gpu.steps import Draw
from wgsentis.backends.gpu.streams import RenderStream
from wgsentis.backends.gpu.tensors import GTexture, pack_params, pipeline_key
from wgsentis.backends.pixel_layout import TextureLayout

pytestmark = requires_gpu


def _texture(ctx, layout: TextureLayout, value: np.ndarray | None = None) -> GTexture:
    return GTexture(texture_of(ctx, layout, value), (layout.height, 4 * layout.width), "test")


def _unary(ctx, expr: str, x: GTexture, y: GTexture, layout: TextureLayout, arena: UniformArena) -> Draw:
    """A hand-made draw of pixel/same4.wgsl: y = expr(a) lane by lane, x and y of one layout."""
    subs = {"DECLS": "@group(0) @binding(0) var X0: texture_2d<f32>;\n"
                     "fn x0(c: vec2<i32>) -> vec4<f32> { return textureLoad(X0, c, 0); }\n"
                     "@group(0) @binding(1) var<uniform> params: Params;",
            "OUT": "f32", "LOADS": "let va = x0(texel);", "LANE": f"let a = va[lane]; r = {expr};", "HELPERS": "",
            "EXTRA": "5"}
    key = pipeline_key("pixel/same4.wgsl", subs, {}, [("f32", 2)], stage="render", targets=("rgba32float",))
    pipeline, bgl = ctx.render_pipeline(key, wgsl_source("pixel/same4.wgsl", subs), {}, "test unary",
                                        ["rgba32float"])
    ubuf, offset = arena.allocate(pack_params([layout.texels, layout.shift, *layout.lane_params()],
                                              "pixel/same4.wgsl"))
    draw = Draw(pipeline, None, [y], 0, bgl, [x, {"buffer": ubuf, "offset": offset, "size": UniformArena.SLOT}],
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
    stream.draw(_unary(ctx, "max(a, 0.0)", tx, ty, layout, arena))
    first = stream.current_pass
    stream.draw(_unary(ctx, "a * 2.0", tx, ty, layout, arena))  # same target, reads another texture: the same pass
    assert stream.current_pass is first
    stream.draw(_unary(ctx, "a - 1.0", ty, tz, layout, arena))  # reads the open pass's target: a new pass
    assert stream.current_pass is not first
    np.testing.assert_array_equal(read_texture(ctx, layout, tz.texture, stream.take()), x * 2.0 - 1.0)


def test_the_pipeline_key_tells_stages_and_targets_apart():
    base = pipeline_key("pixel/same4.wgsl", {}, {}, [("texture", 2)], stage="render", targets=("rgba32float",))
    assert base != pipeline_key("pixel/same4.wgsl", {}, {}, [("texture", 2)], stage="compute")
    assert base != pipeline_key("pixel/same4.wgsl", {}, {}, [("texture", 2)], stage="render",
                                targets=("rgba32sint",))
    assert base != pipeline_key("pixel/same4.wgsl", {}, {}, [("texture", 2)], stage="render",
                                targets=("rgba32float", "rgba32float"))
