"""What the command-line modules share: the sample model, model and input arguments, input- and output-path
checks, the exit codes and ``--help`` epilogs, the progress bar, and running a parsed command with one-line
errors. ``cli`` (run, inspect, profile) and ``debug_cli`` (capture, view) both import this module; neither
imports the other's internals."""

from __future__ import annotations

import argparse
import os
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from wgsentis.errors import InputError, WgSentisError

SAMPLE_NAME = "sample.onnx"

EXIT_OK = 0  # the command did what it was asked
EXIT_ERROR = 1  # a model, input, file or device problem, or a failed run: one line on stderr names it
EXIT_USAGE = 2  # the command line itself is wrong (argparse's code: unknown flag, missing or malformed value)
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells report it)
EXIT_CODES = f"""exit status:
  {EXIT_OK}    success
  {EXIT_ERROR}    error: model, inputs, a file, device or run (one line on stderr)
  {EXIT_USAGE}    usage error: unknown flag, missing or bad value (argparse's usage)
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C)"""
HELP_WIDTH = 79  # an epilog's example lines, with their notes aligned, fit this wide; else each note goes above


def epilog(*examples: str) -> str:
    """A ``--help`` epilog: its ``examples:`` (each ``COMMAND  # what it does``, the note optional), then the
    exit codes."""
    split = [(command.strip(), note.strip()) for command, _, note in (e.partition("  #") for e in examples)]
    width = max(len(command) for command, _ in split)
    aligned = all(4 + width + len(note) + 2 <= HELP_WIDTH for _, note in split)
    lines = []
    for command, note in split:
        if note and aligned:
            lines.append(f"  {command:<{width}}  # {note}")
        else:
            lines += [f"  # {note}"] * bool(note) + [f"  {command}"]
    return "examples:\n" + "\n".join(lines) + "\n\n" + EXIT_CODES


