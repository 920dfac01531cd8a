"""The cpu backend's Winograd F(4x4, 3x3) convolution against ONNX Runtime: exact and partial edge tiles,
asymmetric pads, batches, no bias, the fused residual; the weights transformed once per layer; and the
shapes it leaves to im2col. Also each fused activation on every cpu convolution path, which applies the
one-pass ones part by part (ConvEpilogue) and the others to the whole output."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import F, kept_between_runs, make_model, ort_outputs, spy_scratch
from onnx import helper

import wgsentis as ws
from wgsentis.ops import conv, conv_winograd, parallel


def _model(x_shape, m, attrs, *, bias=True, residual=False):
    rng = np.random.default_rng(21)
    c = x_shape[1]
    inits = {"w": (rng.standard_normal((m, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)}
    inputs = ["x", "w"]
    if bias:
        inits["b"] = rng.standard_normal(m).astype(np.float32)
        inputs.append("b")
    nodes = [helper.make_node("Conv", inputs, ["c"], name="conv", **attrs)]
    graph_inputs = [("x", F, list(x_shape))]
    if residual:
        nodes.append(helper.make_node("Add", ["c", "z"], ["s"], name="add"))
        nodes.append(helper.make_node("Relu", ["s"], ["y"], name="relu"))
        graph_inputs.append(("z", F, None))
    else:
        nodes.append(helper.make_node("Relu", ["c"], ["y"], name="relu"))
    return make_model(nodes, graph_inputs, [("y", F, None)], inits)


@pytest.mark.parametrize("x_shape,m,attrs,bias,residual", [
    ((1, 64, 28, 28), 64, {"pads": [1, 1, 1, 1]}, True, False),  # whole tiles
    ((2, 64, 26, 29), 48, {"pads": [1, 1, 1, 1]}, True, False),  # partial edge tiles, a batch
    ((1, 64, 28, 27), 32, {"pads": [0, 2, 1, 0]}, False, False),  # asymmetric pads, no bias
    ((1, 64, 27, 27), 32, {"auto_pad": "SAME_UPPER"}, True, True),  # FusedConv (residual add)
    ((1, 64, 30, 30), 32, {}, True, False),  # no padding at all
    ((1, 128, 12, 12), 64, {"pads": [1, 1, 1, 1]}, True, False),  # 9 tiles, no overhang, weights in cache
    ((1, 64, 14, 14), 16, {"pads": [1, 1, 1, 1]}, True, False),  # 16 tiles, 31% overhang
])
def test_winograd_matches_onnxruntime(x_shape, m, attrs, bias, residual, monkeypatch):
    monkeypatch.setattr(conv, "kn2row_applies", lambda *a: False)  # it would take the small-M shapes
    calls = []
    original = conv.conv_winograd_3x3
    monkeypatch.setattr(conv, "conv_winograd_3x3", lambda *a, **k: calls.append(1) or original(*a, **k))
    model = _model(x_shape, m, attrs, bias=bias, residual=residual)
    rng = np.random.default_rng(22)
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32)}
    if residual:  # SAME_UPPER keeps the spatial size
        feeds["z"] = rng.standard_normal((x_shape[0], m, x_shape[2], x_shape[3])).astype(np.float32)
    expected = ort_outputs(model, feeds)[0]
    wg = ws.load_model(model)
    if residual:
        assert [layer.op_type for layer in wg.layers] == ["FusedConv"]
    for threads in (1, 2):
        got = ws.Worker(wg, "cpu", threads=threads, spin_wait=False).run(feeds)["y"]
        rel = np.linalg.norm(got - expected) / np.linalg.norm(expected)
        assert rel < 1e-5, rel
        np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-4)
    assert calls


@pytest.mark.parametrize("spin_wait,separable", [(True, False), (False, True)])
def test_winograd_transform_form_follows_blas_threads(spin_wait, separable, monkeypatch):
    """Where BLAS runs two threads (spin-wait mode) the tile transforms are one product each, which BLAS
    splits; on the blocking pool (BLAS on one thread) small ones stay separable. Both match ORT."""
    model = _model((1, 64, 28, 28), 48, {"pads": [1, 1, 1, 1]})
    requests = spy_scratch(monkeypatch)
    x = np.random.default_rng(26).standard_normal((1, 64, 28, 28)).astype(np.float32)
    with ws.Worker(ws.load_model(model), "cpu", threads=2, spin_wait=spin_wait) as worker:
        got = worker.run({"x": x})["y"]
        assert parallel.blas_threads() == (2 if spin_wait else 1)
    np.testing.assert_allclose(got, ort_outputs(model, {"x": x})[0], rtol=1e-4, atol=1e-4)
    keys = {key for key, _shape in requests}
    assert "wino_d" in keys and ("wino_rows" in keys) == separable


def test_winograd_weights_are_transformed_once_per_layer(monkeypatch):
    transforms = []
    original = conv_winograd.winograd_weights
    monkeypatch.setattr(conv_winograd, "winograd_weights", lambda w: transforms.append(1) or original(w))
    model = _model((1, 64, 28, 28), 48, {"pads": [1, 1, 1, 1]})
    x = np.random.default_rng(23).standard_normal((1, 64, 28, 28)).astype(np.float32)
    with ws.Worker(ws.load_model(model), "cpu") as worker:
        first = worker.run({"x": x})["y"]
        second = worker.run({"x": x})["y"]
    np.testing.assert_array_equal(first, second)
    assert len(transforms) == 1


def test_im2col_weights_with_bias_are_built_once_per_layer():
    """im2col's weights with the bias as a last column are a copy of all the weights: made on the first
    run and kept, where W and B are constants."""
    model = _model((1, 64, 7, 7), 64, {"pads": [1, 1, 1, 1]})  # 4 tiles: im2col
    x = np.random.default_rng(27).standard_normal((1, 64, 7, 7)).astype(np.float32)
    kept, first, second = kept_between_runs(model, {"x": x}, "im2col_weights", 1)
    assert kept.shape == (64, 64 * 9 + 1)
    np.testing.assert_array_equal(first, second)
    np.testing.assert_allclose(first, ort_outputs(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("x_shape,m", [((1, 64, 28, 28), 48), ((1, 64, 7, 7), 48),  # Winograd, im2col
                                        ((1, 64, 28, 28), 32)])  # kn2row
def test_weights_fed_as_inputs_are_derived_again_each_run(x_shape, m):
    """A weight that is a graph input may change between runs, even as the same array changed in place:
    nothing derived from it is kept."""
    rng = np.random.default_rng(28)
    c = x_shape[1]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", pads=[1, 1, 1, 1])]
    model = make_model(nodes, [("x", F, list(x_shape)), ("w", F, [m, c, 3, 3]), ("b", F, [m])],
                       [("y", F, None)])
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32),
             "w": (rng.standard_normal((m, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32),
             "b": rng.standard_normal(m).astype(np.float32)}
    with ws.Worker(ws.load_model(model), "cpu") as worker:
        for _ in range(2):
            got = worker.run(feeds)["y"]
            np.testing.assert_allclose(got, ort_outputs(model, feeds)[0], rtol=1e-4, atol=1e-4)
            feeds["w"] *= -0.5  # the same arrays, changed in place
            feeds["b"] += 1
        assert not worker.program.steps[0].ctx.cache


@pytest.mark.parametrize("x_shape,m,attrs", [
    ((1, 64, 7, 7), 64, {"pads": [1, 1, 1, 1]}),  # 4 tiles: the transformed weights would not be reused
    ((1, 128, 13, 13), 128, {"pads": [1, 1, 1, 1]}),  # 13x13 outputs computed as 16x16: 51% overhang
    ((1, 512, 12, 12), 512, {"pads": [1, 1, 1, 1]}),  # 9 tiles, 38 MB of transformed weights
    ((1, 64, 28, 28), 8, {"pads": [1, 1, 1, 1]}),  # too few output channels
    ((1, 32, 28, 28), 64, {"pads": [1, 1, 1, 1]}),  # too few input channels
    ((1, 64, 16, 16), 64, {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ((1, 64, 16, 16), 64, {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
])
def test_winograd_leaves_other_shapes_to_im2col(x_shape, m, attrs, monkeypatch):
    monkeypatch.setattr(conv, "kn2row_applies", lambda *a: False)
    calls = []
    original = conv.conv_winograd_3x3
    monkeypatch.setattr(conv, "conv_winograd_3x3", lambda *a, **k: calls.append(1) or original(*a, **k))
    model = _model(x_shape, m, attrs)
    x = np.random.default_rng(24).standard_normal(x_shape).astype(np.float32)
    np.testing.assert_allclose(ws.Worker(ws.load_model(model), "cpu").run({"x": x})["y"],
                               ort_outputs(model, {"x": x})[0], rtol=1e-4, atol=1e-4)
    assert not calls


def test_winograd_is_left_out_where_the_kernel_options_say_so(monkeypatch):
    """Worker(kernels=KernelOptions(cpu_winograd=False)): a shape Winograd takes runs as im2col instead, on
    one and two threads (and kn2row keeps to its own shapes: it takes the small planes only beside Winograd)."""
    calls = []
    original = conv.conv_winograd_3x3
    monkeypatch.setattr(conv, "conv_winograd_3x3", lambda *a, **k: calls.append(1) or original(*a, **k))
    model = _model((1, 64, 28, 28), 64, {"pads": [1, 1, 1, 1]})
    x = np.random.default_rng(27).standard_normal((1, 64, 28, 28)).astype(np.float32)
    expected = ort_outputs(model, {"x": x})[0]
    loaded = ws.load_model(model)
    for threads in (1, 2):
        with ws.Worker(loaded, "cpu", threads=threads, spin_wait=False,
                       kernels=ws.KernelOptions(cpu_winograd=False)) as worker:
            np.testing.assert_allclose(worker.run({"x": x})["y"], expected, rtol=1e-4, atol=1e-4)
    assert not calls
    with ws.Worker(loaded, "cpu") as worker:  # the default takes it
        np.testing.assert_allclose(worker.run({"x": x})["y"], expected, rtol=1e-4, atol=1e-4)
    assert calls


ACTIVATIONS = [("Relu", {}, []), ("LeakyRelu", {"alpha": 0.2}, []), ("Clip", {}, [-0.5, 0.75]),
               ("Clip", {}, [-0.25, None]), ("HardSwish", {}, [])]
CONV_PATHS = [  # (x shape, w shape, attrs): the paths that apply an activation part by part, and one that does not
    ((1, 8, 9, 9), (16, 8, 1, 1), {}),  # 1x1: one product
    ((1, 3, 9, 9), (8, 3, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),  # im2col
    ((1, 64, 28, 28), (48, 64, 3, 3), {"pads": [1, 1, 1, 1]}),  # Winograd
    ((1, 64, 28, 28), (32, 64, 3, 3), {"pads": [1, 1, 1, 1]}),  # kn2row
    ((1, 6, 12, 12), (6, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 6}),  # depthwise columns
    ((1, 4, 9, 9), (8, 2, 3, 3), {"group": 2}),  # grouped: the activation after the whole output
]


@pytest.mark.parametrize("act,act_attrs,bounds", ACTIVATIONS)
@pytest.mark.parametrize("x_shape,w_shape,attrs", CONV_PATHS)
def test_fused_activation_on_every_cpu_conv_path(act, act_attrs, bounds, x_shape, w_shape, attrs):
    rng = np.random.default_rng(25)
    fan_in = int(np.prod(w_shape[1:]))  # outputs of order 1, where the activations bend
    inits = {"w": (rng.standard_normal(w_shape) / np.sqrt(fan_in)).astype(np.float32),
             "b": rng.standard_normal(w_shape[0]).astype(np.float32)}
    act_inputs = ["c"]
    for k, bound in enumerate(bounds):
        name = f"bound{k}"
        if bound is not None:
            inits[name] = np.array(bound, np.float32)
        act_inputs.append(name if bound is not None else "")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", **attrs),
             helper.make_node(act, act_inputs, ["y"], name="act", **act_attrs)]
    model = make_model(nodes, [("x", F, list(x_shape))], [("y", F, None)], inits, opset=14)
    wg = ws.load_model(model)
    assert [(layer.op_type, layer.fused_activation and layer.fused_activation[0]) for layer in wg.layers] == [
        ("Conv", act)]
    x = rng.standard_normal(x_shape).astype(np.float32)
    expected = ort_outputs(model, {"x": x})[0]
    for threads in (1, 2):
        got = ws.Worker(wg, "cpu", threads=threads, spin_wait=False).run({"x": x})["y"]
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
