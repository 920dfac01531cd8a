"""Import-time shape inference from the ops' shape rules (wgsentis/rule_shapes.py): shapes ONNX's inference
cannot carry through com.microsoft ops are filled from their specs' rules and carried on through the standard ops
after them; the shapes given are the ones a run produces; a dim that varies stays unknown."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import wgsentis as ws
from wgsentis.onnx_import import type_to_info
from wgsentis.onnx_shapes import infer_types

MS = "com.microsoft"


def _chain(x_shape) -> bytes:
    """x -> FastGelu -> Transpose -> BiasSplitGelu -> Relu -> y, and a SkipLayerNormalization beside."""
    nodes = [helper.make_node("FastGelu", ["x"], ["g"], domain=MS),
             helper.make_node("Transpose", ["g"], ["t"], perm=[0, 2, 1]),
             helper.make_node("BiasSplitGelu", ["t", "b"], ["s"], domain=MS),
             helper.make_node("Relu", ["s"], ["y"]),
             helper.make_node("SkipLayerNormalization", ["x", "x", "gamma"], ["n"], domain=MS)]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("n", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.linspace(-1, 1, 6).astype(np.float32), "b"),
                     numpy_helper.from_array(np.ones(3, np.float32), "gamma")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    proto.ir_version = 8
    return proto.SerializeToString()


def test_onnx_alone_does_not_know_these_shapes():
    """The premise: ONNX's inference stops at the contrib op (so the rules are what fills them)."""
    import onnx

    types = infer_types(onnx.load_from_string(_chain([2, 6, 3])))
    for name in ("g", "t", "s", "y"):
        info = type_to_info(name, types.get(name))
        assert info.shape is None, (name, info)


@pytest.mark.parametrize("optimize", [True, False])
def test_contrib_chain_gets_its_shapes_at_import(optimize):
    model = ws.load_model(_chain([2, 6, 3]), name="chain", optimize=optimize)
    info = model.imported.value_info
    assert info["g"].shape == (2, 6, 3) and info["g"].dtype == np.float32
    assert info["t"].shape == (2, 3, 6)  # ONNX's inference, fed the rule's shape of g
    assert info["s"].shape == (2, 3, 3)  # the rule again, after the standard op
    assert info["y"].shape == (2, 3, 3)
    assert {o.name: o.shape for o in model.outputs} == {"y": (2, 3, 3), "n": (2, 6, 3)}
    x = np.random.default_rng(0).standard_normal((2, 6, 3)).astype(np.float32)
    with ws.Worker(model, "cpu") as worker:
        got = worker.run({"x": x})
    assert got["y"].shape == (2, 3, 3) and got["n"].shape == (2, 6, 3)


def test_a_varying_dim_stays_unknown():
    model = ws.load_model(_chain(["batch", 6, 3]), name="chain")
    for name in ("g", "t", "s", "y"):
        shape = model.imported.value_info[name].shape if name in model.imported.value_info else None
        assert shape is None or not all(isinstance(d, int) for d in shape), (name, shape)
