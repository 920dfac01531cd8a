"""The HTML report in headless Chromium (its summary-type switch, the charts' names, the FLOP unit, the loss
profile chart), the Chrome trace's tracks, and the profile CLI."""

from __future__ import annotations

import copy
import html
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

import wgsentis as ws
from wgsentis.cli import main

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--enable-logging=stderr", "--v=0"]


def _script_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines()
            if "Uncaught" in line or ("CONSOLE" in line.upper() and "error" in line.lower())]


def _dump_dom(url: str, tmp: str) -> str:
    """The page's DOM once its scripts ran (headless Chromium), failing on any script error."""
    proc = subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={tmp}/profile", "--dump-dom", url],
                          capture_output=True, text=True, timeout=120)
    assert not _script_errors(proc.stderr), _script_errors(proc.stderr)
    assert 'data-ready="1"' in proc.stdout, proc.stdout[-2000:]
    return proc.stdout


def _svg_texts(dom: str, ident: str) -> list[str]:
    """The text of each <text> element of the svg with this id (the label before any tooltip <title>)."""
    found = re.search(rf'<svg id="{ident}"[^>]*>(.*?)</svg>', dom, re.S)
    assert found, f"no svg #{ident}"
    return [html.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)", found.group(1))]


def _chart_title(dom: str, ident: str) -> str:
    found = re.search(rf'<svg id="{ident}"[^>]*>.*?<text[^>]*class="chart-title"[^>]*>([^<]*)', dom, re.S)
    assert found, f"svg #{ident} has no title"
    return html.unescape(found.group(1))


@pytest.fixture(scope="module")
def cpu_profile(sample_path: str) -> ws.Profile:
    return ws.profile(sample_path, backend="cpu", threads=2, runs=3, warmup=1)


def test_chrome_trace_tracks(cpu_profile: ws.Profile, tmp_path: Path) -> None:
    trace = json.loads(cpu_profile.to_chrome_trace(tmp_path / "t.json").read_text())
    tracks = {ev["args"]["name"] for ev in trace["traceEvents"] if ev["name"] == "thread_name"}
    assert tracks == {"host recording", "CPU kernels"}
    events = [ev for ev in trace["traceEvents"] if ev["ph"] == "X"]
    assert all(ev["dur"] >= 0 and ev["ts"] >= 0 for ev in events)
    assert len([ev for ev in events if ev["cat"] == "layer"]) == len(cpu_profile.layers)


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (setup.sh installs it)")
def test_html_in_headless_chromium(cpu_profile: ws.Profile) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        page = cpu_profile.to_html(Path(tmp) / "report.html")
        assert "http://" not in page.read_text().replace("http://www.w3.org", "")  # self-contained
        shot = Path(tmp) / "shot.png"
        proc = subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={tmp}/profile",
                               f"--screenshot={shot}", "--window-size=1280,2000", page.as_uri()],
                              capture_output=True, text=True, timeout=120)
        errors = _script_errors(proc.stderr)
        assert not errors, errors
        assert shot.exists()
        data = shot.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        # A blank 1280x2000 page compresses to a few kB; text, bars and the table make it far larger.
        assert len(data) > 30_000, len(data)


