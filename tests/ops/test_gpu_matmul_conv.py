"""MatMul, Gemm, Conv and ConvTranspose on gpu-compute vs the cpu backend."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import gpu_check

import wgsentis as ws
from wgsentis.backends.gpu.device import get_context

pytestmark = gpu_check.requires_gpu

RNG = np.random.default_rng(7)


def _rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize("a_shape,b_shape", [
    ((5, 7), (7, 9)),  # odd sizes: scalar loads, edge tiles
    ((33, 64), (64, 40)),  # vec4 loads, more than one tile each way
    ((1, 16), (16, 12)),  # one row
    ((2, 1, 9, 13), (3, 13, 20)),  # broadcast batch dims
    ((13,), (13, 6)),  # 1-D A
    ((4, 13), (13,)),  # 1-D B
    ((0, 8), (8, 4)),  # zero-size
    ((3, 0), (0, 5)),  # K == 0: zeros
])
def test_matmul(a_shape, b_shape):
    feeds = {"a": _rand(*a_shape), "b": _rand(*b_shape)}
    gpu_check.compare(gpu_check.node_model("MatMul", feeds), feeds, rtol=1e-4, atol=1e-4)


def test_matmul_constant_b_with_relu():
    # A constant B with unaligned columns is padded on the host; a following Relu is fused.
    feeds = {"a": _rand(70, 24)}
    b = _rand(24, 37)
    node = helper.make_node("MatMul", ["a", "b"], ["t"])
    relu = helper.make_node("Relu", ["t"], ["y0"])
    model = gpu_check.node_model("MatMul", feeds, constants={"b": b})
    model.graph.ClearField("node")
    model.graph.node.extend([node, relu])
    gpu_check.compare(model, feeds, rtol=1e-4, atol=1e-4)



@pytest.mark.parametrize("a_shape,b_shape,const,shader", [
    ((5, 7), (7, 9), "b", "matmul_tb"),  # unaligned rows: the texture pads them
    ((2, 1, 9, 13), (3, 13, 20), "b", "matmul_tb"),  # batched constant B: batch offsets in texture rows
    ((4, 13), (13,), "b", "matmul_tb"),  # 1-D constant B
    ((6, 11), (11, 9), "a", "matmul_ta"),  # constant A, K % 4 tail read from the texture
    ((2, 3, 5, 9), (2, 1, 9, 7), "a", "matmul_ta"),  # batched constant A, broadcast batch dims
    ((2, "past"), ("past", 4), "b", "gemv"),  # B's rows past the texture size limit: a storage buffer
    ((1, 37), (37, 10), "b", "gemv_tb"),  # one row: the 1x4 kernel, constant B as a texture
])
def test_matmul_constant_operand_texture(a_shape, b_shape, const, shader, shaders):
    # "past": one more than the adapter's texture height (16384 on lavapipe, 32768 on NVIDIA).
    past = get_context().limits["max-texture-dimension-2d"] + 1
    a_shape, b_shape = ([past if d == "past" else d for d in s] for s in (a_shape, b_shape))
    feeds = {"a": _rand(*a_shape), "b": _rand(*b_shape)}
    constants = {const: feeds.pop(const)}
    model = gpu_check.node_model("MatMul", feeds, constants=constants, input_order=["a", "b"])
    gpu_check.compare(model, feeds, rtol=1e-4, atol=1e-4)
    assert f"compute/{shader}.wgsl" in shaders


@pytest.mark.parametrize("a_shape,b_shape,const,shader,copied", [
    ((33, 64), (64, 40), None, "matmul_tab", 2),  # both device operands reach linear textures
    ((2, 1, 8, 12), (3, 12, 20), None, "matmul_tab", 2),  # batched with broadcast: batch offsets in texels
    ((40, 24), (24, 36), "b", "matmul_tab", 1),  # device A copied; constant B a texture of its own
    ((8, 13), (13, 16), None, "matmul_tb", 1),  # A rows are not whole texels: A from its buffer, B copied
    ((1, 64), (64, 12), None, "gemv_tab", 2),  # one row: the 1x4 kernel
])
def test_matmul_device_operands_by_transfer_copy(a_shape, b_shape, const, shader, copied, shaders, monkeypatch):
    from wgsentis.backends import gpu_compute

    copies = []
    original = gpu_compute.Recorder.copy_to_texture
    monkeypatch.setattr(gpu_compute.Recorder, "copy_to_texture",
                        lambda self, src, tex: copies.append(src.shape) or original(self, src, tex))
    feeds = {"a": _rand(*a_shape), "b": _rand(*b_shape)}
    constants = {const: feeds.pop(const)} if const else {}
    model = gpu_check.node_model("MatMul", feeds, constants=constants, input_order=["a", "b"])
    gpu_check.compare(model, feeds, rtol=1e-4, atol=1e-4)
    assert f"compute/{shader}.wgsl" in shaders and len(copies) == copied


@pytest.mark.parametrize("a_shape,b_shape", [
    ((1, 2050), (2050, 1001)),  # a classifier: one row, K and N past many tiles, N % 4 != 0
    ((2, 9), (9, 3)),  # two rows, fewer columns than one vec4
    ((3, 2, 1, 13), (3, 1, 13, 6)),  # batched single rows with broadcast
])
def test_matmul_one_or_two_rows(a_shape, b_shape, shaders):
    feeds = {"a": _rand(*a_shape), "b": _rand(*b_shape)}
    gpu_check.compare(gpu_check.node_model("MatMul", feeds), feeds, rtol=1e-4, atol=1e-4)
    assert "compute/gemv.wgsl" in shaders


def test_gemm_classifier_row_with_bias_and_relu(shaders):
    feeds = {"a": _rand(1, 96)}
    model = gpu_check.node_model("Gemm", feeds, constants={"b": _rand(30, 96), "c": _rand(30)}, transB=1)
    model.graph.node[0].output[0] = "t"
    model.graph.node.append(helper.make_node("Relu", ["t"], ["y0"]))
    gpu_check.compare(model, feeds, rtol=1e-4, atol=1e-4)
    assert any(s.startswith("compute/gemv") for s in shaders)


@pytest.mark.parametrize("trans_a,trans_b,c_shape,alpha,beta", [
    (0, 0, None, 1.0, 1.0),
    (1, 0, (11,), 0.5, 2.0),
    (0, 1, (9, 1), 1.0, -1.0),
    (1, 1, (9, 11), 2.0, 0.5),
    (0, 1, (), 1.0, 1.0),
])
@pytest.mark.parametrize("constant_b", [False, True])
def test_gemm(trans_a, trans_b, c_shape, alpha, beta, constant_b):
    m, k, n = 9, 14, 11
    feeds = {"a": _rand(*((k, m) if trans_a else (m, k)))}
    b = _rand(*((n, k) if trans_b else (k, n)))
    constants = {}
    if constant_b:
        constants["b"] = b
    else:
        feeds["b"] = b
    order = ["a", "b"]
    if c_shape is not None:
        feeds["c"] = _rand(*c_shape)
        order.append("c")
    model = gpu_check.node_model("Gemm", feeds, constants=constants, input_order=order, transA=trans_a,
                                 transB=trans_b, alpha=alpha, beta=beta)
    gpu_check.compare(model, feeds, rtol=1e-4, atol=1e-4)


CONV_CASES = [
    ((1, 3, 9, 11), (5, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 6, 9, 11), (4, 6, 1, 1), {}),  # 1x1 as a matmul, batched, unaligned H*W
    ((2, 8, 8, 8), (12, 8, 1, 1), {}),  # 1x1, aligned
    ((2, 4, 9, 10), (6, 2, 3, 2), {"group": 2, "strides": [2, 1], "dilations": [1, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 4, 9, 10), (8, 1, 3, 3), {"group": 4, "strides": [2, 2], "pads": [1, 0, 1, 2]}),  # depthwise x2
    ((1, 5, 7, 7), (5, 1, 3, 3), {"group": 5, "auto_pad": "SAME_LOWER"}),  # depthwise
    # depthwise, four outputs of a row per invocation: widths not a multiple of 4, dilations, 5x5, x2
    ((2, 6, 11, 13), (6, 1, 5, 5), {"group": 6, "pads": [2, 2, 2, 2], "dilations": [1, 2]}),
    ((1, 4, 7, 9), (8, 1, 3, 3), {"group": 4, "strides": [1, 2], "pads": [1, 1, 1, 1], "dilations": [2, 1]}),
    ((1, 3, 10, 9), (4, 3, 2, 2), {"auto_pad": "VALID", "strides": [3, 2]}),
    ((1, 3, 17), (5, 3, 4), {"strides": [2], "pads": [1, 2]}),  # 1-D
    ((1, 16, 20, 20), (24, 16, 3, 3), {"pads": [1, 1, 1, 1]}),  # past one workgroup
    # implicit GEMM: batched, strided + dilated rows, channels padded to 4, groups, a 7x7 stem
    ((2, 8, 13, 11), (9, 8, 3, 3), {"strides": [2, 1], "dilations": [2, 1], "pads": [2, 1, 0, 2]}),
    ((2, 6, 12, 9), (4, 3, 3, 3), {"group": 2, "strides": [1, 2], "pads": [1, 1, 1, 1]}),
    ((1, 3, 23, 21), (8, 3, 7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]}),
    ((1, 8, 10, 10), (6, 8, 1, 1), {"strides": [2, 2]}),
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", CONV_CASES)
def test_conv(x_shape, w_shape, attrs, shaders):
    feeds = {"x": _rand(*x_shape)}
    constants = {"w": _rand(*w_shape, scale=0.3), "b": _rand(w_shape[0])}
    gpu_check.compare(gpu_check.node_model("Conv", feeds, constants=constants, **attrs), feeds,
                      rtol=1e-4, atol=1e-4)
    depthwise = attrs.get("group", 1) == x_shape[1]
    # Weights are read through a texture (matmul_ta, or matmul_tab for Winograd's two texture operands).
    assert ("compute/depthwise.wgsl" in shaders) if depthwise else any("_ta" in s for s in shaders)


WINOGRAD_CASES = [  # (x, w, attrs, output tile side: F(2x2, 3x3) or F(4x4, 3x3))
    ((1, 16, 20, 20), (24, 16, 3, 3), {"pads": [1, 1, 1, 1]}, 4),
    ((2, 10, 7, 9), (13, 10, 3, 3), {"pads": [1, 1, 1, 1]}, 2),  # odd output: partial tiles; Cp > C; 2 images
    ((1, 8, 9, 6), (5, 8, 3, 3), {"pads": [0, 2, 1, 0]}, 2),  # asymmetric pads, odd output height
    ((1, 12, 11, 11), (8, 12, 3, 3), {"auto_pad": "SAME_UPPER"}, 4),  # 11x11: partial 4x4 tiles
    ((1, 8, 3, 3), (4, 8, 3, 3), {}, 2),  # one output pixel
    ((3, 9, 14, 5), (7, 9, 3, 3), {"pads": [1, 1, 1, 1]}, 2),  # tiles across images not a multiple of 4
    ((2, 9, 10, 13), (6, 9, 3, 3), {"pads": [0, 1, 2, 0]}, 4),  # 2 images, asymmetric pads, odd sides
    ((1, 20, 40, 36), (12, 20, 3, 3), {"pads": [1, 1, 1, 1]}, 4),  # V past one linear texture row
]


@pytest.mark.parametrize("textures", [True, False])
@pytest.mark.parametrize("x_shape,w_shape,attrs,side", WINOGRAD_CASES)
def test_conv_winograd(x_shape, w_shape, attrs, side, textures, shaders):
    kernels = ws.KernelOptions(texture_operands=textures)
    feeds = {"x": _rand(*x_shape)}
    constants = {"w": _rand(*w_shape, scale=0.3), "b": _rand(w_shape[0])}
    # F(4x4) is taken only where the worker allows it (fast_winograd); by default every case is F(2x2).
    model = gpu_check.node_model("Conv", feeds, constants=constants, **attrs)
    gpu_check.compare(model, feeds, rtol=1e-4, atol=1e-4, options={"fast_winograd": True, "kernels": kernels})
    prefix = "compute/winograd" if side == 2 else "compute/winograd4"
    assert f"{prefix}_in.wgsl" in shaders and f"{prefix}_out.wgsl" in shaders
    assert ("compute/matmul_tab.wgsl" in shaders) == textures
    shaders.clear()
    gpu_check.compare(model, feeds, rtol=1e-4, atol=1e-4, backend="gpu-compute", options={"kernels": kernels})
    assert "compute/winograd_in.wgsl" in shaders and not any("winograd4" in s for s in shaders)


def test_conv_winograd_fused_relu_no_bias(shaders):
    feeds = {"x": _rand(1, 8, 10, 10)}
    model = gpu_check.node_model("Conv", feeds, constants={"w": _rand(16, 8, 3, 3, scale=0.3)}, pads=[1, 1, 1, 1])
    model.graph.node[0].output[0] = "t"
    model.graph.node.append(helper.make_node("Relu", ["t"], ["y0"]))
    gpu_check.compare(model, feeds, rtol=1e-4, atol=1e-4, options={"fast_winograd": True})
    assert "compute/winograd4_out.wgsl" in shaders  # 10x10 output: F(4x4, 3x3) where allowed


@pytest.mark.parametrize("x_shape,w_shape,attrs,shader", [
    ((2, 6, 9, 11), (4, 6, 1, 1), {}, "compute/to_texture.wgsl"),  # 1x1: input planes into a texture
    ((1, 8, 10, 10), (6, 8, 1, 1), {"strides": [2, 2]}, "compute/to_texture.wgsl"),  # strided 1x1
    ((1, 3, 23, 21), (8, 3, 7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]}, "compute/im2col_tex.wgsl"),
])
def test_conv_inputs_reach_the_matmul_as_textures(x_shape, w_shape, attrs, shader, shaders):
    feeds = {"x": _rand(*x_shape)}
    constants = {"w": _rand(*w_shape, scale=0.3), "b": _rand(w_shape[0])}
    gpu_check.compare(gpu_check.node_model("Conv", feeds, constants=constants, **attrs), feeds,
                      rtol=1e-4, atol=1e-4)
    assert shader in shaders and "compute/matmul_tab.wgsl" in shaders


@pytest.mark.parametrize("x_shape,w_shape", [
    ((2, 8, 8, 8), (12, 8, 1, 1)),  # two images: the batch stride counts texels; a partial texture row only
    ((1, 40, 20, 20), (8, 40, 1, 1)),  # 4000 texels: three whole texture rows and a partial one
    ((1, 64, 32, 32), (20, 64, 1, 1)),  # exactly 16 whole rows
])
@pytest.mark.parametrize("native", [True, False])
def test_conv_1x1_input_by_transfer_copy(x_shape, w_shape, native, shaders, monkeypatch):
    """A 1x1 stride-1 input whose planes are whole texels reaches its texture by copy_buffer_to_texture
    into a linear texture (no copy shader), read by the matmul with linear addressing; the copy is
    encoded by wgpu-native calls built once (``native``) or by wgpu-py's public method."""
    from wgsentis.backends import gpu_compute
    from wgsentis.backends.gpu.steps import TextureCopy

    copies = []
    original = gpu_compute.Recorder.copy_to_texture
    monkeypatch.setattr(gpu_compute.Recorder, "copy_to_texture",
                        lambda self, src, tex: copies.append(src.nbytes) or original(self, src, tex))
    feeds = {"x": _rand(*x_shape)}
    constants = {"w": _rand(*w_shape, scale=0.3), "b": _rand(w_shape[0])}
    model = ws.load_model(gpu_check.node_model("Conv", feeds, constants=constants))
    want = ws.Worker(model, "cpu").run(feeds)
    program = gpu_compute.ComputeProgram(model.graph, native_calls=native)
    try:
        for _ in range(2):  # the first run and a replay
            got = program.execute(feeds).wait()
            for name, value in want.items():
                np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-4)
        texture_copies = [s for s in program.last_plan.steps if isinstance(s, TextureCopy)]
    finally:
        program.close()
    assert copies == [4 * int(np.prod(x_shape))]
    assert "compute/to_texture.wgsl" not in shaders and "compute/matmul_tab.wgsl" in shaders
    # This wgpu-py has the struct helpers: the fast path ran, and only when asked for.
    assert texture_copies and all(bool(c.native) == native for c in texture_copies)


