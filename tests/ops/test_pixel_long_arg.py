"""ArgMax / ArgMin on gpu-pixel along an axis too long for one lane's loop (lavapipe's loop limit: a language model's
vocabulary of 50257): the best value by the split Max / Min reduction, the positions holding it as float keys, their
min (first) or max (last), so the layer stays on the device instead of falling back and reading the whole axis back.
Indices as the cpu gives them: ties, NaNs (which win, as in numpy), select_last_index, keepdims, blocked and
unblocked axes."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import F, I64, make_model, requires_gpu
from onnx import helper

import wgsentis as ws

pytestmark = requires_gpu
RNG = np.random.default_rng(3131)
CASES = {"vocab": ((1, 1, 50257), -1), "middle rows": ((2, 3, 20001), 2), "axis 0": ((30001, 3), 0)}


def _run(op: str, shape: tuple[int, ...], axis: int, last: int, keepdims: int, x: np.ndarray, backend: str):
    model = make_model([helper.make_node(op, ["x"], ["y"], axis=axis, keepdims=keepdims, select_last_index=last)],
                       [("x", F, list(shape))], [("y", I64, None)])
    with ws.Worker(ws.load_model(model), backend) as worker:
        y = worker.run({"x": x})["y"]
        return y, worker.stats()


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("last", [0, 1])
@pytest.mark.parametrize("nan", [False, True])
def test_a_long_axis_arg_reduction_stays_on_the_device_with_the_cpus_indices(op, case, last, nan):
    shape, axis = CASES[case]
    x = np.round(RNG.standard_normal(shape).astype(np.float32) * 4) / 4  # ties in every row
    if nan:
        x.reshape(-1)[[5, 100, 7001]] = np.nan
    for keepdims in (0, 1):
        want, _ = _run(op, shape, axis, last, keepdims, x, "cpu")
        got, stats = _run(op, shape, axis, last, keepdims, x, "gpu-pixel")
        assert stats["fallback_layers"] == [], stats["placements"]
        assert got.dtype == np.int64 and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_the_vocabulary_argmax_reads_only_the_token():
    x = RNG.standard_normal((1, 1, 50257)).astype(np.float32)
    got, stats = _run("ArgMax", x.shape, -1, 0, 0, x, "gpu-pixel")
    assert int(got.reshape(-1)[0]) == int(x.argmax())
    assert 0 < stats["download_bytes"] <= 8  # the index (an int32 word on gpu-pixel), not the 201 KB of logits
