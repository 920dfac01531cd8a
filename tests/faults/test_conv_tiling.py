"""Convolutions whose scratch would pass a device limit run in tiles, never on the host (issue: "No fallback for
size").

gpu-compute's conv paths hold scratch operands (im2col columns, shifted input copies, Winograd's transformed input
V and its products) in storage buffers, bound whole, and in linear scratch textures. Where one would pass the
binding limit (buffers) or the texture size (textures), the path runs over blocks of images, else of output rows
(with the input rows their taps reach), each block's scratch within the limits. The cases here lower the limits so
that small tensors need tiles, and check each path against the CPU kernel, with no fallback layer and the path's
shaders dispatched once per tile. gpu-pixel's conv programs keep no scratch larger than X or Y (checked on a
device with small textures). The report's case, a 3x3 convolution over a 901x161 plane at batch 2, runs at the
real limits on both GPU backends.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from helpers import F, make_model, requires_gpu
from onnx import helper
from ops.gpu_check import compare, node_model

import wgsentis as ws
from wgsentis.backends.gpu.device import GPUContext
from wgsentis.backends.gpu_compute import ComputeProgram
from wgsentis.backends.gpu_pixel import PixelProgram

pytestmark = requires_gpu

MiB = 1 << 20


@pytest.fixture(scope="module")
def small_binding() -> GPUContext:
    """A device that binds at most 1 MiB per storage buffer and makes buffers of at most 4 MiB."""
    return GPUContext(limits={"max-storage-buffer-binding-size": MiB, "max-buffer-size": 4 * MiB})


@pytest.fixture(scope="module")
def small_textures() -> GPUContext:
    """A device whose textures are at most 1024 texels a side: a linear scratch texture (1024 texels a row)
    holds 4M floats."""
    return GPUContext(limits={"max-texture-dimension-2d": 1024})


@pytest.fixture(scope="module")
def tiny_textures() -> GPUContext:
    """Textures of at most 128 texels a side: no linear scratch texture at all (gpu-compute), and gpu-pixel
    tensors of at most 65536 floats."""
    return GPUContext(limits={"max-texture-dimension-2d": 128})


def _conv_model(x_shape: tuple[int, ...], w_shape: tuple[int, ...], *, residual: bool = False, relu: bool = False,
                seed: int = 0, **attrs: Any) -> tuple[ws.Model, dict[str, np.ndarray]]:
    """Conv with a bias (and a residual Add and a Relu that the passes fuse into it, when asked) and its feeds."""
    rng = np.random.default_rng(seed)
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32)}
    fan_in = int(np.prod(w_shape[1:]))
    inits = {"w": (rng.standard_normal(w_shape) / np.sqrt(fan_in)).astype(np.float32),
             "b": rng.standard_normal(w_shape[0]).astype(np.float32)}
    graph_inputs = [("x", F, list(x_shape))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", **attrs)]
    if residual:  # Z has the output's shape
        out_shape = _cpu(ws.load_model(make_model(nodes, graph_inputs, [("y", F, None)], inits)), feeds).shape
        feeds["z"] = rng.standard_normal(out_shape).astype(np.float32)
        graph_inputs.append(("z", F, list(out_shape)))
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", **attrs),
                 helper.make_node("Add", ["c", "z"], ["s" if relu else "y"], name="add")]
    if relu:
        nodes[-1].output[0] = "s"
        nodes.append(helper.make_node("Relu", ["s"], ["y"], name="relu"))
    return ws.load_model(make_model(nodes, graph_inputs, [("y", F, None)], inits)), feeds


def _cpu(model: ws.Model, feeds: dict[str, np.ndarray]) -> np.ndarray:
    with ws.Worker(model, "cpu") as worker:
        return worker.run(feeds)["y"]


def _on_device(program_class: Any, ctx: GPUContext, model: ws.Model, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """Run ``model`` twice (recorded, then replayed) on ``ctx``, assert no layer fell back; returns the output."""
    program = program_class(model.graph, ctx=ctx, fast_winograd=True)  # the F(4x4) paths these cases size
    try:
        first = program.run(feeds).wait()["y"]
        again = program.run(feeds).wait()["y"]
        fallback = program.stats()["fallback_layers"]
    finally:
        program.close()
    assert fallback == [], f"fell back: {fallback}"
    np.testing.assert_array_equal(again, first, err_msg="the replay differs")
    return first


def _check(program_class: Any, ctx: GPUContext, model: ws.Model, feeds: dict[str, np.ndarray]) -> None:
    got = _on_device(program_class, ctx, model, feeds)
    np.testing.assert_allclose(got, _cpu(model, feeds), rtol=1e-4, atol=2e-4)


# case -> (X shape, W shape, Conv attributes, fused residual and Relu, the shader each tile dispatches, its
# dispatches: one per tile and group): each case's scratch is over the 1 MiB binding limit, X and Y within it.
BINDING_CASES: dict[str, tuple[tuple, tuple, dict, bool, str, int]] = {
    # Winograd F(4x4): the products (36, M, tiles) are 2.25x Y: blocks of whole images ...
    "winograd4-images": ((2, 16, 80, 80), (16, 16, 3, 3), {"pads": [1] * 4}, False, "compute/winograd4_in.wgsl", 2),
    # ... or of rows of tiles of one image, here with a residual and activation in the output transform
    "winograd4-rows-fused": ((1, 16, 120, 120), (16, 16, 3, 3), {"pads": [1] * 4}, True,
                             "compute/winograd4_in.wgsl", 2),
    # F(2x2) (a side under 8): 3 rows of tiles in blocks of 2 and 1 (a smaller last block)
    "winograd2-rows": ((1, 64, 6, 600), (24, 64, 3, 3), {"pads": [1] * 4}, False, "compute/winograd_in.wgsl", 2),
    # implicit GEMM (groups): three shifted copies of each group's input, blocks of output rows plus their halo
    "implicit-groups": ((1, 16, 128, 120), (16, 8, 3, 3), {"pads": [1] * 4, "group": 2}, False,
                        "compute/conv_shift.wgsl", 4),
    "implicit-dilated-fused": ((1, 16, 128, 120), (16, 8, 3, 3), {"pads": [2] * 4, "group": 2, "dilations": [2, 2]},
                               True, "compute/conv_shift.wgsl", 4),
    # im2col into a buffer (groups and more taps than implicit GEMM takes): 4 MB of columns per group
    "im2col-buffer": ((1, 4, 64, 64), (4, 2, 11, 11), {"pads": [5] * 4, "group": 2}, True, "compute/im2col.wgsl", 8),
    "im2col-buffer-strided": ((2, 4, 100, 90), (6, 2, 10, 10), {"pads": [4, 3, 5, 4], "group": 2, "strides": [2, 1]},
                              False, "compute/im2col.wgsl", 16),
}


@pytest.mark.parametrize("case", list(BINDING_CASES))
def test_conv_scratch_over_the_binding_limit_runs_in_tiles(small_binding, shaders, case):
    x_shape, w_shape, attrs, fused, shader, dispatches = BINDING_CASES[case]
    model, feeds = _conv_model(x_shape, w_shape, residual=fused, relu=fused, **attrs)
    _check(ComputeProgram, small_binding, model, feeds)
    assert shaders.count(shader) == dispatches, shaders


@pytest.mark.parametrize("x_shape,w_shape,attrs,tiles", [
    ((3, 16, 40, 40), (16, 8, 4, 4), {"strides": [2, 2], "pads": [1] * 4}, 3),  # an image per tile
    ((4, 16, 39, 41), (16, 6, 3, 3), {"strides": [2, 2]}, 2),  # two; planes of whole texels or not
])
def test_conv_transpose_products_over_the_binding_limit_run_a_block_of_images_at_a_time(small_binding, shaders,
                                                                                         x_shape, w_shape, attrs,
                                                                                         tiles):
    """The products (N, M * kh * kw, H * W) of ConvTranspose's one-group path pass 1 MiB: blocks of images, not
    the direct gather kernel (~20x slower on lavapipe)."""
    rng = np.random.default_rng(7)
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32)}
    inits = {"w": (rng.standard_normal(w_shape) / 8).astype(np.float32),
             "b": rng.standard_normal(w_shape[1]).astype(np.float32)}
    model = ws.load_model(make_model([helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)],
                                     [("x", F, list(x_shape))], [("y", F, None)], inits))
    _check(ComputeProgram, small_binding, model, feeds)
    assert shaders.count("compute/conv_transpose_cols.wgsl") == tiles, shaders
    assert "compute/conv_transpose.wgsl" not in shaders


# case -> (X shape, W shape, Conv attributes, the shader each tile dispatches, tiles): scratch textures past 4M
# floats (1024 rows of 1024 texels).
TEXTURE_CASES: dict[str, tuple[tuple, tuple, dict, str, int]] = {
    # im2col into a texture: (Kp = 148) x 65536 columns in blocks of output rows ...
    "im2col-texture-rows": ((1, 3, 512, 512), (8, 3, 7, 7), {"pads": [3] * 4, "strides": [2, 2]},
                            "compute/im2col_tex.wgsl", 3),
    # ... or of whole images
    "im2col-texture-images": ((3, 3, 320, 320), (8, 3, 7, 7), {"pads": [3] * 4, "strides": [2, 2]},
                              "compute/im2col_tex.wgsl", 3),
    # Winograd's V in a texture: (36 * 8) x 16384 tiles
    "winograd4-texture": ((1, 8, 512, 512), (4, 8, 3, 3), {"pads": [1] * 4}, "compute/winograd4_in.wgsl", 2),
}


@pytest.mark.parametrize("case", list(TEXTURE_CASES))
def test_conv_scratch_over_the_texture_size_runs_in_tiles(small_textures, shaders, case):
    x_shape, w_shape, attrs, shader, tiles = TEXTURE_CASES[case]
    model, feeds = _conv_model(x_shape, w_shape, **attrs)
    _check(ComputeProgram, small_textures, model, feeds)
    assert shaders.count(shader) == tiles, shaders


@pytest.mark.parametrize("x_shape,w_shape,attrs,shader", [
    ((1, 8, 64, 64), (3, 8, 3, 3), {"pads": [1] * 4}, "compute/winograd4_in.wgsl"),  # V in a buffer
    ((1, 3, 64, 64), (8, 3, 7, 7), {"pads": [3] * 4, "strides": [2, 2]}, "compute/conv_shift.wgsl"),
    ((1, 16, 30, 30), (8, 16, 1, 1), {"strides": [2, 2]}, "compute/conv_shift.wgsl"),
])
def test_conv_without_scratch_textures_keeps_its_scratch_in_buffers(tiny_textures, shaders, x_shape, w_shape, attrs,
                                                                    shader):
    """A device whose textures are narrower than a linear scratch texture's rows: the paths that would copy into
    one take buffers instead."""
    model, feeds = _conv_model(x_shape, w_shape, **attrs)
    _check(ComputeProgram, tiny_textures, model, feeds)
    assert shader in shaders, shaders


@pytest.mark.parametrize("x_shape,w_shape", [((1, 64, 32, 32), (64, 64, 3, 3)),  # Winograd
                                             ((1, 16, 64, 64), (16, 16, 3, 3)),  # the direct program
                                             ((1, 16, 64, 64), (16, 1, 3, 3))])  # depthwise
def test_pixel_conv_needs_no_texture_larger_than_its_input_and_output(tiny_textures, x_shape, w_shape):
    """X and Y (and the residual) fill a 128 x 128 texture: what the conv programs draw in between is no larger."""
    group = x_shape[1] // w_shape[1]
    model, feeds = _conv_model(x_shape, w_shape, pads=[1] * 4, group=group, residual=True, relu=True)
    _check(PixelProgram, tiny_textures, model, feeds)


def _report_case() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 64, 901, 161)).astype(np.float32)
    w = (rng.standard_normal((64, 64, 3, 3)) / 24).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    return node_model("Conv", {"x": x}, constants={"w": w, "b": b}, pads=[1, 1, 1, 1]), {"x": x}


@pytest.mark.slow  # ~22 s: a 21 GFLOP convolution on the CPU oracle, twice on each GPU backend
def test_the_reported_901x161_convolution_runs_on_both_gpu_backends_at_the_real_limits():
    """Winograd's products for (2, 64, 901, 161) are 170 MB, past lavapipe's 128 MiB binding: two tiles."""
    model, feeds = _report_case()
    compare(model, feeds, rtol=1e-4, atol=1e-4)
