"""RenderDoc frame capture of model runs, through RenderDoc's in-application API (ctypes).

RenderDoc hooks Vulkan through an implicit layer that the Vulkan loader enables only if
``librenderdoc.so`` is in the process *before* the Vulkan instance is created. So::

    import wgsentis as ws
    ws.renderdoc.enable()                       # before the first GPU worker
    worker = ws.Worker(model, "gpu-compute", debug_groups=True)
    with ws.renderdoc.capture("captures/run.rdc"):
        worker.run(inputs)

``enable()`` loads the library (or finds the copy ``renderdoccmd capture`` injected), asks wgpu for
the Vulkan backend with the instance ``Debug`` flag (so object labels and debug groups reach the
capture) and fails with ``RenderDocError`` when it is too late for that. ``capture()`` enables on
first use, brackets its block with ``StartFrameCapture``/``EndFrameCapture`` and moves the file
RenderDoc wrote to the requested path (created with mode 0600: captures hold weights and inputs).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wgsentis.backends.gpu import device
from wgsentis.errors import DeviceError, RenderDocError

LIBRARY = "librenderdoc.so"
# RENDERDOC_Version values (renderdoc_app.h): ask for the newest, accept anything >= 1.2.0.
_API_VERSIONS = (10600, 10500, 10400, 10200)
# Indices of the function pointers in RENDERDOC_API_1_x_x (renderdoc_app.h; stable across 1.x).
_GET_API_VERSION, _SET_TEMPLATE, _GET_TEMPLATE, _GET_NUM_CAPTURES, _GET_CAPTURE = 0, 11, 12, 13, 14
_TRIGGER, _START, _IS_CAPTURING, _END, _SET_COMMENTS, _DISCARD = 15, 19, 20, 21, 23, 24
_FUNCS = 27

_INSTALL_HINT = ("install RenderDoc (Debian/Ubuntu: apt-get install librenderdoc renderdoccmd python3-renderdoc, "
                 "or run ./setup.sh)")


@dataclass
class RenderDocAPI:
    """The loaded in-application API: version, whether RenderDoc injected itself, its functions."""

    version: tuple[int, int, int]
    injected: bool  # the process was started by renderdoccmd (or the UI): the library was already loaded
    library: str
    _fn: dict[str, Any] = field(default_factory=dict, repr=False)

    def template(self) -> str:
        raw = self._fn["get_template"]()
        return raw.decode(errors="replace") if raw else ""

    def set_template(self, template: str) -> None:
        self._fn["set_template"](os.fsencode(template))

    def num_captures(self) -> int:
        return int(self._fn["num_captures"]())

    def capture_path(self, index: int) -> str:
        """The file of capture ``index`` of this process ("" if there is none)."""
        length, stamp = ctypes.c_uint32(0), ctypes.c_uint64(0)
        if not self._fn["get_capture"](index, None, ctypes.byref(length), ctypes.byref(stamp)):
            return ""
        buf = ctypes.create_string_buffer(max(1, length.value))
        self._fn["get_capture"](index, buf, ctypes.byref(length), ctypes.byref(stamp))
        return os.fsdecode(buf.value)

    def start(self) -> None:
        self._fn["start"](None, None)

    def trigger(self) -> None:
        """Capture the next presented frame (RenderDoc's ordinary frame capture, like F12)."""
        self._fn["trigger"]()

    def is_capturing(self) -> bool:
        return bool(self._fn["is_capturing"]())

    def end(self) -> bool:
        return bool(self._fn["end"](None, None))

    def discard(self) -> bool:
        """Abandon the capture in progress (API 1.4+); False when this RenderDoc cannot."""
        fn = self._fn.get("discard")
        return bool(fn(None, None)) if fn is not None else False

    def set_comments(self, path: str, text: str) -> None:
        self._fn["set_comments"](os.fsencode(path), text.encode())


_api: RenderDocAPI | None = None
_lock = threading.Lock()
_active: str | None = None  # path of the capture in progress


def _loaded_copy() -> ctypes.CDLL | None:
    """librenderdoc.so if it is already in the process (injected by renderdoccmd / the UI)."""
    try:
        return ctypes.CDLL(LIBRARY, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
    except OSError:
        return None


def _load_library() -> ctypes.CDLL:
    names = [LIBRARY]
    found = ctypes.util.find_library("renderdoc")
    if found and found not in names:
        names.append(found)
    errors = []
    for name in names:
        try:
            return ctypes.CDLL(name, mode=os.RTLD_NOW)
        except OSError as exc:
            errors.append(str(exc))
    raise RenderDocError(f"RenderDoc's library {LIBRARY} could not be loaded ({'; '.join(errors)}); {_INSTALL_HINT}")


def _bind(lib: ctypes.CDLL, injected: bool, library: str) -> RenderDocAPI:
    try:
        get_api = lib.RENDERDOC_GetAPI
    except AttributeError:
        raise RenderDocError(f"{library} has no RENDERDOC_GetAPI: not RenderDoc's capture library") from None
    get_api.restype = ctypes.c_int
    get_api.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)]
    table = ctypes.c_void_p()
    version = 0
    for version in _API_VERSIONS:
        if get_api(version, ctypes.byref(table)) == 1 and table.value:
            break
    else:
        raise RenderDocError(f"{library}: RENDERDOC_GetAPI refused API versions {_API_VERSIONS}; RenderDoc >= 1.2 "
                             "is needed")
    ptrs = ctypes.cast(table, ctypes.POINTER(ctypes.c_void_p * _FUNCS)).contents
    c = ctypes
    proto = {
        "api_version": (_GET_API_VERSION, c.CFUNCTYPE(None, *[c.POINTER(c.c_int)] * 3)),
        "set_template": (_SET_TEMPLATE, c.CFUNCTYPE(None, c.c_char_p)),
        "get_template": (_GET_TEMPLATE, c.CFUNCTYPE(c.c_char_p)),
        "num_captures": (_GET_NUM_CAPTURES, c.CFUNCTYPE(c.c_uint32)),
        "get_capture": (_GET_CAPTURE, c.CFUNCTYPE(c.c_uint32, c.c_uint32, c.c_char_p, c.POINTER(c.c_uint32),
                                                  c.POINTER(c.c_uint64))),
        "trigger": (_TRIGGER, c.CFUNCTYPE(None)),
        "start": (_START, c.CFUNCTYPE(None, c.c_void_p, c.c_void_p)),
        "is_capturing": (_IS_CAPTURING, c.CFUNCTYPE(c.c_uint32)),
        "end": (_END, c.CFUNCTYPE(c.c_uint32, c.c_void_p, c.c_void_p)),
        "set_comments": (_SET_COMMENTS, c.CFUNCTYPE(None, c.c_char_p, c.c_char_p)),
    }
    if version >= 10400:
        proto["discard"] = (_DISCARD, c.CFUNCTYPE(c.c_uint32, c.c_void_p, c.c_void_p))
    fns = {name: kind(ptrs[index]) for name, (index, kind) in proto.items() if ptrs[index]}
    major, minor, patch = c.c_int(), c.c_int(), c.c_int()
    fns["api_version"](c.byref(major), c.byref(minor), c.byref(patch))
    return RenderDocAPI((major.value, minor.value, patch.value), injected, library, fns)


