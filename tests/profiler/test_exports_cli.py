"""The HTML report in headless Chromium, the Chrome trace's tracks, and the profile CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

import wgsentis as ws
from wgsentis.cli import main

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


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
        proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                               "--no-first-run", "--disable-background-networking", "--disable-component-update",
                               "--disable-sync", f"--user-data-dir={tmp}/profile", "--enable-logging=stderr", "--v=0",
                               f"--screenshot={shot}", "--window-size=1280,2000", page.as_uri()],
                              capture_output=True, text=True, timeout=120)
        errors = [line for line in proc.stderr.splitlines()
                  if "Uncaught" in line or ("CONSOLE" in line.upper() and "error" in line.lower())]
        assert not errors, errors
        assert shot.exists()
        data = shot.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        # A blank 1280x2000 page compresses to a few kB; text, bars and the table make it far larger.
        assert len(data) > 30_000, len(data)


def test_cli_profile_and_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["profile", "--backend", "cpu", "--runs", "2", "--json", str(a), "--trace", str(tmp_path / "t.json"),
                 "--html", str(tmp_path / "r.html"), "--name", "first", "--quiet"]) == 0
    assert "top layers" in capsys.readouterr().out
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
