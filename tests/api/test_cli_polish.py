"""The command line reads like its peers' (issue 32): every ``--help`` ends with examples that parse and the
exit codes, long work shows one progress bar on a terminal and none in a log, the exit codes are the
documented ones, and every file problem is one line ``wgsentis COMMAND: error: ...`` naming the path, found
before any long work."""

from __future__ import annotations

import argparse
import ctypes.util
import io
import os
import pty
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import requires_gpu

from wgsentis import cli_common, debug_cli
from wgsentis.cli import build_parser, main
from wgsentis.cli_common import EXIT_CODES, EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, Progress

COMMANDS = ["run", "inspect", "profile", "capture", "view"]
DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
# what an error line must not show: a Python exception's class name, an errno code, a traceback
PYTHON_NOISE = re.compile(r"\b[A-Z][A-Za-z]*(Error|Exception|Interrupt)\b|Errno|Traceback|File \"")


class FakeTTY(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def _screen(text: str) -> list[str]:
    """The lines a terminal shows for ``text``: each ``\\r`` returns to the start of the line, and what is
    written then overwrites what was there."""
    lines, line, col = [], [], 0
    for ch in text:
        if ch == "\r":
            col = 0
        elif ch == "\n":
            lines.append("".join(line).rstrip())
            line, col = [], 0
        else:
            if col < len(line):
                line[col] = ch
            else:
                line.append(ch)
            col += 1
    if line:
        lines.append("".join(line).rstrip())
    return lines


def _help(argv: list[str], capsys: pytest.CaptureFixture[str], entry: Callable[[list[str]], int] = main) -> str:
    with pytest.raises(SystemExit) as info:
        entry(argv)
    assert info.value.code == EXIT_OK
    return capsys.readouterr().out


def _examples(text: str) -> list[str]:
    """The example command lines of a help text's ``examples:`` section (notes and blank lines skipped)."""
    section = text.split("\nexamples:\n", 1)[1].split("\n\n", 1)[0]
    return [line.split("  #")[0].strip() for line in section.splitlines() if line.strip().startswith("wgsentis")]


# -- --help --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_help_ends_with_examples_that_parse_and_the_exit_codes(command, capsys):
    text = _help([command, "--help"], capsys)
    assert text.rstrip().endswith(EXIT_CODES), text[-400:]
    examples = _examples(text)
    assert 2 <= len(examples) <= 4, examples
    parsed = []
    for example in examples:
        words = shlex.split(example)
        assert words[:2] == ["wgsentis", command], example
        parsed.append(build_parser().parse_args(words[1:]))  # a usage error would exit: they are real
    assert any(not args.model for args in parsed), "no example runs on the built-in sample model (no MODEL)"
    assert all(len(line) <= cli_common.HELP_WIDTH for line in text.split("\nexamples:\n", 1)[1].splitlines())


def test_top_level_help_lists_each_command_on_one_line_with_examples(capsys):
    text = _help(["--help"], capsys)
    lines = text.splitlines()
    for command in COMMANDS:
        row = [i for i, line in enumerate(lines) if re.match(rf"^    {command} +\S", line)]
        assert len(row) == 1, (command, text)
        following = lines[row[0] + 1]
        assert re.match(r"^    \S", following) or not following.strip(), f"{command}'s line wraps: {following!r}"
        assert len(lines[row[0]]) <= cli_common.HELP_WIDTH
    assert "built-in sample model" in text and str(cli_common.sample_model_path()) in text
    examples = _examples(text)
    assert 2 <= len(examples) <= 4 and examples[0] == "wgsentis run"
    for example in examples:
        if "--help" in example:
            assert "examples:" in _help(shlex.split(example)[1:], capsys)
        else:
            build_parser().parse_args(shlex.split(example)[1:])
    assert text.rstrip().endswith(EXIT_CODES)


def test_debug_cli_entry_point_help_has_examples(capsys):
    text = _help(["--help"], capsys, debug_cli.main)
    assert {"capture", "view"} <= {shlex.split(e)[1] for e in _examples(text)} and text.rstrip().endswith(EXIT_CODES)


# -- exit codes ----------------------------------------------------------------------------------------------

def test_exit_codes_are_documented_in_help_and_docs():
    docs = DOCS.read_text()
    for code in (EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED):
        assert re.search(rf"^  {code} +\S", EXIT_CODES, re.M), code
        assert re.search(rf"^\| `?{code}`? +\|", docs, re.M), f"docs/cli.md has no row for exit code {code}"


@pytest.mark.parametrize("argv", [
    ["run", "--repeat", "0"], ["run", "--repeat", "two"], ["run", "--bogus"], ["profile", "--runs", "x"],
    ["capture"], ["view", "--backend", "gpu-vertex"], ["frobnicate"], [],
])
def test_usage_errors_exit_2_with_argparse_usage(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("usage: wgsentis") and re.search(r"^wgsentis( \w+)?: error: ", err, re.M), err


@pytest.mark.parametrize(("argv", "code", "stream", "words"), [
    (["run"], EXIT_OK, "stdout", "output  probabilities"),
    (["run", "missing.onnx"], EXIT_ERROR, "stderr", "wgsentis run: error: model missing.onnx: does not exist"),
    (["run", "--bogus"], EXIT_USAGE, "stderr", "unrecognized arguments: --bogus"),
])
def test_console_exit_codes(argv, code, stream, words, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "wgsentis", *argv], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert proc.returncode == code, proc.stderr
    assert words in getattr(proc, stream)
    if code == EXIT_ERROR:
        assert proc.stderr.count("\n") == 1 and not PYTHON_NOISE.search(proc.stderr), proc.stderr


def test_ctrl_c_exits_130_and_ends_the_progress_line(capsys):
    stream = FakeTTY()

    def interrupted(args: argparse.Namespace) -> int:
        with Progress("run", stream=stream, interval=0) as progress:
            progress("runs", 1, 10)
            raise KeyboardInterrupt

    assert cli_common.run_command(argparse.Namespace(func=interrupted, command="run")) == EXIT_INTERRUPTED
    assert stream.getvalue().endswith("\n") and stream.getvalue().count("\n") == 1
    assert capsys.readouterr().err == "wgsentis run: interrupted\n"


@pytest.mark.parametrize("exc", [IsADirectoryError(21, "Is a directory", "/data/out.json"),
                                 PermissionError(13, "Permission denied", "/data/out.json"),
                                 OSError(28, "No space left on device", "/data/out.json")])
def test_a_file_problem_met_mid_command_is_one_line_without_the_exceptions_name(exc, capsys):
    def failing(args: argparse.Namespace) -> int:
        raise exc

    assert cli_common.run_command(argparse.Namespace(func=failing, command="profile")) == EXIT_ERROR
    err = capsys.readouterr().err
    assert err == f"wgsentis profile: error: /data/out.json: {exc.strerror}\n"
    assert not PYTHON_NOISE.search(err)


# -- progress ------------------------------------------------------------------------------------------------

def test_progress_bar_redraws_in_place_and_ends_with_a_newline():
    stream = FakeTTY()
    with Progress("profile", stream=stream, interval=0) as progress:
        progress("a-long-phase-name", 0, 0)
        for k in range(5):
            progress("runs", k + 1, 5)
            assert "\n" not in stream.getvalue()  # one line, rewritten
    text = stream.getvalue()
    assert text.count("\r") == 6 and text.endswith("\n") and text.count("\n") == 1
    screen = _screen(text)
    assert len(screen) == 1
    assert re.fullmatch(r"profile: runs \[#{24}\] 5/5  \d+\.\d s", screen[0]), screen  # nothing left over


def test_progress_redraws_at_most_every_interval_but_always_the_last_step():
    stream = FakeTTY()
    with Progress("run", stream=stream, interval=3600) as progress:
        for k in range(100):
            progress("runs", k + 1, 100)
    assert stream.getvalue().count("\r") == 2 and "100/100" in _screen(stream.getvalue())[0]


@pytest.mark.parametrize(("stream", "enabled"), [(io.StringIO(), True), (FakeTTY(), False)],
                         ids=["not-a-terminal", "quiet"])
def test_progress_is_silent_off_a_terminal_and_when_quiet(stream, enabled):
    with Progress("run", stream=stream, enabled=enabled, interval=0) as progress:
        for k in range(10):
            progress("runs", k + 1, 10)
    assert stream.getvalue() == ""


LONG_WORK = [
    pytest.param(["run", "--repeat", "4"], id="run --repeat"),
    pytest.param(["run", "--backend", "gpu-compute", "--repeat", "3"], id="run --repeat gpu-compute",
                 marks=requires_gpu),
    pytest.param(["profile", "--backend", "cpu", "--runs", "3", "--warmup", "1", "--pruning-layers", "0"],
                 id="profile"),
    pytest.param(["profile", "--loss", "--backend", "cpu", "--levels", "0.5", "--no-timing"], id="profile --loss"),
]


@pytest.mark.parametrize("argv", LONG_WORK)
def test_long_work_shows_one_bar_on_a_terminal(argv, monkeypatch, capsys):
    tty = FakeTTY()
    monkeypatch.setattr(sys, "stderr", tty)
    assert main(argv) == EXIT_OK
    text = tty.getvalue()
    assert text.startswith("\r") and text.count("\r") >= 2 and text.endswith("\n") and text.count("\n") == 1, text
    assert len(_screen(text)) == 1 and re.search(r"\[[#.]{24}\] (\d+)/\1", text)
    monkeypatch.setattr(sys, "stderr", tty := FakeTTY())
    assert main([*argv, "-q"]) == EXIT_OK
    assert tty.getvalue() == ""


@pytest.mark.parametrize("argv", LONG_WORK)
def test_long_work_prints_no_progress_lines_when_stderr_is_not_a_terminal(argv, capsys):
    assert main(argv) == EXIT_OK
    assert capsys.readouterr().err == ""


def test_capture_replays_report_progress():
    """capture's timestamped replays tick the bar (the capture itself needs RenderDoc and a GPU)."""
    ticks: list[tuple[str, int, int]] = []
    layer = SimpleNamespace(name="conv", op_type="Conv")
    program = SimpleNamespace(
        ctx=SimpleNamespace(has_timestamps=True), set_timestamps=lambda on: None,
        execute=lambda feeds: SimpleNamespace(wait=lambda: None),
        last_run=SimpleNamespace(layer_gpu_ns={0: 1000}), graph=SimpleNamespace(layers=[layer]))
    assert debug_cli.timestamp_times(program, {}, runs=3, progress=lambda *t: ticks.append(t)) == {"conv (Conv)": 1000}
    assert ticks == [("timestamps", 1, 3), ("timestamps", 2, 3), ("timestamps", 3, 3)]


@requires_gpu
def test_capture_draws_one_bar_on_a_real_terminal(tmp_path):
    """capture in a process of its own (RenderDoc must come before any Vulkan instance), its stderr a pty."""
    if not (ctypes.util.find_library("renderdoc") or Path("/usr/lib/librenderdoc.so").exists()):
        pytest.skip("RenderDoc (librenderdoc) is not installed: run ./setup.sh")
    env = dict(os.environ)
    Path(env.setdefault("XDG_RUNTIME_DIR", "/tmp/xdg-rdc")).mkdir(parents=True, exist_ok=True)
    master, slave = pty.openpty()
    try:
        proc = subprocess.run([sys.executable, "-m", "wgsentis", "capture", "-o", str(tmp_path / "x.rdc")],
                              stdout=subprocess.PIPE, stderr=slave, text=True, timeout=300, env=env)
    finally:
        os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the pty's other end is closed: all of it read
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    err = b"".join(chunks).decode()
    assert proc.returncode == EXIT_OK, err
    assert "capture " in proc.stdout
    screen = [line for line in _screen(err) if line]
    assert len(screen) == 1 and screen[0].startswith("capture: capturing"), err
    assert "capture: recording" in err
    if "timestamps" in err:  # an adapter with timestamp queries: the replays' steps
        assert re.search(r"capture: timestamps \[#{24}\] 3/3", err), err


# -- one-line file problems, found before any long work ----------------------------------------------------

@pytest.fixture
def files(tmp_path: Path) -> SimpleNamespace:
    f = SimpleNamespace(dir=tmp_path / "folder", file=tmp_path / "notes.txt", missing=tmp_path / "missing",
                        junk=tmp_path / "junk.onnx", empty=tmp_path / "empty.onnx", npz=tmp_path / "x.npz",
                        text=tmp_path / "text.npy", cut=tmp_path / "cut.npy", json=tmp_path / "empty.json")
    f.dir.mkdir()
    f.file.write_text("not a folder\n")
    f.junk.write_bytes(bytes(range(256)) * 4)
    f.empty.write_bytes(b"")
    np.savez(f.npz, image=np.zeros((1, 3, 32, 32), np.float32))
    f.text.write_text("1 2 3\n")
    np.save(tmp_path / "whole.npy", np.zeros((1, 3, 32, 32), np.float32))
    f.cut.write_bytes((tmp_path / "whole.npy").read_bytes()[:300])
    f.json.write_text("{}")
    return f


@pytest.fixture
def no_long_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if a command starts a worker, a profile or the viewer: its file problems must come first."""
    import wgsentis.viewer
    import wgsentis.worker

    def started(*args: object, **kwargs: object) -> None:
        raise AssertionError("long work started before the file problem was found")

    for owner, name in ((wgsentis, "Worker"), (wgsentis.worker, "Worker"), (wgsentis, "profile"),
                        (wgsentis, "loss_profile"), (wgsentis.viewer, "run_view")):
        monkeypatch.setattr(owner, name, started)


def _one_line_error(argv: list[str], capsys: pytest.CaptureFixture[str], path: Path | str) -> str:
    assert main([str(a) for a in argv]) == EXIT_ERROR
    captured = capsys.readouterr()
    err = captured.err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith(f"wgsentis {argv[0]}: error: "), err
    assert str(path) in err, err
    assert not PYTHON_NOISE.search(err), err
    assert captured.out == "", "the command did work before it found the file problem"
    return err


def _extra(command: str, tmp_path: Path) -> list[str]:
    """What each command needs besides MODEL to get as far as its files."""
    return {"profile": ["--backend", "cpu", "--quiet"], "capture": ["-o", str(tmp_path / "c.rdc")],
            "view": ["--layer", "stem_conv"]}.get(command, [])


MODEL_PROBLEMS = {"missing": "does not exist", "dir": "is a folder", "junk": "is not a valid ONNX",
                  "empty": "has no graph", "file": "is not a valid ONNX"}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(("which", "words"), MODEL_PROBLEMS.items(), ids=MODEL_PROBLEMS.keys())
def test_model_file_problems(command, which, words, files, tmp_path, capsys, no_long_work):
    path = getattr(files, which)
    assert words in _one_line_error([command, path, *_extra(command, tmp_path)], capsys, path)


INPUT_PROBLEMS = {"missing": "does not exist", "dir": "is a folder", "npz": "is an .npz archive",
                  "text": "is not a .npy file", "cut": "is a damaged"}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(("which", "words"), INPUT_PROBLEMS.items(), ids=INPUT_PROBLEMS.keys())
def test_input_file_problems(command, which, words, files, tmp_path, capsys, no_long_work):
    path = getattr(files, which)
    err = _one_line_error([command, "--input", f"image={path}", *_extra(command, tmp_path)], capsys, path)
    assert f"--input image={path}: {words}" in err


def _output_cases() -> dict[str, tuple[list[str], Callable[[SimpleNamespace], Path], str]]:
    cases: dict[str, tuple[list[str], Callable[[SimpleNamespace], Path], str]] = {
        "run --output-dir FILE": (["run", "--output-dir"], lambda f: f.file, "is a file"),
        "run --output-dir FILE/DIR": (["run", "--output-dir"], lambda f: f.file / "out", "is a file"),
        "capture -o FILE/X.rdc": (["capture", "-o"], lambda f: f.file / "x.rdc", "is a file"),
        "capture -o DIR.rdc": (["capture", "-o"], lambda f: _mkdir(f.dir / "x.rdc"), "is a directory"),
        "capture -o X (no .rdc)": (["capture", "-o"], lambda f: f.dir / "x.txt", "must end in .rdc"),
        "view --screenshot FILE/X.png": (["view", "--layer", "stem_conv", "--screenshot"],
                                         lambda f: f.file / "x.png", "is a file"),
        "view --screenshot DIR": (["view", "--layer", "stem_conv", "--screenshot"], lambda f: f.dir, "is a folder"),
        "view --rdc-frame FILE/X.rdc": (["view", "--layer", "stem_conv", "--rdc-frame"],
                                        lambda f: f.file / "x.rdc", "is a file"),
    }
    for flag in ("--json", "--trace", "--html"):
        for loss in ([], ["--loss"]):
            name = f"profile {' '.join(loss)}{' ' if loss else ''}{flag}"
            cases[f"{name} FILE/X"] = (["profile", *loss, "--backend", "cpu", flag], lambda f: f.file / "p.out",
                                       "is a file")
            cases[f"{name} DIR"] = (["profile", *loss, "--backend", "cpu", flag], lambda f: f.dir, "is a folder")
            cases[f"{name} MISSING/X"] = (["profile", *loss, "--backend", "cpu", flag], lambda f: f.missing / "p",
                                          "does not exist")
    return cases


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


OUTPUT_CASES = _output_cases()


@pytest.mark.parametrize(("argv", "target", "words"), OUTPUT_CASES.values(), ids=OUTPUT_CASES.keys())
def test_output_path_problems_are_found_before_any_work(argv, target, words, files, capsys, no_long_work):
    path = target(files)
    assert words in _one_line_error([*argv, path], capsys, path)


OTHER_INPUTS: dict[str, tuple[Callable[[SimpleNamespace], list[object]], Callable[[SimpleNamespace], Path], str]] = {
    "profile compare MISSING": (lambda f: ["profile", "compare", f.missing, f.json], lambda f: f.missing,
                                "does not exist"),
    "profile compare DIR": (lambda f: ["profile", "compare", f.json, f.dir], lambda f: f.dir, "is a folder"),
    "profile compare not JSON": (lambda f: ["profile", "compare", f.file, f.json], lambda f: f.file, "as JSON"),
    "profile compare not a profile": (lambda f: ["profile", "compare", f.json, f.json], lambda f: f.json,
                                      "not a wgsentis profile"),
    "profile --loss --inputs MISSING": (lambda f: ["profile", "--loss", "--inputs", f.missing], lambda f: f.missing,
                                        "does not exist"),
    "profile --loss --inputs FILE": (lambda f: ["profile", "--loss", "--inputs", f.file], lambda f: f.file,
                                     "is a file"),
    "profile --loss --inputs DIR/image.npy bad": (lambda f: ["profile", "--loss", "--inputs", _bad_image(f)],
                                                  lambda f: f.dir, "'image.npy' (input 'image'): is not a .npy"),
}


def _bad_image(f: SimpleNamespace) -> Path:
    (f.dir / "image.npy").write_text("not numpy\n")
    return f.dir


@pytest.mark.parametrize(("argv", "target", "words"), OTHER_INPUTS.values(), ids=OTHER_INPUTS.keys())
def test_other_input_file_problems(argv, target, words, files, capsys, no_long_work):
    assert words in _one_line_error(argv(files), capsys, target(files))
