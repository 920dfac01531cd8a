"""RNN, GRU and LSTM on gpu-pixel vs the CPU backend (rnn_pixel): every direction, both layouts, sequence_lens
(shorter than the sequence, 0), initial states, peepholes, input_forget, linear_before_reset, clip, activations,
odd hidden sizes, weights as graph inputs, long sequences (Y joined over several draws) and each output alone."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_check import compare, node_model
from helpers import requires_gpu
from onnx import TensorProto, helper

import wgsentis as ws
from wgsentis.backends import gpu_pixel

pytestmark = requires_gpu

PIXEL = "gpu-pixel"
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
DIRECTIONS = ["forward", "reverse", "bidirectional"]


def _case(op: str, seq: int, batch: int, inp: int, hidden: int, *, direction: str = "forward", layout: int = 0,
          bias: bool = True, init: bool = True, peep: bool = False, lens: list[int] | None = None,
          outputs: list[str] | None = None, seed: int = 0, weights_as_inputs: bool = False, **attrs):
    """(model, feeds) of one recurrent node; weights are initializers (or graph inputs, which the program
    rearranges with draws instead of packing them on the host), X / states / lens graph inputs."""
    rng = np.random.default_rng(seed)
    g, d = GATES[op], 2 if direction == "bidirectional" else 1
    x = rng.standard_normal((batch, seq, inp) if layout else (seq, batch, inp)).astype(np.float32)
    feeds = {"X": x}
    consts = {"W": (rng.standard_normal((d, g * hidden, inp)) * 0.5).astype(np.float32),
              "R": (rng.standard_normal((d, g * hidden, hidden)) * 0.5).astype(np.float32)}
    order = ["X", "W", "R"]
    if bias:
        consts["B"] = (rng.standard_normal((d, 2 * g * hidden)) * 0.5).astype(np.float32)
    order.append("B" if bias else "")
    if lens is not None:
        feeds["L"] = np.array(lens, np.int32)
    order.append("L" if lens is not None else "")
    state = (batch, d, hidden) if layout else (d, batch, hidden)
    if init:
        feeds["h0"] = rng.standard_normal(state).astype(np.float32)
    order.append("h0" if init else "")
    if op == "LSTM":
        if init:
            feeds["c0"] = rng.standard_normal(state).astype(np.float32)
        order.append("c0" if init else "")
        if peep:
            consts["P"] = rng.standard_normal((d, 3 * hidden)).astype(np.float32)
        order.append("P" if peep else "")
    while order[-1] == "":
        order.pop()
    n_out = 3 if op == "LSTM" else 2
    if weights_as_inputs:
        feeds.update(consts)
        consts = {}
    model = node_model(op, feeds, n_out, consts, opset=14, input_order=order, direction=direction, layout=layout,
                       hidden_size=hidden, **attrs)
    if outputs is not None:  # "" marks an output that is not requested
        node = model.graph.node[0]
        del node.output[:]
        node.output.extend(outputs)
        del model.graph.output[:]
        model.graph.output.extend(helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs if o)
    return model, feeds


def check(model, feeds, rtol=1e-4, atol=1e-5):
    return compare(model, feeds, rtol=rtol, atol=atol, backend=PIXEL)


@pytest.mark.parametrize("op", list(GATES))
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("layout", [0, 1])
def test_directions_layouts(op, direction, layout):
    model, feeds = _case(op, 5, 3, 17, 33, direction=direction, layout=layout, peep=True, seed=layout)
    check(model, feeds)


@pytest.mark.parametrize("op", list(GATES))
@pytest.mark.parametrize(("seq", "batch", "inp", "hidden", "bias", "init"), [
    (1, 1, 1, 1, False, False),
    (7, 2, 3, 5, True, False),
    (2, 3, 9, 1, False, True),
    (3, 1, 6, 7, True, True),
    (4, 1, 16, 70, True, True),
])
def test_shapes_optional_inputs(op, seq, batch, inp, hidden, bias, init):
    model, feeds = _case(op, seq, batch, inp, hidden, direction="bidirectional", bias=bias, init=init,
                         peep=bias, seed=seq + hidden)
    check(model, feeds)


@pytest.mark.parametrize("op", list(GATES))
def test_weights_as_inputs(op):
    """W, R, B and P as graph inputs: rearranged on the device (padded W^T, folded biases, R blocked by unit)."""
    model, feeds = _case(op, 4, 3, 6, 9, direction="bidirectional", layout=1, peep=True, weights_as_inputs=True)
    check(model, feeds)


def test_gru_linear_before_reset_weights_as_inputs():
    model, feeds = _case("GRU", 3, 2, 5, 6, direction="bidirectional", weights_as_inputs=True, linear_before_reset=1)
    check(model, feeds)


@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("op", list(GATES))
def test_sequence_lens(op, layout):
    """Lengths 0, short and full: finished sequences keep their state and write zeros to Y."""
    model, feeds = _case(op, 4, 3, 5, 6, direction="bidirectional", layout=layout, lens=[4, 0, 2], peep=True)
    check(model, feeds)


@pytest.mark.parametrize("op", list(GATES))
def test_sequence_lens_without_initial_state(op):
    model, feeds = _case(op, 5, 4, 3, 3, direction="reverse", init=False, lens=[1, 5, 3, 2])
    check(model, feeds)


@pytest.mark.parametrize(("op", "lens"), [("LSTM", [3, 1]), ("GRU", [4, 4])])
def test_sequence_lens_as_an_int64_constant(op, lens):
    """Host lengths: uploaded as int32; all full, they are dropped (no mask) as the CPU kernel does."""
    model, feeds = _case(op, 4, 2, 3, 3, direction="bidirectional", layout=1)
    node = model.graph.node[0]
    node.input.insert(4, "L")
    del node.input[5:]
    node.input.extend(["h0"] + (["c0"] if op == "LSTM" else []))
    model.graph.initializer.append(helper.make_tensor("L", TensorProto.INT64, [2], lens))
    check(model, feeds)


def test_lstm_input_forget_clip_peepholes():
    model, feeds = _case("LSTM", 6, 2, 7, 9, direction="bidirectional", peep=True, input_forget=1, clip=0.7)
    check(model, feeds)


@pytest.mark.parametrize("lbr", [0, 1])
@pytest.mark.parametrize("init", [False, True])
def test_gru_linear_before_reset(lbr, init):
    model, feeds = _case("GRU", 5, 3, 4, 11, direction="bidirectional", linear_before_reset=lbr, clip=2.0,
                         init=init)
    check(model, feeds)


@pytest.mark.parametrize("op", ["RNN", "GRU"])
def test_clip(op):
    model, feeds = _case(op, 4, 2, 5, 7, direction="bidirectional", clip=0.3)
    check(model, feeds)


@pytest.mark.parametrize(("op", "acts", "alphas", "betas"), [
    ("RNN", ["Relu", "LeakyRelu"], [0.2], None),
    ("RNN", ["ScaledTanh", "Affine"], [0.9, 0.5], [1.3, 0.1]),
    ("GRU", ["HardSigmoid", "Softsign", "Sigmoid", "Elu"], [0.3, 0.7], [0.4]),
    ("LSTM", ["Sigmoid", "Softplus", "ThresholdedRelu", "HardSigmoid", "Tanh", "Affine"], [0.1, 0.25, 1.5],
     [0.6, -0.2]),
])
def test_activations(op, acts, alphas, betas):
    attrs = {"activations": acts}
    if alphas:
        attrs["activation_alpha"] = alphas
    if betas:
        attrs["activation_beta"] = betas
    model, feeds = _case(op, 3, 2, 5, 7, direction="bidirectional", **attrs)
    check(model, feeds)


@pytest.mark.parametrize(("op", "outputs"), [
    ("RNN", ["y0"]), ("RNN", ["", "y1"]), ("GRU", ["y0", ""]), ("GRU", ["", "y1"]), ("LSTM", ["y0"]),
    ("LSTM", ["", "y1"]), ("LSTM", ["", "", "y2"]), ("LSTM", ["y0", "", "y2"]),
])
@pytest.mark.parametrize("layout", [0, 1])
def test_requested_outputs(op, outputs, layout):
    model, feeds = _case(op, 3, 2, 4, 5, direction="reverse", layout=layout, outputs=outputs, peep=True)
    check(model, feeds)


@pytest.mark.parametrize(("op", "direction", "layout"), [("LSTM", "bidirectional", 0), ("GRU", "reverse", 1),
                                                         ("RNN", "forward", 0)])
def test_long_sequence(op, direction, layout):
    """50 steps: Y joins the steps' states over several draws (12 at a time, then the joins)."""
    model, feeds = _case(op, 50, 2, 6, 5, direction=direction, layout=layout, lens=[50, 37], seed=3)
    check(model, feeds, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize(("seq", "joins"), [(6, 1), (50, 6)])
def test_draw_count(monkeypatch, seq, joins):
    """One product, one draw per step, and Y's joins: one for a short sequence, 12 steps a draw then the last
    join for a long one."""
    seen: list[str] = []
    draw = gpu_pixel.PixelRecorder.draw

    def spy(self, shader, *args, **kwargs):
        seen.append(shader)
        return draw(self, shader, *args, **kwargs)

    monkeypatch.setattr(gpu_pixel.PixelRecorder, "draw", spy)
    model, feeds = _case("LSTM", seq, 2, 3, 4, direction="bidirectional", outputs=["y0", "y1", "y2"])
    with ws.Worker(ws.load_model(model), PIXEL) as worker:
        worker.run(feeds)
        assert worker.stats()["fallback_layers"] == []
    assert seen.count("pixel/matmul.wgsl") == 1
    assert seen.count("pixel/rnn_lstm.wgsl") == seq
    assert seen.count("pixel/rnn_y.wgsl") == joins


def test_empty_sequence_falls_back():
    model, feeds = _case("LSTM", 0, 2, 3, 4)
    compare(model, feeds, allow_fallback=True, backend=PIXEL)
