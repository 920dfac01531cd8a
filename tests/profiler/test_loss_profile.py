"""Sparsify's loss profile (``ws.loss_profile``, ``wgsentis profile --loss``): every prunable layer pruned alone at
each level, and how far the outputs move (relative L2; KL divergence and top-1 agreement for classifiers)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import zoo
from helpers import requires_gpu

import wgsentis as ws
from wgsentis.cli import main
from wgsentis.errors import InputError

SAMPLE = str(Path(ws.__file__).resolve().parent / "data" / "sample.onnx")
LEVEL_KEYS = {"sparsity", "rel_l2", "kl", "top1_agreement"}
LAYER_KEYS = {"name", "op_type", "weight_names", "params", "flops", "sensitivity", "levels"}


def _level_means(lp: ws.LossProfile) -> list[float]:
    """The mean relative L2 change over the layers, per level."""
    return [float(np.mean([e["levels"][k]["rel_l2"] for e in lp.layers])) for k in range(len(lp["levels"]))]


def test_level_zero_changes_nothing_and_the_document_has_every_field():
    lp = ws.loss_profile(SAMPLE, levels=(0.0, 0.5, 0.9), timing=False)
    data = json.loads(json.dumps(lp.to_dict()))
    assert data["levels"] == [0.0, 0.5, 0.9] and data["inputs"] == "random" and data["complete"]
    assert data["metrics"] == ["rel_l2", "kl", "top1_agreement"]
    assert {e["op_type"] for e in data["layers"]} == {"Conv", "FusedConv", "Gemm"}  # every prunable layer
    for e in data["layers"]:
        assert LAYER_KEYS <= set(e) and e["params"] > 0 and e["flops"] > 0
        assert all(LEVEL_KEYS <= set(lv) for lv in e["levels"])
        zero = e["levels"][0]
        assert zero["rel_l2"] == 0 and zero["kl"] == 0 and zero["top1_agreement"] == 1.0
        assert e["sensitivity"] == pytest.approx(np.mean([lv["rel_l2"] for lv in e["levels"]]))
    assert "seeded random" in lp.table()


@pytest.mark.parametrize("name,dense", [("ppocr_cls", False), ("orientation", False), ("shufflenet", True)])
def test_sensitivity_grows_with_sparsity_on_real_weights(name, dense):
    proto = zoo.load_proto(name, dense=dense)
    feeds = zoo.input_feeds(name, proto)
    model = ws.load_model(proto, name=name)
    prunable = [layer.name for layer in model.layers
                if layer.op_type in ("Conv", "FusedConv", "Gemm", "MatMul", "ConvTranspose")]
    layers = prunable[:: max(1, len(prunable) // 12)]  # a dozen layers across the depth keeps the test short
    # Up to 0.8: past it a saturating softmax output (orientation's 4 classes) can move less as more is pruned.
    lp = ws.loss_profile(model, inputs=feeds, levels=(0.2, 0.4, 0.6, 0.8), layers=layers, timing=False)
    assert lp["inputs"] == "user" and len(lp.layers) == len(layers)
    means = _level_means(lp)
    assert all(a < b for a, b in itertools.pairwise(means)), means


def test_classifier_metrics_are_null_for_other_outputs():
    proto = zoo.load_proto("ppocr_det")
    model = ws.load_model(proto, name="ppocr_det")
    first = next(layer.name for layer in model.layers if layer.op_type == "Conv")
    x = np.random.default_rng(0).random((1, 3, 64, 64), dtype=np.float32)
    lp = ws.loss_profile(model, inputs={"x": x}, levels=(0.5,), layers=[first], timing=False)
    (level,) = lp.layers[0]["levels"]
    assert level["rel_l2"] > 0 and level["kl"] is None and level["top1_agreement"] is None


def test_a_time_budget_stops_and_says_so():
    lp = ws.loss_profile(SAMPLE, levels=(0.5,), time_budget=1e-9, timing=False)
    assert not lp["complete"] and lp["profiled_layers"] < len(lp.layers)
    skipped = [e for e in lp.layers if e.get("skipped")]
    assert skipped and all(e["sensitivity"] is None and e["levels"] == [] for e in skipped)
    assert "time budget" in lp.table()


@pytest.mark.parametrize("kwargs,culprit", [
    ({"levels": (0.5, 1.0)}, "levels"), ({"levels": ("a",)}, "levels"), ({"levels": ()}, "levels"),
    ({"layers": ["nope"]}, "'nope' (not a layer)"), ({"layers": ["pool"]}, "'pool' (no constant weight"),
    ({"time_budget": 0}, "time_budget"), ({"backend": "tpu"}, "tpu"), ({"inputs": {"image": np.zeros(3)}}, "image"),
])
def test_bad_arguments_are_typed_errors_naming_them(kwargs, culprit):
    with pytest.raises(InputError) as info:
        ws.loss_profile(SAMPLE, timing=False, **kwargs)
    assert culprit in str(info.value)


def test_json_round_trip(tmp_path):
    lp = ws.loss_profile(SAMPLE, levels=(0.5, 0.9), timing=False)
    path = lp.to_json(tmp_path / "loss.json")
    assert "loss_profile" in json.loads(path.read_text())
    again = ws.LossProfile.from_json(path)
    assert again.to_dict() == json.loads(json.dumps(lp.to_dict()))
    with pytest.raises(InputError, match="not a wgsentis loss profile"):
        ws.LossProfile.from_json(tmp_path / "missing.json")


@requires_gpu
@pytest.mark.parametrize("backend", ["gpu-compute", "gpu-pixel"])
def test_a_reference_model_completes_on_every_gpu_backend(backend):
    """The metrics run on the CPU oracle; each layer's dense time is measured on the backend profiled."""
    proto = zoo.load_proto("ppocr_cls")
    lp = ws.loss_profile(proto, inputs=zoo.input_feeds("ppocr_cls", proto), levels=(0.5, 0.9), backend=backend)
    assert lp["backend"] == backend and lp["complete"]
    assert all(e["time_ms"] is not None and e["time_ms"] >= 0 and e["sensitivity"] is not None for e in lp.layers)


def test_the_command_line_with_inputs_from_a_folder(tmp_path, capsys):
    folder = tmp_path / "inputs"
    folder.mkdir()
    np.save(folder / "image.npy", np.random.default_rng(1).random((1, 3, 32, 32), dtype=np.float32))
    out = tmp_path / "lp.json"
    assert main(["profile", "--loss", "--backend", "cpu", "--inputs", str(folder), "--levels", "0.5,0.9",
                 "--layers", "stem_conv,classifier", "--json", str(out), "--quiet", "--no-timing"]) == 0
    text = capsys.readouterr().out
    assert "loss profile" in text and "inputs user" in text and "stem_conv" in text
    data = json.loads(out.read_text())["loss_profile"]
    assert [e["name"] for e in data["layers"]] == ["stem_conv", "classifier"] and data["levels"] == [0.5, 0.9]
    (folder / "image.npy").unlink()
    assert main(["profile", "--loss", "--inputs", str(folder), "--quiet"]) == 1
    assert "missing ['image.npy']" in capsys.readouterr().err
