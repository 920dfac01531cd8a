"""Every reference model of shared/MODELS.md runs on the CPU backend and matches ONNX Runtime:
relative L2 error per output at most 1e-3. The zoo "light" models run as shipped (also against
their shipped output) and densified (seeded random weights in place of the splat weights)."""

from __future__ import annotations

import numpy as np
import pytest
import zoo

import wgsentis as ws

TOLERANCE = 1e-3
CASES = [(name, False) for name in zoo.ALL_MODELS] + [(name, True) for name in zoo.LIGHT_MODELS]


@pytest.mark.parametrize("name,dense", CASES, ids=[f"{n}-{'dense' if d else 'shipped'}" for n, d in CASES])
def test_model_matches_onnxruntime_on_cpu(name, dense):
    proto = zoo.load_proto(name, dense=dense)
    feeds = zoo.input_feeds(name, proto)
    reference = zoo.ort_outputs(proto, feeds)
    model = ws.load_model(proto, name=name)
    with ws.Worker(model, "cpu", threads=2) as worker:
        outputs = worker.run(feeds)
        assert worker.stats()["fallback_layers"] == []
    assert set(outputs) == set(reference)
    for out_name, ref in reference.items():
        err = zoo.rel_l2(outputs[out_name], ref)
        assert err <= TOLERANCE, f"{name} output {out_name}: relative L2 error {err:.2e}"
    expected = None if dense else zoo.shipped_expected(name)
    if expected is not None:
        (out,) = outputs.values()
        assert zoo.rel_l2(out, expected) <= TOLERANCE


def test_batch_of_two_matches_onnxruntime():
    proto = zoo.load_proto("orientation")
    feeds = zoo.input_feeds("orientation", proto, batch=2)
    reference = zoo.ort_outputs(proto, feeds)
    outputs = ws.Worker(ws.load_model(proto), "cpu").run(feeds)
    for out_name, ref in reference.items():
        assert zoo.rel_l2(outputs[out_name], ref) <= TOLERANCE
    assert next(iter(outputs.values())).shape[0] == 2
    assert not np.allclose(*next(iter(outputs.values())))  # two different images, two answers
