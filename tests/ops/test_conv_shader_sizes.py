"""A new size of a conv structure already seen builds no pipeline (issue 31) on gpu-compute: the depthwise, im2col
into a texture, input planes into a texture (to_texture.wgsl) and ConvTranspose gather shaders keep the output sizes
in uniforms (divided by through wgsl/common/udiv.wgsl), only the kernel geometry (kernel size, strides, dilations)
and channels as override constants. Each case runs a single-node model at one size, then at another in a new
Worker: no fallback, the shader it is about dispatched, no new pipeline, and the cpu backend's answer.

Winograd's tile grid, binary4's axis operand and the pools' output planes keep their sizes in uniforms the same way:
tests/ops/test_compute_shader_sizes.py checks them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import pytest

import gpu_check

pytestmark = gpu_check.requires_gpu
COMPUTE = "gpu-compute"
RNG = np.random.default_rng(31)
Case = tuple[onnx.ModelProto, dict[str, np.ndarray]]


def _x(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _depthwise(n: int) -> Case:
    feeds = {"x": _x(2, 6, n, n + 3)}  # (N, C, H, W): ceil(ow / 4) changes with the width
    constants = {"w": _x(6, 1, 3, 3), "b": _x(6)}
    return gpu_check.node_model("Conv", feeds, constants=constants, group=6, pads=[1, 1, 1, 1]), feeds


def _depthwise_strided(n: int) -> Case:
    feeds = {"x": _x(1, 4, n + 2, n)}  # channel multiplier 2, stride 2, dilation 2
    constants = {"w": _x(8, 1, 3, 3)}
    return gpu_check.node_model("Conv", feeds, constants=constants, group=4, strides=[2, 2], dilations=[2, 2],
                                pads=[2, 1, 2, 1]), feeds


def _im2col(n: int) -> Case:
    feeds = {"x": _x(2, 3, n, n + 1)}  # 3x3 stride 2: no Winograd, im2col into a texture
    constants = {"w": _x(8, 3, 3, 3), "b": _x(8)}
    return gpu_check.node_model("Conv", feeds, constants=constants, strides=[2, 2], pads=[1, 1, 1, 1]), feeds


def _im2col_1d(n: int) -> Case:
    feeds = {"x": _x(1, 5, 4 * n + 1)}  # (N, C, W): a unit height
    constants = {"w": _x(6, 5, 5)}
    return gpu_check.node_model("Conv", feeds, constants=constants, pads=[2, 2], dilations=[2]), feeds


def _pointwise_strided(n: int) -> Case:
    feeds = {"x": _x(1, 8, n, n + 2)}  # 1x1 stride 2: the planes subsampled into a texture (to_texture.wgsl)
    return gpu_check.node_model("Conv", feeds, constants={"w": _x(6, 8, 1, 1)}, strides=[2, 2]), feeds


def _pointwise_odd(n: int) -> Case:
    feeds = {"x": _x(2, 6, n, n)}  # 1x1 stride 1, planes not whole texels: to_texture.wgsl too
    return gpu_check.node_model("Conv", feeds, constants={"w": _x(4, 6, 1, 1), "b": _x(4)}), feeds


def _conv_transpose(n: int) -> Case:
    feeds = {"x": _x(2, 6, n, n + 1)}  # 2x2 stride 2 (a detector's upsampling), bias
    constants = {"w": _x(6, 4, 2, 2), "b": _x(4)}
    return gpu_check.node_model("ConvTranspose", feeds, constants=constants, strides=[2, 2]), feeds


def _conv_transpose_padded(n: int) -> Case:
    feeds = {"x": _x(1, 4, n + 1, n)}  # 3x3 stride 2, pads, output padding: widths not multiples of four
    constants = {"w": _x(4, 3, 3, 3)}
    return gpu_check.node_model("ConvTranspose", feeds, constants=constants, strides=[2, 2], pads=[1, 1, 1, 1],
                                output_padding=[1, 0]), feeds


def _conv_transpose_1d(n: int) -> Case:
    feeds = {"x": _x(2, 3, 3 * n)}  # (N, C, W)
    return gpu_check.node_model("ConvTranspose", feeds, constants={"w": _x(3, 5, 4)}, strides=[3], pads=[1, 1]), \
        feeds


# name: (model at a size, first size, second size, the shader the case is about)
CASES: dict[str, tuple[Callable[[int], Case], int, int, str]] = {
    "depthwise": (_depthwise, 9, 14, "compute/depthwise.wgsl"),
    "depthwise-strided": (_depthwise_strided, 11, 20, "compute/depthwise.wgsl"),
    "im2col-texture": (_im2col, 9, 13, "compute/im2col_tex.wgsl"),
    "im2col-texture-1d": (_im2col_1d, 5, 9, "compute/im2col_tex.wgsl"),
    "1x1-strided": (_pointwise_strided, 9, 17, "compute/to_texture.wgsl"),
    "1x1-odd-planes": (_pointwise_odd, 5, 7, "compute/to_texture.wgsl"),
    "ConvTranspose": (_conv_transpose, 5, 9, "compute/conv_transpose_cols.wgsl"),
    "ConvTranspose-padded": (_conv_transpose_padded, 6, 13, "compute/conv_transpose_cols.wgsl"),
    "ConvTranspose-1d": (_conv_transpose_1d, 3, 7, "compute/conv_transpose_cols.wgsl"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_second_size_of_a_conv_builds_no_pipeline(case, shaders):
    make, first, second, shader = CASES[case]
    gpu_check.second_size_builds_no_pipeline(case, COMPUTE, make, first, second, shaders=shaders)
    assert shader in shaders, f"{case} at {second} dispatched {shaders}"