def add_command(subparsers: Any, name: str, summary: str, func: Any, *examples: str) -> argparse.ArgumentParser:
    """Register sub-command ``name``: ``summary`` is its one line in ``wgsentis --help`` and the start of its own
    ``--help``, which ends with ``examples`` (see ``epilog``) and the exit codes."""
    parser = subparsers.add_parser(name, help=summary, description=summary[0].upper() + summary[1:] + ".",
                                   epilog=epilog(*examples), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(func=func)
    return parser


def add_input_args(parser: argparse.ArgumentParser, model: bool = True) -> None:
    """MODEL (with ``model``) and the inputs' flags: --input, --dim, --seed."""
    if model:
        parser.add_argument("model", nargs="?", metavar="MODEL",
                            help="ONNX model file (default: the built-in sample model)")
    parser.add_argument("--input", action="append", metavar="NAME=FILE.npy", help="input from a .npy file")
    parser.add_argument("--dim", action="append", metavar="NAME=N", help="value of a symbolic dimension")
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated sample inputs")


def add_quiet_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no progress bar on stderr (there is none anyway when stderr is not a terminal)")


class Progress:
    """One progress bar on ``stream`` (stderr by default), redrawn in place with ``\\r`` while stderr is a
    terminal, and silent otherwise (a log or a pipe gets no stream of progress lines). Called as the profiler's
    callback, ``progress(phase, done, total)`` (``total`` 0: a phase without steps); ``close()`` (or leaving
    its ``with`` block) ends the line. ``enabled=False`` (``--quiet``) draws nothing. Redraws come at most
    every ``interval`` seconds, and always on a new phase and on a phase's last step."""

    def __init__(self, label: str, *, stream: TextIO | None = None, enabled: bool = True, interval: float = 0.1,
                 width: int = 24) -> None:
        self.label, self.interval, self.width = label, interval, width
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", None)
        self.active = enabled and callable(isatty) and bool(isatty())
        self._start = time.monotonic()
        self._last_draw = float("-inf")
        self._phase: str | None = None
        self._shown = 0  # length of the text on the line now (0: nothing drawn, or the line is ended)

    def __call__(self, phase: str, done: int, total: int) -> None:
        self.update(phase, done, total)

    def update(self, phase: str, done: int, total: int) -> None:
        """Show ``done`` of ``total`` steps of ``phase``."""
        if not self.active:
            return
        now = time.monotonic()
        if phase == self._phase and 0 < done < total and now - self._last_draw < self.interval:
            return
        self._phase, self._last_draw = phase, now
        text = f"{self.label}: {phase}"
        if total > 0:
            filled = min(self.width, self.width * done // total)
            text += f" [{'#' * filled}{'.' * (self.width - filled)}] {done}/{total}"
        else:
            text += " ..."
        text += f"  {now - self._start:.1f} s"
        self.stream.write("\r" + text.ljust(self._shown))
        self.stream.flush()
        self._shown = len(text)

    def close(self) -> None:
        """End the bar's line (its last state stays on screen); nothing when nothing was drawn."""
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()
            self._shown = 0

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def sample_model_path() -> Path:
    """Path of the built-in sample model shipped inside the package."""
    return Path(str(resources.files("wgsentis") / "data" / SAMPLE_NAME))


def check_input_file(path: str | Path, what: str) -> Path:
    """``path`` as a Path; InputError starting with ``what`` (the flag and the path) unless it is a readable
    file."""
    target = Path(path).expanduser()
    if not target.exists():
        raise InputError(f"{what}: does not exist")
    if target.is_dir():
        raise InputError(f"{what}: is a folder, not a file")
    if not os.access(target, os.R_OK):
        raise InputError(f"{what}: not readable")
    return target


def load_model_arg(path: str | None) -> Any:
    """The model a command names, or the built-in sample model when it names none."""
    import wgsentis as ws

    if path:
        check_input_file(path, f"model {path}")
    return ws.load_model(path or sample_model_path(), name=None if path else "sample")


NPY_MAGIC = b"\x93NUMPY"


def load_array(path: str | Path, what: str) -> np.ndarray:
    """The array of the .npy file at ``path``; InputError starting with ``what`` (the flag and the path) when
    it is missing, a folder, an .npz archive, another kind of file, or a damaged .npy."""
    target = check_input_file(path, what)
    try:
        with target.open("rb") as file:
            head = file.read(len(NPY_MAGIC))
            if head.startswith(b"PK"):
                raise InputError(f"{what}: is an .npz archive; give each input as its own .npy file "
                                 "(numpy.save)")
            if head != NPY_MAGIC:
                raise InputError(f"{what}: is not a .npy file (numpy.save writes one)")
            file.seek(0)
            return np.load(file, allow_pickle=False)
    except OSError as exc:
        raise InputError(f"{what}: cannot be read: {exc.strerror or 'read failed'}") from None
    except ValueError as exc:
        raise InputError(f"{what}: is a damaged or unsupported .npy file: {exc}") from None


def parse_pairs(pairs: list[str] | None, what: str) -> dict[str, str]:
    """NAME=VALUE flags (``what`` names the flag in errors) as a dict."""
    out: dict[str, str] = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not name or not value:
            raise InputError(f"{what} '{pair}' must look like NAME=VALUE")
        out[name] = value
    return out


def parse_dims(model: Any, pairs: list[str] | None) -> dict[str, int]:
    """--dim NAME=N pairs: N a whole number >= 1, NAME a symbolic dim of an input or INPUT:AXIS."""
    names = {d for info in model.inputs for d in (info.shape or []) if isinstance(d, str)}
    names |= {f"{info.name}:{axis}" for info in model.inputs for axis, d in enumerate(info.shape or [])
              if not isinstance(d, int)}
    dims: dict[str, int] = {}
    for name, value in parse_pairs(pairs, "--dim").items():
        if name not in names:
            raise InputError(f"--dim {name}={value}: model '{model.name}' has no symbolic dimension '{name}'; "
                             f"its symbolic dimensions: {sorted(names) or 'none'}")
        try:
            size = int(value)
        except ValueError:
            size = 0
        if size < 1 or str(size) != value.strip():
            raise InputError(f"--dim {name}={value}: the size must be a whole number of at least 1")
        dims[name] = size
    return dims


def inputs_for(model: Any, args: argparse.Namespace) -> dict[str, np.ndarray]:
    """A command's inputs: --input files, the rest seeded samples sized by --dim."""
    from wgsentis.shapes import sample_inputs

    dims = parse_dims(model, args.dim)
    files = parse_pairs(args.input, "--input")
    known = {i.name for i in model.inputs}
    for name in files:
        if name not in known:
            raise InputError(f"--input {name}=...: model '{model.name}' has no input '{name}'; inputs: {sorted(known)}")
    feeds = sample_inputs(model, dims, seed=args.seed) if len(files) < len(known) else {}
    for name, file in files.items():
        feeds[name] = load_array(file, f"--input {name}={file}")
    return feeds


def check_output_file(path: str | None, flag: str) -> None:
    """Raise InputError naming ``flag`` and ``path`` unless a file can be written at ``path`` (its folder exists
    and is writable, and it is not a folder itself): checked before a run, so a long profile does not fail at
    its end. None: nothing to check."""
    if not path:
        return
    target = Path(path).expanduser()
    folder = target.parent
    if target.is_dir():
        raise InputError(f"{flag} {path}: is a folder, not a file")
    if not folder.is_dir():
        what = "is a file, not a folder" if folder.exists() else "does not exist"
        raise InputError(f"{flag} {path}: the folder '{folder}' {what}")
    if not os.access(folder, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise InputError(f"{flag} {path}: not writable")


def check_output_dir(path: str | None, flag: str) -> None:
    """Raise InputError naming ``flag`` and ``path`` unless ``path`` is, or can be made, a writable folder (no
    file in the way of it or of a folder above it). None: nothing to check."""
    if not path:
        return
    target = Path(path).expanduser()
    existing = next((p for p in (target, *target.parents) if p.exists()), Path("."))
    if not existing.is_dir():
        where = "" if existing == target else f"'{existing}' "
        raise InputError(f"{flag} {path}: {where}is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"{flag} {path}: '{existing}' is not writable")


def at_least_one(text: str) -> int:
    """argparse type of a count that must be a whole number of at least 1 (a usage error otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def run_command(args: argparse.Namespace) -> int:
    """Run a parsed command: its exit code, or EXIT_ERROR with one line ``wgsentis COMMAND: error: ...`` on
    stderr for a typed error or a file problem (no traceback), EXIT_INTERRUPTED on Ctrl-C."""
    prog = f"wgsentis {args.command}" if getattr(args, "command", None) else "wgsentis"
    try:
        return int(args.func(args))
    except WgSentisError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as exc:  # a file that could not be read or written: one line naming it, no traceback
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"{prog}: error: {where}{exc.strerror or 'input/output error'}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