def test_conv_1x1_chain_shares_linear_textures(shaders):
    """Three 1x1 convolutions in a row, each reading its input through a linear texture: the layers
    take textures from the shared pool and each reads its own input, not a neighbour's."""
    feeds = {"x": _rand(1, 16, 12, 12)}
    model = gpu_check.node_model("Conv", feeds, constants={"w": _rand(24, 16, 1, 1, scale=0.3)})
    model.graph.node[0].output[0] = "t0"
    ws_ = [_rand(8, 24, 1, 1, scale=0.3), _rand(12, 8, 1, 1, scale=0.3)]
    for i, w in enumerate(ws_):
        model.graph.initializer.append(helper.make_tensor(f"w{i + 1}", 1, list(w.shape), w.ravel().tolist()))
        model.graph.node.append(helper.make_node("Conv", [f"t{i}", f"w{i + 1}"], ["y0" if i == 1 else f"t{i + 1}"]))
    gpu_check.compare(model, feeds, rtol=1e-4, atol=1e-4)
    assert "compute/to_texture.wgsl" not in shaders


def test_conv_no_bias_fused_clip():
    feeds = {"x": _rand(1, 4, 6, 6)}
    w = _rand(6, 4, 3, 3, scale=0.3)
    model = gpu_check.node_model("Conv", feeds, constants={"w": w}, pads=[1, 1, 1, 1])
    conv = model.graph.node[0]
    conv.output[0] = "t"
    model.graph.node.append(helper.make_node("Clip", ["t", "lo", "hi"], ["y0"]))
    model.graph.initializer.extend([helper.make_tensor("lo", 1, [], [-0.5]), helper.make_tensor("hi", 1, [], [0.5])])
    gpu_check.compare(model, feeds, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("x_shape,w_shape,attrs", [CONV_CASES[0], CONV_CASES[2], CONV_CASES[3], CONV_CASES[10]])
def test_conv_without_textures(x_shape, w_shape, attrs, shaders):
    # The storage-buffer path for weights (taken when a texture does not fit the device limits).
    feeds = {"x": _rand(*x_shape)}
    constants = {"w": _rand(*w_shape, scale=0.3), "b": _rand(w_shape[0])}
    gpu_check.compare(gpu_check.node_model("Conv", feeds, constants=constants, **attrs), feeds,
                      rtol=1e-4, atol=1e-4, options={"kernels": ws.KernelOptions(texture_operands=False)})
    assert not any("matmul_t" in s for s in shaders)


@pytest.mark.parametrize("x_shape,w_shape,attrs", [
    ((1, 4, 5, 6), (4, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 0, 0], "output_padding": [1, 0]}),
    ((2, 4, 5, 6), (4, 1, 2, 3), {"group": 2, "strides": [2, 3], "dilations": [2, 1]}),
    ((1, 3, 7), (3, 2, 3), {"strides": [2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 3, 3), (2, 3, 3, 3), {"strides": [3, 2], "output_shape": [10, 8]}),
    ((2, 24, 8, 8), (24, 10, 2, 2), {"strides": [2, 2]}),  # a decoder's 2x upsampling: no overlap, H*W % 4 == 0
    ((1, 9, 7, 5), (9, 6, 4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1], "dilations": [1, 1]}),  # overlaps
])
def test_conv_transpose(x_shape, w_shape, attrs, shaders):
    feeds = {"x": _rand(*x_shape)}
    group = attrs.get("group", 1)
    constants = {"w": _rand(*w_shape, scale=0.3), "b": _rand(w_shape[1] * group)}
    gpu_check.compare(gpu_check.node_model("ConvTranspose", feeds, constants=constants, **attrs), feeds,
                      rtol=1e-4, atol=1e-4)
    # One group: a product, then the gather of products; groups: the direct gather kernel.
    product = "compute/conv_transpose_cols.wgsl" in shaders
    assert product == (group == 1) and ("compute/conv_transpose.wgsl" in shaders) == (group > 1)
