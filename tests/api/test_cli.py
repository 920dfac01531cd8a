"""The command line on the built-in sample model and on files."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from helpers import requires_gpu

from wgsentis.cli import main


def test_run_sample(capsys):
    assert main(["run"]) == 0
    out = capsys.readouterr().out
    assert "built-in sample" in out and "output  probabilities: float32[1, 10]" in out and "top-5" in out


@requires_gpu
@pytest.mark.parametrize("backend", ["gpu-compute", "gpu-pixel"])
def test_run_on_the_gpu_reports_placements_memory_and_the_runs_phases(backend, capsys):
    assert main(["run", "--backend", backend, "--repeat", "3"]) == 0
    out = capsys.readouterr().out
    assert "layers  cpu 0, gpu" in out and "fallback 0;" in out and "\nfallback " not in out
    assert re.search(r"device  weights 0\.0\d MB, intermediates", out) and "1 plan(s) cached" in out
    assert "last run (ms) upload" in out and ", wait " in out and "copy out" in out


@pytest.mark.parametrize(("flags", "mode"), [([], "(spin-wait)"), (["--no-spin-wait"], "(blocking)")])
def test_run_names_the_threading_mode(flags, mode, capsys):
    assert main(["run", "--threads", "2", *flags]) == 0
    assert f"threads 2  {mode}" in capsys.readouterr().out


@pytest.mark.parametrize(("flags", "spin_wait"), [([], True), (["--no-spin-wait"], False)])
def test_profile_times_the_chosen_threading_mode(flags, spin_wait, tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main(["profile", "--backend", "cpu", "--runs", "1", "--warmup", "0", "--pruning-layers", "0",
                 "--quiet", "--json", str(out), *flags]) == 0
    assert json.loads(out.read_text())["spin_wait"] is spin_wait


def test_run_with_input_file_and_output_dir(tmp_path, capsys):
    x = np.random.default_rng(5).random((2, 3, 32, 32), dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", "--input", f"image={tmp_path / 'x.npy'}", "--output-dir", str(tmp_path / "out"),
                 "--repeat", "3"]) == 0
    probs = np.load(tmp_path / "out" / "probabilities.npy")
    assert probs.shape == (2, 10)
    np.testing.assert_allclose(probs.sum(axis=1), 1, rtol=1e-5)
    assert "median of 2 more" in capsys.readouterr().out


def test_inspect_sample(capsys):
    assert main(["inspect"]) == 0
    out = capsys.readouterr().out
    assert "stem_conv" in out and "Conv+Relu" in out and "parameters" in out and "FLOPs" in out
    assert "FusedConv+Relu" in out  # the residual Add (and its Relu) rides in block_pwconv
    assert "compute/pixel program" in out and out.count(" yes/yes\n") == 8  # every sample layer: both GPU backends


def test_errors_exit_nonzero_with_message(tmp_path, capsys):
    assert main(["run", str(tmp_path / "missing.onnx")]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert main(["run", "--input", "nope=x.npy"]) == 1
    assert "has no input 'nope'" in capsys.readouterr().err
    assert main(["run", "--backend", "gpu-vertex"]) == 1
    assert "unknown backend 'gpu-vertex'" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["run", "inspect", "profile"])
@pytest.mark.parametrize("pair,message", [
    ("height=4", "has no symbolic dimension 'height'"),  # the sample's only symbolic dim is its batch
    ("batch=two", "whole number of at least 1"),
    ("batch=-3", "whole number of at least 1"),
    ("batch=0", "whole number of at least 1"),
])
def test_bad_dim_values_are_named(command, pair, message, capsys):
    """A bad --dim is an error naming it (it was a ValueError traceback from int() or from numpy)."""
    extra = ["--backend", "cpu", "--runs", "1", "--quiet"] if command == "profile" else []
    assert main([command, "--dim", pair, *extra]) == 1
    err = capsys.readouterr().err
    assert message in err and pair.split("=")[0] in err and "Traceback" not in err


def test_dim_sets_the_batch(capsys):
    assert main(["run", "--dim", "batch=3"]) == 0
    assert "float32[3, 10]" in capsys.readouterr().out


def test_console_entry_point():
    proc = subprocess.run([sys.executable, "-m", "wgsentis", "inspect"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and "layers" in proc.stdout
