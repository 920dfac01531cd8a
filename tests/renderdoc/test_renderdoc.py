"""RenderDoc capture of a real model run on the machine's Vulkan adapter (lavapipe in CI), read back
with tools/rdc_report.py; the launched-by-renderdoccmd path; the live viewer under Xvfb.

Every GPU case runs in a subprocess: RenderDoc must be loaded before the process's Vulkan instance
exists, and the test process may already have one.
"""

from __future__ import annotations

import ctypes.util
import json
import os
import shutil
import stat
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from helpers import requires_gpu

from wgsentis import renderdoc
from wgsentis.errors import RenderDocError

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "tools" / "rdc_report.py"
HAS_RENDERDOC = bool(ctypes.util.find_library("renderdoc")) or Path("/usr/lib/librenderdoc.so").exists()

pytestmark = [
    pytest.mark.renderdoc,
    pytest.mark.skipif(not HAS_RENDERDOC, reason="RenderDoc (librenderdoc) is not installed: run ./setup.sh"),
]


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("XDG_RUNTIME_DIR", "/tmp/xdg-rdc")  # RenderDoc's own sockets and logs
    Path(env["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True)
    env.update(extra)
    return env


def _py(code: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, cwd=ROOT,
                          env=_env(), **kw)


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wgsentis.debug_cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env=_env())


def _report(capture: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = tmp_path / (capture.stem + ".json")
    proc = subprocess.run([sys.executable, str(REPORT), str(capture), "--json", str(out)], capture_output=True,
                          text=True, timeout=300, env=_env())
    assert out.exists(), proc.stdout + proc.stderr
    return proc, json.loads(out.read_text())


def _check_report(rep: dict, work: str = "dispatches") -> None:
    assert rep["expected_layers"], "the capture's notes list the run's GPU layers"
    assert rep["missing_layers"] == []
    names = {f"{e['layer']} ({e['op']})" for e in rep["layers"]}
    assert set(rep["expected_layers"]) <= names
    for e in rep["layers"]:
        assert e[work] >= 1, e
        assert e["gpu_us"] > 0, e  # RenderDoc's EventGPUDuration, per layer
        assert e["timestamp_us"] and e["timestamp_us"] > 0, e  # the profiler's timestamps, same layer
    # Two measurements of the same work: within an order of magnitude of each other in total.
    assert 0.1 < rep["total_gpu_us"] / rep["total_timestamp_us"] < 10
    assert any(label.endswith("(Conv)") for label in rep["labels"])  # labelled pipelines / bind groups
    if work == "dispatches":
        assert any(label.startswith("wgsentis arena") for label in rep["labels"])  # labelled buffers
    else:
        assert any(label.startswith("wgsentis tensor") for label in rep["labels"])  # labelled textures


@requires_gpu
def test_capture_sample_model_and_report(tmp_path: Path) -> None:
    target = tmp_path / "nested" / "sample.rdc"
    proc = _cli("capture", "-o", str(target), "--layers", "block_pwconv")
    assert proc.returncode == 0, proc.stderr
    assert "loaded in-process" in proc.stdout
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert [p.name for p in target.parent.iterdir()] == ["sample.rdc"]  # no staging left behind
    report, rep = _report(target, tmp_path)
    assert report.returncode == 0, report.stdout + report.stderr
    _check_report(rep)
    assert "block_pwconv" in {e["layer"] for e in rep["layers"]}
    again = _cli("capture", "-o", str(target))
    assert again.returncode == 1 and "exists" in again.stderr and "--overwrite" in again.stderr
    assert _cli("capture", "-o", str(target), "--overwrite").returncode == 0


@requires_gpu
def test_capture_on_gpu_pixel_has_a_group_of_draws_per_layer(tmp_path: Path) -> None:
    """gpu-pixel: each layer's draws sit in its debug group (pushed inside each render pass the layer uses),
    and the report finds every GPU layer with RenderDoc's durations beside the timestamps."""
    target = tmp_path / "pixel.rdc"
    proc = _cli("capture", "-o", str(target), "--backend", "gpu-pixel")
    assert proc.returncode == 0, proc.stderr
    report, rep = _report(target, tmp_path)
    assert report.returncode == 0, report.stdout + report.stderr
    assert rep["backend"] == "gpu-pixel"
    _check_report(rep, work="draws")


@requires_gpu
def test_launched_by_renderdoccmd(tmp_path: Path) -> None:
    rdcmd = shutil.which("renderdoccmd")
    if rdcmd is None:
        pytest.skip("renderdoccmd is not installed")
    target = tmp_path / "launched.rdc"
    proc = subprocess.run([rdcmd, "capture", "-w", "-d", str(ROOT), "-c", str(tmp_path / "rdc"), sys.executable,
                           "-m", "wgsentis.debug_cli", "capture", "-o", str(target)],
                          capture_output=True, text=True, timeout=300, env=_env())
    assert "injected by its launcher" in proc.stdout, proc.stdout + proc.stderr
    report, rep = _report(target, tmp_path)
    assert report.returncode == 0, report.stdout
    _check_report(rep)


@requires_gpu
def test_capture_errors_in_process_state() -> None:
    code = """
import wgsentis as ws
from wgsentis.backends.gpu.device import get_context
from wgsentis.errors import RenderDocError
get_context()
try:
    ws.renderdoc.enable()
except RenderDocError as exc:
    print("TOO LATE:", exc)
"""
    proc = _py(code)
    assert "TOO LATE:" in proc.stdout and "enable() before the first GPU worker" in proc.stdout, proc.stderr
    code = """
import tempfile, wgsentis as ws
from wgsentis.errors import RenderDocError
d = tempfile.mkdtemp()
with ws.renderdoc.capture(d + "/a.rdc"):
    try:
        with ws.renderdoc.capture(d + "/b.rdc"):
            pass
    except RenderDocError as exc:
        print("REFUSED:", exc)
"""
    proc = _py(code)
    assert "REFUSED:" in proc.stdout and "already in progress" in proc.stdout, proc.stderr


def test_not_installed_is_a_clear_error() -> None:
    code = """
import ctypes.util, wgsentis.renderdoc as r
from wgsentis.errors import RenderDocError
r.LIBRARY = "librenderdoc-missing.so"
ctypes.util.find_library = lambda name: None
try:
    r.enable()
except RenderDocError as exc:
    print("ERR:", exc)
"""
    proc = _py(code)
    assert "ERR:" in proc.stdout and "install RenderDoc" in proc.stdout, proc.stdout + proc.stderr


def test_capture_path_checks(tmp_path: Path) -> None:
    with pytest.raises(RenderDocError, match=r"must end in \.rdc"):
        renderdoc.check_path(tmp_path / "x.txt")
    with pytest.raises(RenderDocError, match="is a directory"):
        (tmp_path / "d.rdc").mkdir()
        renderdoc.check_path(tmp_path / "d.rdc")
    (tmp_path / "f.rdc").write_bytes(b"")
    with pytest.raises(RenderDocError, match="exists"):
        renderdoc.check_path(tmp_path / "f.rdc")
    assert renderdoc.check_path(tmp_path / "f.rdc", overwrite=True) == tmp_path / "f.rdc"
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(RenderDocError, match="is a file, not a folder"):
        renderdoc.check_path(tmp_path / "file" / "x.rdc")


@pytest.fixture()
def xvfb() -> str:
    exe = shutil.which("Xvfb")
    if exe is None:
        pytest.skip("Xvfb is not installed")
    read, write = os.pipe()
    proc = subprocess.Popen([exe, "-displayfd", str(write), "-screen", "0", "1024x768x24", "-nolisten", "tcp"],
                            pass_fds=(write,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write)
    with os.fdopen(read) as f:
        number = f.readline().strip()
    if not number:
        proc.kill()
        pytest.skip("Xvfb did not start")
    yield f":{number}"
    proc.terminate()
    proc.wait(timeout=10)


def _png_pixels(path: Path) -> tuple[int, int, bytes]:
    data = path.read_bytes()
    w, h = struct.unpack(">II", data[16:24])
    idat, pos = b"", 8
    while pos < len(data):
        (n,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + n]
        pos += 12 + n
    raw = zlib.decompress(idat)
    rows = [raw[y * (4 * w + 1) + 1:(y + 1) * (4 * w + 1)] for y in range(h)]  # filter 0 rows
    return w, h, b"".join(rows)


@requires_gpu
@pytest.mark.parametrize("backend", ["gpu-compute", "gpu-pixel"])
def test_view_under_xvfb_with_frame_capture(xvfb: str, tmp_path: Path, backend: str) -> None:
    shot, frame = tmp_path / "view.png", tmp_path / "view.rdc"
    proc = subprocess.run([sys.executable, "-m", "wgsentis.debug_cli", "view", "--layer", "block_pwconv",
                           "--frames", "4", "--screenshot", str(shot), "--rdc-frame", str(frame),
                           "--backend", backend],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, env=_env(DISPLAY=xvfb))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4 frame(s), 4 inference(s)" in proc.stdout
    w, h, pixels = _png_pixels(shot)
    assert w > 0 and h > 0
    assert len(set(pixels[i:i + 3] for i in range(0, len(pixels), 4))) > 16, "the presented frame is blank"
    assert stat.S_IMODE(frame.stat().st_mode) == 0o600
    _, rep = _report(frame, tmp_path)
    ops = {e["op"] for e in rep["layers"]}
    work = "dispatches" if backend == "gpu-compute" else "draws"
    assert "Conv" in ops and all(e[work] >= 1 for e in rep["layers"])
