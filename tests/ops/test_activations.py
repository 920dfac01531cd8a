"""The activation records (wgsentis/ops/activations.py): for every record, the numpy kernel equals the
in-place form, the WGSL expression compiles and matches the kernel on gpu-compute (the vec4 and the f32
kernels, and fused into a MatMul's epilogue), the RNN name resolves in the CPU and GPU recurrent tables,
and the registries and the fusion pass read the table."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_check import compare, node_model, requires_gpu
from onnx import helper

from wgsentis.ops import registry, rnn, rnn_gpu
from wgsentis.ops.activations import ACTIVATIONS, FUSABLE, inplace_activation, rnn_activation
from wgsentis.passes import fuse

RECORDS = sorted(ACTIVATIONS)
ONNX_OPS = [name for name in RECORDS if ACTIVATIONS[name].versions]
# The functions the ONNX RNN/GRU/LSTM `activations` attribute may name.
RNN_SPEC_NAMES = {"Relu", "Tanh", "Sigmoid", "Affine", "LeakyRelu", "ThresholdedRelu", "ScaledTanh",
                  "HardSigmoid", "Elu", "Softsign", "Softplus"}

# Attributes to try beside the defaults ({}), per record.
ATTR_CASES: dict[str, list[dict]] = {
    "LeakyRelu": [{"alpha": 0.3}, {"alpha": 1.5}],
    "HardSigmoid": [{"alpha": 0.3, "beta": 0.4}],
    "Elu": [{"alpha": 0.5}],
    "Selu": [{"alpha": 2.0, "gamma": 3.0}],
    "Celu": [{"alpha": 2.0}],
    "ThresholdedRelu": [{"alpha": 0.5}],
    "Swish": [{"alpha": 0.7}],
    "Gelu": [{"approximate": "tanh"}],
    "Clip": [{"min": -0.5, "max": 0.75}, {"min": np.float32(0.0)}, {"min": 1.0, "max": -1.0},
             {"max": np.array([2.0], np.float32)}],
    "Affine": [{"alpha": 2.0, "beta": -1.0}],
    "ScaledTanh": [{"alpha": 0.5, "beta": 2.0}],
}


def _cases(name: str) -> list[dict]:
    return [{}, *ATTR_CASES.get(name, [])]


def _inputs(size: int, dtype=np.float32) -> np.ndarray:
    """Normal values over [-12, 12] with zeros, tiny and large magnitudes among them."""
    x = np.random.default_rng(size).standard_normal(size) * 4
    specials = [0.0, -0.0, 1e-8, -1e-8, 0.5, -0.5, 1.0, -1.0, 6.0, -6.0, 30.0, -30.0, 80.0, -80.0]
    x[:len(specials)] = specials
    return x.astype(dtype)


# -- the records on the CPU --------------------------------------------------------------------------
@pytest.mark.parametrize("name", [n for n in RECORDS if ACTIVATIONS[n].inplace is not None])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kernel_equals_inplace_form(name, dtype):
    act = ACTIVATIONS[name]
    x = _inputs(1003, dtype)
    x[-4:] = [np.nan, np.inf, -np.inf, -0.0]
    checked = 0
    for attrs in _cases(name):
        full = {**act.attrs, **attrs}
        expected = act.kernel(x.copy(), **full)
        apply = inplace_activation(name, attrs)
        if apply is None:
            assert name == "LeakyRelu" and not 0.0 <= full["alpha"] <= 1.0  # the one documented refusal
            continue
        v = x.copy()
        apply(v)
        assert v.dtype == expected.dtype
        np.testing.assert_array_equal(v, expected, err_msg=f"{name} {attrs}")
        np.testing.assert_array_equal(np.signbit(v), np.signbit(expected), err_msg=f"{name} {attrs} (sign of 0)")
        checked += 1
    assert checked


@pytest.mark.parametrize("name", RECORDS)
def test_kernel_keeps_its_input_and_dtype(name):
    act = ACTIVATIONS[name]
    for dtype in (np.float32, np.float64):
        x = _inputs(64, dtype)
        before = x.copy()
        for attrs in _cases(name):
            y = act.kernel(x, **{**act.attrs, **attrs})
            assert y.dtype == dtype and y.shape == x.shape
            np.testing.assert_array_equal(x, before)


def test_inplace_ignores_attributes_it_does_not_know():
    v = np.array([-1.0, 2.0], np.float32)
    inplace_activation("Relu", {"consumed_inputs": [0]})(v)
    np.testing.assert_array_equal(v, [0.0, 2.0])
    assert inplace_activation("Sigmoid", {}) is None and inplace_activation("NotAnActivation", {}) is None


@pytest.mark.parametrize("name", ONNX_OPS)
def test_registered_from_the_record(name):
    act = ACTIVATIONS[name]
    for since in act.versions:
        impl = registry.lookup(name, "", since)
        assert impl is not None and impl.since == since
        if act.inputs_from is not None and since >= act.inputs_from:
            assert impl.attr_names == frozenset() and impl.max_inputs == 1 + len(act.attrs)
        else:
            legacy = {"consumed_inputs"} if act.legacy and since == act.versions[0] else set()
            assert impl.attr_names == frozenset(act.attrs) | legacy
    gpu = registry.lookup(name, "", act.versions[-1], backend="gpu-compute")
    assert (gpu is not None) == (act.wgsl is not None)


def test_fusable_activations_have_every_form_the_hosts_apply():
    assert fuse.FUSABLE is FUSABLE
    for name in FUSABLE:
        act = ACTIVATIONS[name]
        assert act.versions and act.wgsl is not None, name
    assert {"Relu", "Clip", "HardSwish", "Gelu"} <= FUSABLE


@pytest.mark.parametrize("name", sorted(RNN_SPEC_NAMES))
def test_rnn_names_resolve_in_the_cpu_and_gpu_tables(name):
    act = rnn_activation(name)
    assert act is not None and act.rnn_name == name
    assert rnn_activation(name.upper()) is act and rnn_activation(name.lower().encode()) is act
    x = _inputs(40, np.float32)
    for attrs in _cases(act.name)[:2]:
        alphas = [attrs["alpha"]] if "alpha" in attrs else []
        betas = [attrs["beta"]] if "beta" in attrs else []
        (cpu,) = rnn._activations([name], alphas, betas, ["Tanh"], 1)
        np.testing.assert_array_equal(cpu[0](x), act.kernel(x, **{**act.attrs, **attrs}))
        (gpu,) = rnn_gpu.step_activations([name], alphas, betas, ["Tanh"], 1)
        expr, params = act.expression(attrs)
        assert gpu == [(expr, params[0], params[1])]
        assert "gamma" not in expr  # the step kernels bind alpha and beta only


def test_rnn_names_are_exactly_the_spec_list():
    assert {a.rnn_name for a in ACTIVATIONS.values() if a.rnn_name} == RNN_SPEC_NAMES
    assert rnn_activation("Gelu") is None
    with pytest.raises(ValueError, match="unsupported RNN activation"):
        rnn._activations(["Gelu"], None, None, ["Tanh"], 1)
    assert rnn_gpu.step_activations(["Gelu"], None, None, ["Tanh"], 1) is None


def test_rnn_alpha_beta_consumed_in_order():
    # LeakyRelu takes the first alpha, HardSigmoid the second and the only beta; Tanh takes none.
    (funcs,) = rnn_gpu.step_activations(["LeakyRelu", "Tanh", "HardSigmoid"], [0.1, 0.3], [0.6],
                                    ["Sigmoid", "Tanh", "Tanh"], 1)
    assert [f[1:] for f in funcs] == [(0.1, 0.0), (0.0, 0.0), (0.3, 0.6)]


# -- the WGSL expressions on gpu-compute ---------------------------------------------------------------
def _model(name: str, x: np.ndarray):
    """A model of activation ``name`` at its newest opset with one node per attribute case, node k
    writing y{k} (Clip's bounds as constant inputs)."""
    act = ACTIVATIONS[name]
    nodes, constants = [], {}
    for k, attrs in enumerate(_cases(name)):
        if act.inputs_from is not None:
            names = []
            for attr in act.attrs:
                if attr in attrs:
                    constants[f"{attr}{k}"] = np.asarray(attrs[attr], np.float32).reshape(())
                names.append(f"{attr}{k}" if attr in attrs else "")
            while names and names[-1] == "":
                names.pop()
            nodes.append(helper.make_node(name, ["x", *names], [f"y{k}"], name=f"n{k}"))
        else:
            nodes.append(helper.make_node(name, ["x"], [f"y{k}"], name=f"n{k}", **attrs))
    model = node_model(name, {"x": x}, opset=act.versions[-1])
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    del model.graph.output[:]
    model.graph.output.extend(helper.make_tensor_value_info(n.output[0], 0, None) for n in nodes)
    model.graph.initializer.extend(helper.make_tensor(k, 1, [], [float(v)]) for k, v in constants.items())
    return model


@requires_gpu
@pytest.mark.parametrize("size,kernel", [(4096, "compute/unary4.wgsl"), (1027, "compute/unary.wgsl")])
@pytest.mark.parametrize("name", [n for n in ONNX_OPS if ACTIVATIONS[n].wgsl is not None])
def test_wgsl_matches_the_kernel(name, size, kernel, shaders):
    x = _inputs(size)
    got = compare(_model(name, x), {"x": x}, rtol=1e-5, atol=1e-6)
    assert len(got) == len(_cases(name))
    assert set(shaders) == {kernel}, (name, shaders)


@requires_gpu
@pytest.mark.parametrize("name", sorted(FUSABLE))
def test_wgsl_matches_the_kernel_fused_into_matmul(name):
    rng = np.random.default_rng(7)
    a = (rng.standard_normal((6, 16)) * 2).astype(np.float32)
    w = (rng.standard_normal((16, 12)) * 2).astype(np.float32)
    attrs = _cases(name)[-1]
    act = ACTIVATIONS[name]
    model = node_model("MatMul", {"a": a}, constants={"w": w}, opset=max(17, act.versions[-1]))
    model.graph.node[0].output[0] = "t"
    if act.inputs_from is not None:
        bounds = {k: np.asarray(v, np.float32).reshape(()) for k, v in attrs.items()}
        for k, v in bounds.items():
            model.graph.initializer.append(helper.make_tensor(k, 1, [], [float(v)]))
        model.graph.node.append(helper.make_node(name, ["t", *[k if k in bounds else "" for k in act.attrs]],
                                                 ["y0"]))
    else:
        model.graph.node.append(helper.make_node(name, ["t"], ["y0"], **attrs))
    import wgsentis as ws

    layers = ws.load_model(model).layers
    assert len(layers) == 1 and layers[0].fused_activation[0] == name  # FuseActivation read the table
    compare(model, {"a": a}, rtol=1e-5, atol=1e-5)
