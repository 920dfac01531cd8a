"""What the command-line modules share: the sample model, model and input arguments, output-path checks,
and running a parsed command with one-line errors. ``cli`` (run, inspect, profile) and ``debug_cli`` (capture,
view) both import this module; neither imports the other's internals."""

from __future__ import annotations

import argparse
import os
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from wgsentis.errors import InputError, WgSentisError

SAMPLE_NAME = "sample.onnx"


def sample_model_path() -> Path:
    """Path of the built-in sample model shipped inside the package."""
    return Path(str(resources.files("wgsentis") / "data" / SAMPLE_NAME))


def load_model_arg(path: str | None) -> Any:
    """The model a command names, or the built-in sample model when it names none."""
    import wgsentis as ws

    return ws.load_model(path or sample_model_path(), name=None if path else "sample")


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
        try:
            feeds[name] = np.load(file, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise InputError(f"--input {name}={file}: cannot read a .npy array: {exc}") from None
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


def run_command(args: argparse.Namespace) -> int:
    """Run a parsed command: its exit code, or 1 with one line on stderr for a typed error or a file problem
    (no traceback), 130 on Ctrl-C."""
    try:
        return int(args.func(args))
    except WgSentisError as exc:
        print(f"wgsentis: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # a file that could not be read or written: one line naming it, no traceback
        where = f"'{exc.filename}': " if exc.filename else ""
        print(f"wgsentis: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
