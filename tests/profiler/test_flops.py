"""FLOPs and params follow one convention (a multiply-add counts 2): hand-computed checks."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

import wgsentis as ws
from wgsentis.model import Layer
from wgsentis.ops.registry import flops_of
from wgsentis.profiler.flops import layer_costs, tensor_facts


def _flops(op: str, ins, outs, **attrs) -> int:
    return flops_of(Layer("x", op, [f"i{k}" for k in range(len(ins))], ["y"], attrs), ins, outs)


def test_conv_flops_by_hand() -> None:
    # N=1, C=3, M=8, 3x3 kernel, 10x10 output: 2 * 8*10*10 * 3*3*3 MACs + 800 bias adds
    assert _flops("Conv", [(1, 3, 12, 12), (8, 3, 3, 3), (8,)], [(1, 8, 10, 10)]) == 2 * 800 * 27 + 800
    assert _flops("Conv", [(1, 3, 12, 12), (8, 3, 3, 3)], [(1, 8, 10, 10)]) == 2 * 800 * 27
    # grouped (depthwise): C/group = 1
    assert _flops("Conv", [(2, 4, 6, 6), (4, 1, 3, 3)], [(2, 4, 4, 4)], group=4) == 2 * (2 * 4 * 16) * 9


def test_conv_transpose_flops_by_hand() -> None:
    # each input element scatters into M/group * k*k outputs: 2 * N*C*H*W * (M/g)*kh*kw
    assert _flops("ConvTranspose", [(1, 4, 5, 5), (4, 2, 3, 3)], [(1, 2, 11, 11)]) == 2 * 100 * 18
    assert _flops("ConvTranspose", [(1, 4, 5, 5), (4, 2, 3, 3), (2,)], [(1, 2, 11, 11)]) == 2 * 100 * 18 + 242


def test_gemm_and_matmul_flops_by_hand() -> None:
    assert _flops("Gemm", [(4, 5), (5, 6), (6,)], [(4, 6)]) == 2 * 4 * 6 * 5 + 24
    assert _flops("Gemm", [(5, 4), (6, 5)], [(4, 6)], transA=1, transB=1) == 2 * 4 * 6 * 5
    assert _flops("MatMul", [(2, 3, 7, 8), (8, 9)], [(2, 3, 7, 9)]) == 2 * (2 * 3 * 7 * 9) * 8


def test_pool_and_norm_flops_by_hand() -> None:
    assert _flops("MaxPool", [(1, 2, 8, 8)], [(1, 2, 4, 4)], kernel_shape=[2, 2]) == 32 * 4
    assert _flops("AveragePool", [(1, 2, 9, 9)], [(1, 2, 3, 3)], kernel_shape=[3, 3]) == 18 * 9
    assert _flops("GlobalAveragePool", [(1, 3, 7, 7)], [(1, 3, 1, 1)]) == 147
    assert _flops("BatchNormalization", [(1, 3, 4, 4)] + [(3,)] * 4, [(1, 3, 4, 4)]) == 2 * 48
    assert _flops("LayerNormalization", [(2, 10), (10,), (10,)], [(2, 10)]) == 8 * 20
    assert _flops("InstanceNormalization", [(1, 3, 4, 4), (3,), (3,)], [(1, 3, 4, 4)]) == 8 * 48


def test_layer_costs_params_bytes_and_fused_activation() -> None:
    w = np.ones((8, 3, 3, 3), np.float32)
    b = np.zeros(8, np.float32)
    g = np.ones((8 * 10 * 10, 5), np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Flatten", ["r"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "g"], ["y"], name="fc")]
    graph = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
                              [onnx.numpy_helper.from_array(a, n) for a, n in ((w, "w"), (b, "b"), (g, "g"))])
    model = ws.load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    feeds = {"x": np.zeros((1, 3, 12, 12), np.float32)}
    costs = {c.name: c for c in layer_costs(model, *tensor_facts(model, feeds))}
    conv = costs["conv"]
    assert conv.fused == "Relu"  # Conv+Relu: the activation adds one FLOP per output element
    assert conv.flops == 2 * 800 * 27 + 800 + 800
    assert conv.params == 8 * 27 + 8 and conv.weight_names == ["w", "b"]
    assert conv.bytes == 4 * (1 * 3 * 12 * 12 + 8 * 27 + 8 + 800)
    assert costs["fc"].flops == 2 * 5 * 800 and costs["fc"].params == 4000