def is_injected() -> bool:
    """Whether RenderDoc is already in this process (started by ``renderdoccmd capture`` or the UI)."""
    return _loaded_copy() is not None


def enable() -> RenderDocAPI:
    """Load RenderDoc's in-application API and set up wgpu so captures show labels and debug groups.

    Call before the first GPU worker: it forces wgpu's Vulkan backend with the instance Debug flag.
    Uses the copy of RenderDoc that ``renderdoccmd capture`` injected when there is one. Raises
    RenderDocError when RenderDoc is not installed, or when the GPU context already exists (too late
    to hook Vulkan, or created without the debug flag). Calling it again returns the same API.
    """
    global _api
    with _lock:
        if _api is not None:
            return _api
        lib = _loaded_copy()
        injected = lib is not None
        extras = device.instance_extras()
        ready = extras is not None and "Debug" in extras.get("flags", []) and extras.get("backends") == ["Vulkan"]
        if device.context_exists() or device.wgpu_instance_exists():
            if not injected:
                raise RenderDocError(
                    "RenderDoc was enabled too late to hook Vulkan: the wgpu instance already exists and "
                    f"{LIBRARY} was not loaded before it. Call wgsentis.renderdoc.enable() before the first GPU "
                    "worker (or launch the process with renderdoccmd capture)"
                )
            if not ready:
                raise RenderDocError(
                    "the wgpu instance was created before wgsentis.renderdoc.enable(), without the Debug flag: "
                    "layer names and labels would be missing from captures. Call enable() before the first GPU "
                    "worker"
                )
        if lib is None:
            lib = _load_library()
        api = _bind(lib, injected, LIBRARY)
        if not ready:
            try:
                device.configure_instance(backends=("Vulkan",), flags=("Debug",))
            except DeviceError as exc:
                raise RenderDocError(str(exc)) from None
        _api = api
        return api


def api() -> RenderDocAPI | None:
    """The API once ``enable()`` succeeded, else None."""
    return _api


def capturing() -> str | None:
    """The path of the capture in progress, or None."""
    return _active


def check_path(path: str | os.PathLike[str], overwrite: bool = False) -> Path:
    """Validate a capture path: ``.rdc`` suffix, not a directory, no overwrite unless asked. Returns it
    absolute (its parent folders are created when the capture is written)."""
    if not isinstance(path, str | os.PathLike) or not os.fspath(path):
        raise RenderDocError(f"capture path {path!r}: expected a file path ending in .rdc")
    target = Path(os.fspath(path)).expanduser().absolute()
    if target.suffix.lower() != ".rdc":
        raise RenderDocError(f"capture path '{path}': the file name must end in .rdc")
    if target.is_dir():
        raise RenderDocError(f"capture path '{path}' is a directory")
    if (target.exists() or target.is_symlink()) and not overwrite:
        raise RenderDocError(f"capture path '{path}' exists; remove it or pass overwrite=True (--overwrite)")
    for parent in target.parents:
        if parent.exists() and not parent.is_dir():
            raise RenderDocError(f"capture path '{path}': '{parent}' is a file, not a folder")
    return target


