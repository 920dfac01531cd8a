"""Builds wgsentis/data/sample.onnx, the built-in sample model: a small residual CNN classifier.

It exercises the common CNN path (Conv+BatchNormalization+Relu, a residual Add, MaxPool,
depthwise Conv, HardSwish, GlobalAveragePool, Flatten, Gemm, Softmax) with seeded weights.
    python tools/make_sample.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = Path(__file__).resolve().parent.parent / "wgsentis" / "data" / "sample.onnx"


def build() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits: list[onnx.TensorProto] = []

    def weight(name: str, shape: tuple[int, ...], scale: float = 0.2) -> str:
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def bn(prefix: str, c: int) -> list[str]:
        names = []
        for part, value in (("scale", 1 + 0.1 * rng.standard_normal(c)), ("bias", 0.1 * rng.standard_normal(c)),
                            ("mean", 0.1 * rng.standard_normal(c)), ("var", 1 + 0.1 * rng.random(c))):
            inits.append(numpy_helper.from_array(value.astype(np.float32), f"{prefix}.{part}"))
            names.append(f"{prefix}.{part}")
        return names

    nodes = [
        helper.make_node("Conv", ["image", weight("stem.w", (16, 3, 3, 3))], ["stem"], name="stem_conv",
                         pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("BatchNormalization", ["stem", *bn("stem_bn", 16)], ["stem_bn"], name="stem_bn"),
        helper.make_node("Relu", ["stem_bn"], ["stem_relu"], name="stem_relu"),
        helper.make_node("MaxPool", ["stem_relu"], ["pool"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["pool", weight("dw.w", (16, 1, 3, 3))], ["dw"], name="block_dwconv",
                         pads=[1, 1, 1, 1], group=16),
        helper.make_node("HardSwish", ["dw"], ["dw_act"], name="block_hswish"),
        helper.make_node("Conv", ["dw_act", weight("pw.w", (16, 16, 1, 1)), weight("pw.b", (16,))], ["pw"],
                         name="block_pwconv"),
        helper.make_node("Add", ["pw", "pool"], ["res"], name="residual_add"),
        helper.make_node("Relu", ["res"], ["res_relu"], name="residual_relu"),
        helper.make_node("GlobalAveragePool", ["res_relu"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", weight("fc.w", (10, 16)), weight("fc.b", (10,))], ["logits"],
                         name="classifier", transB=1),
        helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "wgsentis_sample",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 32, 32])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="wgsentis")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


if __name__ == "__main__":
    OUT.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(build(), OUT)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")
