"""float16 elementwise ops on every backend compute in float32 and round once, at the float16 output, as ONNX
Runtime's CPU provider and the GPU backends do: within one float16 step of the exact (float64) result rounded to
float16. numpy's own float16 ufuncs round after every internal step, and exp overflows past 11: a float16 Sigmoid
at -12 gave 0 on the cpu backend (exactly 6.1e-6), and a float16 model's sigmoid maps drifted 6% from ORT."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import BACKENDS, make_model
from onnx import TensorProto, helper

import wgsentis as ws

X = np.concatenate([np.linspace(-30, 30, 1201), [-12.0, -11.5, 11.5, 12.0, 0.0, -0.0]]).astype(np.float16)
EXACT = {
    "Sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "Tanh": np.tanh,
    "Softplus": lambda x: np.logaddexp(0, x),
    "Exp": np.exp,
    "Erf": np.vectorize(math.erf),
    "Elu": lambda x: np.where(x > 0, x, np.expm1(x)),
}


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Distance in float16 steps (finite values), via their ordered integer codes."""
    def code(v):
        i = v.astype(np.float16).view(np.int16).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFF), i)
    return np.abs(code(got) - code(want))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", list(EXACT))
def test_float16_activation_is_the_exact_value_rounded_once(backend, op):
    x = X[np.abs(X.astype(np.float64)) < 11] if op == "Exp" else X  # exp past 11 overflows float16 anyway
    model = make_model([helper.make_node(op, ["x"], ["y"])], [("x", TensorProto.FLOAT16, [x.size])],
                       [("y", TensorProto.FLOAT16, None)])
    with ws.Worker(ws.load_model(model), backend) as worker:
        got = worker.run({"x": x})["y"]
        if backend != "cpu":
            assert worker.stats()["fallback_layers"] == []
    want = EXACT[op](x.astype(np.float64)).astype(np.float16)
    assert got.dtype == np.float16
    steps = _ulps(got, want)
    assert steps.max() <= 1, (f"{op}: {int((steps > 1).sum())} elements more than one float16 step off, e.g. "
                              f"x={x[steps.argmax()]}: {got[steps.argmax()]} for {want[steps.argmax()]}")