LOSS_PROFILE = {  # the shape ws.loss_profile writes (docs/profiler.md), two layers at two levels
    "levels": [0.5, 0.9], "inputs": "random", "metrics": ["rel_l2", "kl", "top1_agreement"],
    "layers": [{"name": "stem_conv", "op_type": "Conv", "weight_names": ["stem.w"], "params": 432, "flops": 110592,
                "sensitivity": 0.21, "levels": [{"sparsity": 0.5, "rel_l2": 0.05, "kl": 0.001, "top1_agreement": 1.0},
                                                {"sparsity": 0.9, "rel_l2": 0.4, "kl": 0.02, "top1_agreement": 0.5}]},
               {"name": "classifier", "op_type": "Gemm", "weight_names": ["fc.w"], "params": 160, "flops": 330,
                "sensitivity": 0.02, "levels": [{"sparsity": 0.5, "rel_l2": 0.01, "kl": None},
                                                {"sparsity": 0.9, "rel_l2": 0.03, "kl": None}]}]}


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (setup.sh installs it)")
def test_html_switch_charts_and_flop_unit(cpu_profile: ws.Profile, tmp_path: Path) -> None:
    """The report's summary-type switch (baseline, then pruned at each level) redraws the op-type and
    per-layer charts with the estimates; every chart has a title and named axes, the per-layer chart names
    every layer; the FLOPs card uses a unit that fits (the ~290 kFLOP sample read "GFLOPs 0.000"); a
    loss profile, when the profile holds one, gets its chart with params beside each layer."""
    from wgsentis.profiler.profile import add_pruned_estimates

    data = copy.deepcopy(cpu_profile.to_dict())
    # The sample's layers are all memory-bound on the cpu: make one prunable layer compute-bound so the
    # pruned view must differ from the baseline.
    target = next(e for e in data["layers"] if e["prunable_weight"] and e["time_ms"] > 0)
    target["bound"] = "compute"
    add_pruned_estimates(data)
    data["loss_profile"] = LOSS_PROFILE
    page = ws.Profile(data).to_html(tmp_path / "report.html")
    base = _dump_dom(page.as_uri(), str(tmp_path))
    pruned = _dump_dom(page.as_uri() + "#summary=0.9", str(tmp_path))

    options = re.findall(r'<option value="([^"]*)"[^>]*>([^<]*)</option>', base)
    assert [v for v, _ in options] == ["baseline", "0.4", "0.6", "0.8", "0.9", "0.95"]
    assert dict(options)["0.9"] == "pruned 90% (estimated)"
    assert 'data-summary="baseline"' in base and 'data-summary="0.9"' in pruned

    assert _chart_title(base, "optypes").startswith("Time per op type: baseline (measured)")
    assert _chart_title(pruned, "optypes").startswith("Time per op type: pruned to 90% (estimated)")
    assert _chart_title(base, "layerchart") == "Time per layer, in execution order: baseline (measured)"
    assert _chart_title(pruned, "layerchart") == "Time per layer, in execution order: pruned to 90% (estimated)"
    assert _chart_title(base, "roofline").startswith("Roofline")
    for ident in ("optypes", "layerchart"):
        for dom, axis in ((base, "measured"), (pruned, "estimated")):
            assert any(t.startswith(axis) and t.endswith("(ms)") for t in _svg_texts(dom, ident)), ident
    for dom in (base, pruned):  # the per-layer chart names every layer
        texts = _svg_texts(dom, "layerchart")
        assert all(f"{e['name']} ({e['op_type']})" in texts for e in data["layers"])
    # the switched chart shows the estimate: the compute-bound layer at 10% of its time, the others unchanged
    label = f"{target['name']} ({target['op_type']})"
    for dom, ms in ((base, target["time_ms"]), (pruned, target["estimated_ms"]["0.9"])):
        texts = _svg_texts(dom, "layerchart")
        assert texts[texts.index(label) + 1].startswith(f"{ms:.3f} ms"), texts
    assert target["estimated_ms"]["0.9"] < target["time_ms"]
    total = next(r for r in data["pruned_estimates"] if r["level"] == 0.9)["ms_per_batch"]
    assert f"{total:.3f} ms per batch" in _chart_title(pruned, "optypes")
    # the estimated columns in the layer table, one per level
    heads = re.findall(r"<th>([^<]*)</th>", re.search(r'<table id="layers">(.*?)</table>', base, re.S).group(1))
    assert [h for h in heads if h.startswith("est. ms")] == ["est. ms @40%", "est. ms @60%", "est. ms @80%",
                                                              "est. ms @90%", "est. ms @95%"]

    card = re.search(r'id="card-flops">[^<]*<b>([^<]*)</b>', base).group(1)
    assert card == "290.2 kFLOPs", card
    assert re.search(r'id="card-model-flops">[^<]*<b>([^<]*) kFLOPs</b>', base)

    assert _chart_title(base, "losschart").startswith("Loss profile: relative L2 change")
    loss = _svg_texts(base, "losschart")
    assert {"stem_conv (Conv)", "classifier (Gemm)", "params", "432", "160", "50% sparsity", "90% sparsity"} \
        <= set(loss)
    assert any(t.startswith("relative L2 change of the model outputs") for t in loss)
    # without a loss profile there is no such chart, and an old profile without pruned views still renders
    old = {k: v for k, v in cpu_profile.to_dict().items() if k not in ("pruning_levels", "pruned_estimates")}
    old["layers"] = [{k: v for k, v in e.items() if k != "estimated_ms"} for e in old["layers"]]
    plain = _dump_dom(ws.Profile(old).to_html(tmp_path / "old.html").as_uri(), str(tmp_path))
    assert 'id="losschart"' not in plain and re.findall(r'<option value="([^"]*)"', plain) == ["baseline"]


def test_cli_profile_and_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["profile", "--backend", "cpu", "--runs", "2", "--json", str(a), "--trace", str(tmp_path / "t.json"),
                 "--html", str(tmp_path / "r.html"), "--name", "first", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "top layers" in out and "speedup" in out and "as imported" in out
    assert main(["profile", "--backend", "cpu", "--runs", "2", "--threads", "1", "--json", str(b), "--quiet"]) == 0
    assert json.loads(a.read_text())["name"] == "first"
    capsys.readouterr()
    assert main(["profile", "compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "per op type" in out and "stem_conv" in out
    assert main(["profile", "--no-timing", "--backend", "cpu", "--quiet"]) == 0
    assert main(["profile", "--batch", "0", "--backend", "cpu"]) == 1


def test_cli_profile_takes_symbolic_dims(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--dim sizes a symbolic input dimension for the profile (it was ignored unless --input was given too,
    while the error for an unknown size told the user to pass --dim)."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")], "dyn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3, "h", "w"])])
    path = tmp_path / "dyn.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    out_json = tmp_path / "dyn.json"
    assert main(["profile", str(path), "--backend", "cpu", "--runs", "1", "--pruning-layers", "0", "--quiet",
                 "--dim", "h=5", "--dim", "w=7", "--json", str(out_json)]) == 0
    data = json.loads(out_json.read_text())
    assert data["inputs"] == {"x": [1, 3, 5, 7]}
    capsys.readouterr()
    assert main(["profile", str(path), "--backend", "cpu", "--runs", "1", "--quiet", "--dim", "w=7"]) == 1
    assert "--dim h=N" in capsys.readouterr().err