@dataclass
class Capture:
    """What a finished ``capture()`` block produced."""

    path: Path
    notes: dict[str, Any] = field(default_factory=dict)  # stored as the capture's comments (JSON)
    bytes: int = 0


@contextlib.contextmanager
def capture(path: str | os.PathLike[str], *, overwrite: bool = False,
            notes: dict[str, Any] | None = None) -> Iterator[Capture]:
    """Capture every GPU command submitted inside the block into ``path`` (an ``.rdc`` file).

    Wait for the runs inside the block (``worker.run`` or a readback) so their work is submitted
    before it ends. ``notes`` (JSON-able; the block may add to ``Capture.notes``) are stored as
    the capture's comments; ``tools/rdc_report.py`` reads the expected layer list from there.
    Raises RenderDocError on a bad path, a second capture at once, or when RenderDoc made no capture.
    """
    target = check_path(path, overwrite)
    with _one_capture_at_a_time(target):
        rd = enable()
        device.get_context()  # the Vulkan device must exist for StartFrameCapture(NULL, NULL) to find it
        target.parent.mkdir(parents=True, exist_ok=True)
        result = Capture(target, dict(notes or {}))
        yield from _capture_into(rd, target, overwrite, result)


@contextlib.contextmanager
def _one_capture_at_a_time(target: Path) -> Iterator[None]:
    """Hold the process-wide capture slot for ``target``; RenderDocError when another capture has it."""
    global _active
    with _lock:
        if _active is not None:
            raise RenderDocError(f"cannot capture to '{target}': a capture to '{_active}' is already in progress "
                                 "(one at a time)")
        _active = str(target)
    try:
        yield
    finally:
        with _lock:
            _active = None


def _capture_into(rd: RenderDocAPI, target: Path, overwrite: bool, result: Capture) -> Iterator[Capture]:
    staging = Path(tempfile.mkdtemp(prefix=".rdc-", dir=target.parent))  # mode 0700: private until moved
    previous = rd.template()
    before = rd.num_captures()
    rd.set_template(str(staging / target.stem))
    try:
        rd.start()
        if not rd.is_capturing():
            raise RenderDocError(
                "RenderDoc did not start a capture: Vulkan is not hooked (the Vulkan device was created without "
                "RenderDoc's layer; enable RenderDoc before the first GPU worker, and use the Vulkan backend)"
            )
        try:
            yield result
        except BaseException:
            if not rd.discard():
                rd.end()
            raise
        if not rd.end():
            raise RenderDocError(f"RenderDoc failed to write the capture for '{target}'")
        written = rd.capture_path(rd.num_captures() - 1) if rd.num_captures() > before else ""
        if not written or not Path(written).is_file():
            raise RenderDocError(f"RenderDoc reported no capture file for '{target}'")
        if result.notes:
            rd.set_comments(written, json.dumps(result.notes, sort_keys=True))
        _deliver(Path(written), target, overwrite)
        result.bytes = target.stat().st_size
    finally:
        rd.set_template(previous)
        shutil.rmtree(staging, ignore_errors=True)


def _deliver(written: Path, target: Path, overwrite: bool) -> None:
    """Move RenderDoc's file to ``target`` with mode 0600, never replacing it unless ``overwrite``."""
    os.chmod(written, 0o600)
    if overwrite:
        os.replace(written, target)
        return
    try:
        os.link(written, target)  # fails, atomically, if someone created the target meanwhile
    except FileExistsError:
        raise RenderDocError(f"capture path '{target}' appeared during the capture; not overwritten") from None
    except OSError:
        if target.exists():
            raise RenderDocError(f"capture path '{target}' exists; not overwritten") from None
        os.replace(written, target)


@contextlib.contextmanager
def frame_capture(path: str | os.PathLike[str], *, overwrite: bool = False) -> Iterator[Capture]:
    """RenderDoc's ordinary, present-delimited frame capture for windowed programs (``wgsentis view``):
    inside the block call ``api().trigger()`` before a frame; on exit the captured frame is moved to
    ``path`` (mode 0600). Raises RenderDocError when no frame was captured."""
    target = check_path(path, overwrite)
    with _one_capture_at_a_time(target):
        rd = enable()
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".rdc-", dir=target.parent))
        previous = rd.template()
        before = rd.num_captures()
        rd.set_template(str(staging / target.stem))
        try:
            result = Capture(target)
            yield result
            if rd.num_captures() <= before:
                raise RenderDocError(f"no frame was captured for '{target}': the window presented no frame after "
                                     "the trigger, or its swapchain was not hooked")
            written = Path(rd.capture_path(rd.num_captures() - 1))
            _deliver(written, target, overwrite)
            result.bytes = target.stat().st_size
        finally:
            rd.set_template(previous)
            shutil.rmtree(staging, ignore_errors=True)
