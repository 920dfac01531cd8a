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


def _conv_bn_relu_model() -> onnx.ModelProto:
    """Conv (no bias) -> BatchNormalization -> Relu: wgsentis folds the BN into the Conv (which gains a bias)
    and fuses the Relu, so the executed graph is one layer where the imported one has three."""
    rng = np.random.default_rng(0)
    inits = [onnx.numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")]
    inits += [onnx.numpy_helper.from_array(v.astype(np.float32), n) for n, v in
              (("scale", rng.random(8) + 0.5), ("bias", rng.standard_normal(8)), ("mean", rng.standard_normal(8)),
               ("var", rng.random(8) + 0.5))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["b"], name="bn"),
             helper.make_node("Relu", ["b"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "cbr", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8, 10, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_model_totals_count_the_model_as_imported() -> None:
    """flops_profile keeps the executed layers' FLOPs and adds model_total_flops / model_total_params counted
    on the model as imported (before BN folding and activation fusion): by hand, conv 2 * 800 * 27, BN 2 per
    output element, Relu 1; params: the conv weight and BN's four vectors."""
    prof = ws.profile(_conv_bn_relu_model(), backend="cpu", timing=False, pruning_layers=0)
    fp = prof["flops_profile"]
    assert [e["op_type"] for e in prof.layers] != ["Conv", "BatchNormalization", "Relu"]  # the passes did work
    assert fp["model_total_flops"] == 2 * 800 * 27 + 2 * 800 + 800
    assert fp["model_total_params"] == 8 * 27 + 4 * 8 and fp["model_layers"] == 3
    assert fp["model_total_flops"] > fp["total_flops"]  # BN folding took 2 FLOPs per element, added 1 (bias)
    assert fp["total_flops"] == 2 * 800 * 27 + 800 + 800  # conv, its folded bias, the fused Relu
    assert fp["total_params"] == 8 * 27 + 8
    batch3 = ws.profile(_conv_bn_relu_model(), backend="cpu", batch_size=3, timing=False, pruning_layers=0)
    assert batch3["flops_profile"]["model_total_flops"] == 3 * fp["model_total_flops"]


def test_model_totals_on_a_reference_model() -> None:
    """On SqueezeNet (no BN) the passes fuse activations into the convolutions, which moves their FLOPs
    without removing any: the totals agree; the imported graph has more layers."""
    import zoo

    proto = zoo.load_proto("squeezenet")
    fp = ws.profile(proto, backend="cpu", timing=False, pruning_layers=0,
                    inputs=zoo.input_feeds("squeezenet", proto))["flops_profile"]
    assert fp["model_total_flops"] >= fp["total_flops"] > 0
    assert fp["model_layers"] >= len(fp["layers"]) and fp["model_total_params"] >= fp["total_params"]


def test_flops_text_unit_fits() -> None:
    from wgsentis.profiler.flops import flops_text

    assert flops_text(290162) == "290.2 kFLOPs"
    assert flops_text(8.207e9) == "8.207 GFLOPs" and flops_text(39.3e9) == "39.3 GFLOPs"
    assert flops_text(3.4e7) == "34 MFLOPs" and flops_text(2.5e12) == "2.5 TFLOPs" and flops_text(950) == "950 FLOPs"
