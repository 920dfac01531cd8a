"""Fuzzing the loader and the backends with hypothesis (issue 18), on a small derandomized budget so that CI is
reproducible; ``tools/fuzz.py`` runs the same strategies for as long as one likes (``--examples``, ``--seed``).

- Mutated real models (bytes and ModelProtos) load or raise ModelLoadError, and a model that loads runs on the
  CPU or raises a WgSentisError. The campaign runs in a child process: a crash in native code (protobuf, ONNX
  shape inference) must fail the test, not end the test session.
- Random small graphs of supported ops give the numpy backend's answer on gpu-compute, and the numpy backend
  gives ONNX Runtime's.
- What the fuzzer found, kept as regressions."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import fuzz
import onnx
import pytest
from helpers import F, make_model, requires_gpu
from hypothesis import HealthCheck, given, settings
from onnx import helper

import wgsentis as ws
from wgsentis.errors import ModelLoadError

TOOL = Path(fuzz.__file__)
CI = settings(max_examples=15, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))


def test_mutated_models_load_or_raise_model_load_error_and_never_crash():
    done = subprocess.run([sys.executable, "-W", "ignore", str(TOOL), "load", "--examples", "400"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    summary = done.stdout.strip().splitlines()[-1]
    outcomes = dict(part.rsplit(" ", 1) for part in summary.split(": ", 1)[1].split(", "))
    # the campaign reached both sides of the property: refusals, and mutated models that still ran
    assert int(outcomes.get("refused", 0)) > 0 and int(outcomes.get("ran", 0)) > 0, summary


def test_the_loader_property_tells_a_refusal_from_a_run():
    assert fuzz.check_load(b"\x08\x01 not a model") == "refused"
    assert fuzz.check_load(fuzz.seed_models()["sample"]) == "ran"
    assert fuzz.check_load(fuzz.attribute_zoo()) == "ran"


@requires_gpu
@CI
@given(fuzz.random_graphs())
def test_random_graphs_give_the_numpy_answer_on_gpu_compute(case):
    model, feeds = case
    fuzz.check_graph(model, feeds, "gpu-compute", with_ort=False)


@CI
@given(fuzz.random_graphs())
def test_random_graphs_give_onnxruntimes_answer_on_the_cpu(case):
    pytest.importorskip("onnxruntime")
    model, feeds = case
    fuzz.check_graph(model, feeds, "cpu", with_ort=True)


# -- regressions ---------------------------------------------------------------------------------------------------
def _with_bad_utf8(field: str) -> bytes:
    """A one-Relu model whose ``field`` holds bytes that are not UTF-8 (protobuf's python runtime then hands
    ONNX's proto2 strings back as bytes)."""
    mark = "Q\u00e9Q"
    x = "x" + mark if field == "input-name" else "x"
    node = helper.make_node("R" + mark if field == "op-type" else "Relu", [x], ["y"],
                            name="n" + mark if field == "node-name" else "n",
                            domain="d" + mark if field == "domain" else "")
    if field == "attribute-name":
        node.attribute.append(helper.make_attribute("a" + mark, 1))
    model = make_model([node], [(x, F, [2])], [("y", F, [2])],
                       domains=[("d" + mark, 1)] if field == "domain" else ())
    return model.SerializeToString().replace("\u00e9".encode(), b"\xff\xa9")


@pytest.mark.parametrize("field", ["op-type", "domain", "attribute-name", "input-name", "node-name"])
def test_a_string_that_is_not_utf8_is_a_model_load_error(field):
    data = _with_bad_utf8(field)
    assert isinstance(onnx.load_model_from_string(data), onnx.ModelProto)  # protobuf itself accepts it
    with pytest.raises(ModelLoadError):
        ws.load_model(data)
