"""FuseGeluPattern: Gelu spelled out in elementwise layers (GPT-2's tanh form, BERT's erf form) becomes one Gelu
layer on every backend with ONNX Runtime's results, and lookalikes stay as they are."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import BACKENDS, F, make_model, ort_outputs
from onnx import helper, numpy_helper

import wgsentis as ws

SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


def _gelu_model(form: str, *, cubic: float = 0.044715, exponent: float = 3.0, leak: bool = False,
                swap: bool = False):
    """MatMul, then Gelu spelled out in ``form``: 'tanh' (0.5 * x) * (1 + tanh(...)) as torch.onnx writes GPT-2's
    gelu_new, 'erf' (x * (1 + erf(x / sqrt 2))) * 0.5 as it writes BERT's, 'erf-half' x * (0.5 * (1 + erf(x *
    (1/sqrt 2)))). ``swap`` reverses the operands of every binary layer; ``leak`` makes an inner tensor a second
    graph output."""
    rng = np.random.default_rng(31)
    inits = {"w": rng.standard_normal((16, 24)).astype(np.float32), "half": np.array(0.5, np.float32),
             "one": np.array(1.0, np.float32), "three": np.array(exponent, np.float32),
             "cubic": np.array(cubic, np.float32), "k": np.array(SQRT_2_OVER_PI, np.float32),
             "sqrt2": np.array(math.sqrt(2), np.float32), "inv_sqrt2": np.array(1 / math.sqrt(2), np.float32)}

    def binary(op, a, b, out, name):
        return helper.make_node(op, [b, a] if swap and op != "Pow" and op != "Div" else [a, b], [out], name=name)

    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="proj")]
    if form == "tanh":
        nodes += [binary("Mul", "h", "half", "h_half", "mul_half"),
                  binary("Pow", "h", "three", "h3", "pow"),
                  binary("Mul", "h3", "cubic", "h3c", "mul_cubic"),
                  binary("Add", "h", "h3c", "inner", "add_inner"),
                  binary("Mul", "inner", "k", "scaled", "mul_k"),
                  helper.make_node("Tanh", ["scaled"], ["t"], name="tanh"),
                  binary("Add", "t", "one", "u", "add_one"),
                  binary("Mul", "h_half", "u", "y", "gelu_out")]
    elif form == "erf":
        nodes += [binary("Div", "h", "sqrt2", "scaled", "div_sqrt2"),
                  helper.make_node("Erf", ["scaled"], ["t"], name="erf"),
                  binary("Add", "t", "one", "u", "add_one"),
                  binary("Mul", "h", "u", "hu", "mul_x"),
                  binary("Mul", "hu", "half", "y", "gelu_out")]
    else:
        nodes += [binary("Mul", "h", "inv_sqrt2", "scaled", "mul_inv_sqrt2"),
                  helper.make_node("Erf", ["scaled"], ["t"], name="erf"),
                  binary("Add", "t", "one", "u", "add_one"),
                  binary("Mul", "u", "half", "u_half", "mul_half"),
                  binary("Mul", "h", "u_half", "y", "gelu_out")]
    outputs = [("y", F, None)]
    if leak:
        outputs.append(("t", F, None))
    return make_model(nodes, [("x", F, [2, 5, 16])], outputs, inits, opset=17)


@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("form,approximate", [("tanh", "tanh"), ("erf", "none"), ("erf-half", "none")])
@pytest.mark.parametrize("backend", BACKENDS)
def test_spelled_out_gelu_becomes_one_layer(backend, form, approximate, swap):
    model = _gelu_model(form, swap=swap)
    wg = ws.load_model(model)
    # One Gelu of the form's approximation, folded into the MatMul before it as its activation.
    assert [(layer.op_type, layer.fused_activation) for layer in wg.layers] == [
        ("MatMul", ("Gelu", {"approximate": approximate}))]
    x = np.random.default_rng(32).standard_normal((2, 5, 16)).astype(np.float32)
    expected = ort_outputs(model, {"x": x}, optimize=False)[0]
    with ws.Worker(wg, backend) as worker:
        np.testing.assert_allclose(worker.run({"x": x})["y"], expected, rtol=2e-5, atol=2e-5)
        assert not worker.stats()["fallback_layers"]


@pytest.mark.parametrize("case", [{"cubic": 0.05}, {"exponent": 2.0}, {"leak": True}])
def test_gelu_lookalikes_stay_spelled_out(case):
    model = _gelu_model("tanh", **case)
    wg = ws.load_model(model)
    assert "Gelu" not in [layer.op_type for layer in wg.layers]
    assert "tanh" in [layer.name for layer in wg.layers]
    x = np.random.default_rng(33).standard_normal((2, 5, 16)).astype(np.float32)
    got = ws.Worker(wg, "cpu").run({"x": x})
    names = ["y", "t"] if case.get("leak") else ["y"]
    for name, expected in zip(names, ort_outputs(model, {"x": x}, optimize=False), strict=True):
        np.testing.assert_allclose(got[name], expected, rtol=2e-5, atol=2e-5)


def test_an_added_output_inside_the_pattern_keeps_it():
    """``add_output`` of a tensor inside the spelled-out Gelu re-optimizes without the fusion: the tensor is
    there, with ONNX Runtime's value."""
    model = _gelu_model("erf")
    wg = ws.load_model(model)
    assert "erf" not in [layer.name for layer in wg.layers]
    wg.add_output("t")
    assert "erf" in [layer.name for layer in wg.layers]
    x = np.random.default_rng(34).standard_normal((2, 5, 16)).astype(np.float32)
    got = ws.Worker(wg, "cpu").run({"x": x})
    w = next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == "w").astype(np.float64)
    expected_t = np.vectorize(math.erf)((x.astype(np.float64) @ w) / math.sqrt(2))
    np.testing.assert_allclose(got["t"], expected_t, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["y"], ort_outputs(model, {"x": x}, optimize=False)[0], rtol=2e-5, atol=2e-5)
