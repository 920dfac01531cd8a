"""Sizes live in uniforms, not in shader source (issue 30), on gpu-compute: a model whose MatMul, Gemm or
elementwise op only changes size (same ranks, dtypes and operand forms) builds no pipeline of its own once the first
size has run, and answers as the CPU does. ``stats()["pipelines_created"]`` counts the pipelines a program's
recordings built. What a size still selects is a variant, not a size in the source: a matmul operand's form (vec4
rows where rows are whole texels, the 1x4 kernel for one or two rows), which the sizes here keep. The gpu-pixel
programs of the same families (MatMul, Gemm, Conv, LSTM, Resize, whose tap table offsets were literals) are
checked the same way.

Issue 31's shaders are checked the same way: binary4.wgsl's axis operand (an Add of a (C, 1, 1) bias), the
Winograd transforms' tile grid (F(2x2) and F(4x4)) and the pools' output planes keep their sizes in uniform words,
divided by through wgsl/common/udiv.wgsl, where they were override constants; only geometry (a pool's window, its
outputs per invocation) and operand forms stay constants.

Not here: the conv shaders of ops/conv_gpu.py (depthwise, im2col, ConvTranspose), in test_conv_shader_sizes.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import pytest

import gpu_check
from wgsentis.backends.gpu.device import get_context, wgsl_source
from wgsentis.backends.gpu.shader_gen import BINARY4_FORMS, MATMUL_FORMS, binary4_subs, matmul_subs

pytestmark = gpu_check.requires_gpu
COMPUTE = "gpu-compute"
RNG = np.random.default_rng(30)
Case = tuple[onnx.ModelProto, dict[str, np.ndarray]]


def _x(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _matmul(n: int) -> Case:
    feeds = {"a": _x(2, 3 * n, 4 * n), "b": _x(2, 4 * n, 8 * n)}  # device operands, batched, rows whole texels
    return gpu_check.node_model("MatMul", feeds), feeds


def _matmul_odd(n: int) -> Case:
    feeds = {"a": _x(n + 3, 2 * n + 1), "b": _x(2 * n + 1, n + 2)}  # strided (scalar) operands, edge tiles
    return gpu_check.node_model("MatMul", feeds), feeds


def _matmul_constant_b(n: int) -> Case:
    feeds = {"a": _x(3 * n, 4 * n)}  # B read through a texture of the constant
    return gpu_check.node_model("MatMul", feeds, constants={"b": _x(4 * n, 5 * n)}), feeds


def _gemm(n: int) -> Case:
    feeds = {"a": _x(4 * n, 3 * n)}
    constants = {"b": _x(5 * n, 3 * n), "c": _x(5 * n)}
    return gpu_check.node_model("Gemm", feeds, constants=constants, transB=1, alpha=0.5, beta=2.0), feeds


def _gemv(n: int) -> Case:
    feeds = {"a": _x(1, 4 * n)}  # one row: the 1x4-tile kernel
    return gpu_check.node_model("MatMul", feeds, constants={"b": _x(4 * n, 3 * n)}), feeds


def _add(n: int) -> Case:
    feeds = {"a": _x(2, n, 4 * n), "b": _x(2, n, 4 * n)}  # binary4.wgsl, full operands
    return gpu_check.node_model("Add", feeds), feeds


def _mul_scalar(n: int) -> Case:
    feeds = {"a": _x(3, 4 * n), "b": _x(1)}  # binary4.wgsl, a scalar operand
    return gpu_check.node_model("Mul", feeds), feeds


def _sub_broadcast(n: int) -> Case:
    feeds = {"a": _x(n, 1, n + 1), "b": _x(3, n + 1)}  # binary.wgsl: strides, not multiples of four
    return gpu_check.node_model("Sub", feeds), feeds


def _relu(n: int) -> Case:
    feeds = {"x": _x(2, 4 * n)}  # unary4.wgsl
    return gpu_check.node_model("Relu", feeds), feeds


def _exp_odd(n: int) -> Case:
    feeds = {"x": _x(3, 2 * n + 1)}  # unary.wgsl
    return gpu_check.node_model("Exp", feeds), feeds


def _where(n: int) -> Case:
    feeds = {"c": _x(n, 3) > 0, "x": _x(n, 3), "y": _x(3)}  # map3.wgsl
    return gpu_check.node_model("Where", feeds), feeds


CASES: dict[str, tuple[Callable[[int], Case], int, int]] = {
    "MatMul": (_matmul, 4, 7), "MatMul-strided": (_matmul_odd, 4, 9), "MatMul-constant-B": (_matmul_constant_b, 3, 5),
    "Gemm": (_gemm, 3, 6), "MatMul-one-row": (_gemv, 3, 5), "Add": (_add, 3, 5), "Mul-scalar": (_mul_scalar, 3, 7),
    "Sub-broadcast": (_sub_broadcast, 3, 6), "Relu": (_relu, 5, 9), "Exp": (_exp_odd, 5, 8), "Where": (_where, 4, 11),
}


@pytest.mark.parametrize("op", list(CASES))
def test_a_second_size_builds_no_pipeline(op):
    gpu_check.second_size_builds_no_pipeline(op, COMPUTE, *CASES[op])


def _resize(n: int) -> Case:
    feeds = {"x": _x(1, 2, n, n + 1)}  # the tap table's offsets move with the sizes: words, not literals
    constants = {"roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 1.5, 0.75], np.float32)}
    return gpu_check.node_model("Resize", feeds, constants=constants, input_order=["x", "roi", "scales"],
                                mode="linear"), feeds


def _pixel_conv(n: int) -> Case:
    feeds = {"x": _x(1, 6, n, n)}
    constants = {"w": _x(8, 6, 3, 3), "b": _x(8)}
    return gpu_check.node_model("Conv", feeds, constants=constants, pads=[1, 1, 1, 1]), feeds


def _lstm(n: int) -> Case:
    # The batch changes; the sequence length would not do: Y's join binds one texture per step (up to MAX_PARTS),
    # so its bind group, a structure, follows the length.
    feeds = {"x": _x(3, n, 3)}
    constants = {"W": _x(1, 16, 3), "R": _x(1, 16, 4), "B": _x(1, 32)}
    return gpu_check.node_model("LSTM", feeds, constants=constants, hidden_size=4), feeds


# The gpu-pixel programs of the same families: the sizes here keep the variants (rows per fragment at 8 and more
# rows or columns).
PIXEL_CASES: dict[str, tuple[Callable[[int], Case], int, int]] = {
    "MatMul": (_matmul, 4, 7), "Gemm": (_gemm, 3, 6), "Resize": (_resize, 6, 9), "Conv": (_pixel_conv, 9, 13),
    "LSTM": (_lstm, 3, 5),
}


@pytest.mark.parametrize("op", list(PIXEL_CASES))
def test_a_second_size_builds_no_pipeline_on_gpu_pixel(op):
    gpu_check.second_size_builds_no_pipeline(op, "gpu-pixel", *PIXEL_CASES[op])


@pytest.mark.parametrize("a_form", MATMUL_FORMS)
@pytest.mark.parametrize("b_form", MATMUL_FORMS)
@pytest.mark.parametrize("vec4_stores", [False, True])
def test_every_matmul_variant_is_whole_wgsl(a_form, b_form, vec4_stores):
    """shader_gen.matmul_subs fills every placeholder of the shader binding these forms, which compiles."""
    ctx = get_context()
    if "half" in (a_form, b_form) and not ctx.has_f16:
        pytest.skip("the adapter has no shader-f16")
    subs, constants = matmul_subs(a_form, b_form, vec4_stores, "max(v, 0.0)")
    textures = "".join(side for side, form in (("a", a_form), ("b", b_form)) if form in ("tex", "linear"))
    shader = f"compute/matmul_t{textures}.wgsl" if textures else "compute/matmul.wgsl"
    source = wgsl_source(shader, subs)
    assert ("\nenable f16;\n" in source) == ("half" in (a_form, b_form))  # the directive, not the comment
    ctx.pipeline(("test_compute_shader_sizes", shader, a_form, b_form, vec4_stores), source,
                 {"WG": 64, **constants}, f"{shader} {a_form} {b_form}")


@pytest.mark.parametrize("a_form", list(BINARY4_FORMS))
@pytest.mark.parametrize("b_form", list(BINARY4_FORMS))
def test_every_binary4_variant_is_whole_wgsl(a_form, b_form):
    """shader_gen.binary4_subs fills every placeholder of binary4.wgsl, which compiles."""
    source = wgsl_source("compute/binary4.wgsl", {"EXPR": "a + b", "ACT": "v", **binary4_subs(a_form, b_form)})
    get_context().pipeline(("test_compute_shader_sizes", "binary4", a_form, b_form), source, {"WG": 256},
                           f"binary4 {a_form} {b_form}")


# -- the quantization, pool, cast, generator and indexing programs (ops/quant_gpu.py, pool_gpu.py, cast_gpu.py,
# generators_gpu.py, indexing_gpu.py, reduce_gpu.py): their expressions and kind functions are .wgsl files, their
# sizes words. A pool's window stays a pipeline constant (pool_window.wgsl says why), its output plane does not,
# so its second size changes the planes' sizes too (issue 31).
def _quantize(n: int) -> Case:
    feeds = {"x": 4 * _x(n, 3 * n)}  # compute/map3.wgsl with common/expr/quantize.wgsl
    constants = {"s": np.array(0.05, np.float32), "zp": np.array(7, np.uint8)}
    return gpu_check.node_model("QuantizeLinear", feeds, constants=constants), feeds


def _dequantize(n: int) -> Case:
    feeds = {"q": RNG.integers(-128, 128, (n, 2 * n + 1)).astype(np.int8)}
    constants = {"s": np.array(0.1, np.float32), "zp": np.array(-3, np.int8)}
    return gpu_check.node_model("DequantizeLinear", feeds, constants=constants), feeds


def _max_pool(n: int) -> Case:
    feeds = {"x": _x(n, n + 1, 4 * n + 5, 7 * n + 2)}  # compute/pool.wgsl with compute/kind/pool_f32.wgsl
    return gpu_check.node_model("MaxPool", feeds, kernel_shape=[3, 3], pads=[1, 1, 1, 1]), feeds


def _average_pool(n: int) -> Case:
    feeds = {"x": _x(n, n + 1, 5 * n + 4, 3 * n + 6)}  # an average: the kind file's division, the device's
    return gpu_check.node_model("AveragePool", feeds, kernel_shape=[3, 3], strides=[2, 2]), feeds


def _global_average_pool(n: int) -> Case:
    feeds = {"x": _x(n, 2, n + 3, 2 * n)}  # compute/lane_mean.wgsl
    return gpu_check.node_model("GlobalAveragePool", feeds), feeds


def _cast(n: int) -> Case:
    feeds = {"x": 50 * _x(n, 2 * n + 1)}  # compute/unary.wgsl with compute/expr/cast_f32_i32.wgsl
    return gpu_check.node_model("Cast", feeds, to=onnx.TensorProto.INT32), feeds


def _eye_like(n: int) -> Case:
    feeds = {"x": _x(n, n + 2)}  # compute/generate.wgsl, FILL_EYE
    return gpu_check.node_model("EyeLike", feeds, k=1), feeds


def _gather_nd(n: int) -> Case:
    feeds = {"data": _x(n + 2, 3, n), "i": RNG.integers(0, n + 2, (n, 1)).astype(np.int64)}  # gather_nd.wgsl
    return gpu_check.node_model("GatherND", feeds), feeds


def _arg_max(n: int) -> Case:
    feeds = {"x": _x(n, 2 * n + 1)}  # compute/argreduce.wgsl with compute/kind/is_nan_f32.wgsl
    return gpu_check.node_model("ArgMax", feeds, axis=1), feeds


CASES_30 = {
    "QuantizeLinear": (_quantize, 3, 6), "DequantizeLinear": (_dequantize, 3, 7), "MaxPool": (_max_pool, 1, 2),
    "AveragePool": (_average_pool, 1, 3), "GlobalAveragePool": (_global_average_pool, 2, 5), "Cast": (_cast, 3, 8),
    "EyeLike": (_eye_like, 3, 6), "GatherND": (_gather_nd, 3, 5), "ArgMax": (_arg_max, 3, 7),
}


@pytest.mark.parametrize("op", list(CASES_30))
def test_a_second_size_of_a_quantization_pool_cast_generator_or_index_op_builds_no_pipeline(op):
    gpu_check.second_size_builds_no_pipeline(op, COMPUTE, *CASES_30[op], exact=True)


# -- issue 31: sizes that were override constants. Each case names the shader it is about, dispatched at the second
# size; the sizes there change the divisors (an axis operand's inner extent and the groups an invocation steps by,
# the tile grid's width, height and padded count, a pool's rows and row length) and hit their edges (tiles past the
# grid's end, rows of outputs not a multiple of an invocation's).
def _add_bias(n: int) -> Case:
    feeds = {"x": _x(1, 8, 2 * n, 2 * n + 2), "b": _x(8, 1, 1)}  # binary4 axis: an Add of a per-channel bias
    return gpu_check.node_model("Add", feeds), feeds


def _mul_axis_first(n: int) -> Case:
    # The axis operand first, an outer extent past one (images: the element wraps at dim), an inner extent not a
    # multiple of the groups an invocation computes.
    feeds = {"s": _x(3, 1, 1), "x": _x(n, 3, n + 1, 4)}
    return gpu_check.node_model("Mul", feeds), feeds


def _winograd(n: int) -> Case:
    feeds = {"x": _x(2, 8, n, n + 3)}  # F(2x2): two images, edge tiles (odd output sides)
    constants = {"w": _x(8, 8, 3, 3), "b": _x(8)}
    return gpu_check.node_model("Conv", feeds, constants=constants, pads=[1, 1, 1, 1]), feeds


def _winograd4(n: int) -> Case:
    feeds = {"x": _x(1, 9, n, n + 5)}  # F(4x4) (the worker's fast_winograd), channels not a multiple of four
    constants = {"w": _x(6, 9, 3, 3)}
    return gpu_check.node_model("Conv", feeds, constants=constants, pads=[1, 1, 1, 1]), feeds


def _max_pool_3d(n: int) -> Case:
    feeds = {"x": _x(1, 3, n, n + 2, 2 * n + 1)}  # OD1 and OD2 both sizes: three spatial dims
    return gpu_check.node_model("MaxPool", feeds, kernel_shape=[3, 3, 3], strides=[1, 2, 1],
                                pads=[1, 1, 1, 1, 1, 1]), feeds


def _max_pool_indices(n: int) -> Case:
    feeds = {"x": _x(2, 3, n + 4, 3 * n)}  # compute/maxpool_indices.wgsl
    return gpu_check.node_model("MaxPool", feeds, n_outputs=2, kernel_shape=[3, 3], strides=[2, 2],
                                pads=[1, 1, 1, 1]), feeds


def _average_pool_odd(n: int) -> Case:
    feeds = {"x": _x(1, 4, 2 * n + 3, 5 * n)}  # stride 1: rows of outputs not a multiple of ROW_OUTPUTS
    return gpu_check.node_model("AveragePool", feeds, kernel_shape=[3, 3], pads=[1, 1, 1, 1]), feeds


# name: (model at a size, first size, second size, the shader the case is about, the GPU Workers' options)
CASES_31: dict[str, tuple[Callable[[int], Case], int, int, str, dict[str, Any]]] = {
    "Add-axis": (_add_bias, 3, 8, "compute/binary4.wgsl", {}),
    "Mul-axis-first": (_mul_axis_first, 2, 7, "compute/binary4.wgsl", {}),
    "Conv-Winograd-F2x2": (_winograd, 7, 12, "compute/winograd_out.wgsl", {}),
    "Conv-Winograd-F4x4": (_winograd4, 9, 14, "compute/winograd4_out.wgsl", {"fast_winograd": True}),
    "MaxPool-3d": (_max_pool_3d, 3, 6, "compute/pool.wgsl", {}),
    "MaxPool-indices": (_max_pool_indices, 3, 7, "compute/maxpool_indices.wgsl", {}),
    "AveragePool-odd-rows": (_average_pool_odd, 2, 5, "compute/pool.wgsl", {}),
}


@pytest.mark.parametrize("op", list(CASES_31))
def test_a_second_size_of_a_shape_that_baked_sizes_builds_no_pipeline(op, shaders):
    make, first, second, shader, options = CASES_31[op]
    exact = "Pool" in op  # a max and a correctly rounded average: the cpu's bits
    gpu_check.second_size_builds_no_pipeline(op, COMPUTE, make, first, second, exact=exact, options=options,
                                             shaders=shaders)
    assert shader in shaders, f"{op} dispatched {sorted(set(shaders))}"


def test_a_pool_past_the_loop_limit_computes_one_output_an_invocation(shaders):
    """Where ROW_OUTPUTS windows' loops would pass the device's loop limit, an invocation computes one output
    (pool_gpu.row_outputs): the same answer, no fallback."""
    from wgsentis.backends.gpu.tensors import LOOP_ALLOWANCE, loop_passes
    from wgsentis.ops.pool_gpu import ROW_OUTPUTS

    limit = loop_passes(1, 1, 5, 5) + LOOP_ALLOWANCE  # one 5x5 window fits, ROW_OUTPUTS of them do not
    assert loop_passes(ROW_OUTPUTS, 1, 5, 5) + LOOP_ALLOWANCE > limit
    x = _x(2, 3, 11, 13)
    model = gpu_check.node_model("AveragePool", {"x": x}, kernel_shape=[5, 5], pads=[2, 2, 2, 2])
    got = gpu_check.compare(model, {"x": x}, backend=COMPUTE, options={"max_loop_iterations": limit})
    assert "compute/pool.wgsl" in shaders
    assert got["y0"].shape == (2, 3, 11, 13)
