"""RNN, GRU and LSTM on gpu-compute vs the CPU backend: directions, layouts, optional inputs, peepholes,
input_forget, linear_before_reset, clip, sequence_lens, activations, and the 1 + seq_len dispatches."""

from __future__ import annotations

import numpy as np
import pytest

import wgsentis as ws
import gpu_check

pytestmark = gpu_check.requires_gpu

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
DIRECTIONS = ["forward", "reverse", "bidirectional"]


def _case(op: str, seq: int, batch: int, inp: int, hidden: int, *, direction: str = "forward", layout: int = 0,
          bias: bool = True, init: bool = True, peep: bool = False, lens: list[int] | None = None,
          outputs: list[str] | None = None, seed: int = 0, weights_as_inputs: bool = False, **attrs):
    """(model, feeds) of one recurrent node; weights are initializers (or graph inputs, which the GPU
    program reads as given instead of repacking them on the host), X / states / lens graph inputs."""
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
    model = gpu_check.node_model(op, feeds, n_out, consts, opset=14, input_order=order, direction=direction,
                                 layout=layout, hidden_size=hidden, **attrs)
    if outputs is not None:  # "" marks an output that is not requested
        node = model.graph.node[0]
        del node.output[:]
        node.output.extend(outputs)
        del model.graph.output[:]
        model.graph.output.extend(
            gpu_check.helper.make_tensor_value_info(o, gpu_check.onnx.TensorProto.UNDEFINED, None)
            for o in outputs if o)
    return model, feeds


@pytest.mark.parametrize("op", list(GATES))
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("layout", [0, 1])
def test_directions_layouts(op, direction, layout):
    model, feeds = _case(op, 5, 3, 17, 33, direction=direction, layout=layout, peep=True, seed=layout)
    gpu_check.compare(model, feeds)


@pytest.mark.parametrize("op", list(GATES))
@pytest.mark.parametrize(("seq", "batch", "inp", "hidden", "bias", "init"), [
    (1, 1, 1, 1, False, False),
    (7, 2, 3, 5, True, False),
    (2, 3, 9, 1, False, True),
    (4, 1, 16, 70, True, True),  # more hidden units than one workgroup (GRU loops inside its row)
])
def test_shapes_optional_inputs(op, seq, batch, inp, hidden, bias, init):
    model, feeds = _case(op, seq, batch, inp, hidden, direction="bidirectional", bias=bias, init=init,
                         peep=bias, seed=seq + hidden)
    gpu_check.compare(model, feeds)


@pytest.mark.parametrize("op", list(GATES))
def test_weights_as_inputs(op):
    model, feeds = _case(op, 4, 3, 6, 9, direction="bidirectional", layout=1, peep=True, weights_as_inputs=True)
    gpu_check.compare(model, feeds)


@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("op", list(GATES))
def test_sequence_lens(op, layout):
    # Lengths 0, short and full: finished sequences keep their state and write zeros to Y.
    model, feeds = _case(op, 4, 3, 5, 6, direction="bidirectional", layout=layout, lens=[4, 0, 2])
    gpu_check.compare(model, feeds)


def test_lstm_input_forget_clip_peepholes():
    model, feeds = _case("LSTM", 6, 2, 7, 9, direction="bidirectional", peep=True, input_forget=1, clip=0.7)
    gpu_check.compare(model, feeds)


@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_linear_before_reset(lbr):
    model, feeds = _case("GRU", 5, 3, 4, 11, direction="bidirectional", linear_before_reset=lbr, clip=2.0)
    gpu_check.compare(model, feeds)


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
    gpu_check.compare(model, feeds)


@pytest.mark.parametrize(("op", "outputs"), [
    ("RNN", ["y0"]), ("GRU", ["", "y1"]), ("LSTM", ["", "", "y2"]), ("LSTM", ["y0", "", "y2"]),
])
def test_requested_outputs(op, outputs):
    model, feeds = _case(op, 3, 2, 4, 5, direction="reverse", layout=1, outputs=outputs)
    gpu_check.compare(model, feeds)


@pytest.mark.parametrize("op", list(GATES))
def test_dispatch_count(op):
    # One projection + one step per time index, both directions in the same dispatches.
    seq = 6
    model, feeds = _case(op, seq, 2, 3, 4, direction="bidirectional")
    with ws.Worker(ws.load_model(model), "gpu-compute") as worker:
        worker.run(feeds)
        assert len(worker.program.last_plan.steps) == 1 + seq


def test_empty_sequence_falls_back():
    model, feeds = _case("LSTM", 0, 2, 3, 4)
    gpu_check.compare(model, feeds, allow_fallback=True)
