"""The rest of the run path still holds when a decoder's KV cache stays on the device (issue 31, point 7).

A GPT-2-style decoder (tools/decoders.py, the small configuration of test_decoders.py) decodes a few greedy steps on
each backend with ``run(..., on_device=True)``, each step's ``present_*`` device Tensors fed back as ``past_*``. On
that path this module checks, against the same steps run with host numpy inputs on the same backend (equal bit for
bit: the same plans on the same data) and against the cpu backend (within test_decoders.py's tolerance):

- the profiler: ``ws.profile`` of one step whose past inputs are device Tensors gives the per-layer rows of a profile
  of the same step with host inputs, without uploading the past, and leaves the cache as it was;
- RenderDoc: a capture of one step with device inputs is written and holds the step's work and its device-to-device
  copies (in a child process: RenderDoc must be loaded before the process's Vulkan instance exists);
- timeouts and cancel between steps: an interrupted step raises its typed error, and the same step on the same held
  cache then gives the reference logits;
- the memory budget: ``held_device_bytes`` / ``held_device_tensors`` count what the caller holds and fall back when
  it is dropped, and a budget too small for a step plus the tensors held is a ResourceLimitError naming it;
- the thread contract of ``Worker``: threads sharing a worker each get their own sequence, and a device Tensor is
  read from any thread.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import gc
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import child_results, requires_gpu

import wgsentis as ws
from wgsentis.errors import ResourceLimitError, RunCancelledError, RunTimeoutError
from wgsentis.run_control import RunControl

decoders = pytest.importorskip("decoders")
pytest.importorskip("torch", reason="the decoders extra (torch, transformers) exports the models")
pytest.importorskip("transformers", reason="the decoders extra (torch, transformers) exports the models")

ROOT = Path(__file__).resolve().parents[2]
GPT2 = decoders.DecoderConfig(vocab=1000)  # test_decoders.py's: the export is cached once for both modules
LAYERS = GPT2.layers
STEPS = 6  # greedy steps per sequence: each a new cache length
PROMPT = (1, 2, 3)
OTHER_PROMPT = (7, 8, 9)  # a second sequence of the same lengths (the same plans), for the thread cases
LOGIT_TOLERANCE = 2e-3  # absolute, against the cpu backend (test_decoders.py's): float32 sums in another order
GPU_BACKENDS = [pytest.param("gpu-compute", marks=requires_gpu), pytest.param("gpu-pixel", marks=requires_gpu)]
BACKENDS = ["cpu", *GPU_BACKENDS]
HAS_RENDERDOC = bool(ctypes.util.find_library("renderdoc")) or Path("/usr/lib/librenderdoc.so").exists()
RENDERDOC = [pytest.mark.renderdoc, requires_gpu,
             pytest.mark.skipif(not HAS_RENDERDOC, reason="RenderDoc (librenderdoc) is not installed: run ./setup.sh")]


# -- greedy decoding with the cache fed back ------------------------------------------------------------------------
@dataclass(frozen=True)
class DecodeState:
    """Where a greedy decode stands before a step: its input ids (the prompt, then the last token), the cache fed as
    ``past_*`` (host arrays, or the device Tensors the last step returned) and the tokens so far (the mask's length).
    Frozen: a step that fails leaves the state it was given, so the same step can be run again on the same cache."""

    ids: tuple[int, ...]
    past: tuple[Any, ...]
    length: int

    @classmethod
    def start(cls, prompt: tuple[int, ...]) -> DecodeState:
        empty = np.zeros((1, GPT2.heads, 0, GPT2.head_size), np.float32)
        return cls(tuple(prompt), tuple(empty for _ in range(2 * LAYERS)), len(prompt))

    def feeds(self) -> dict[str, Any]:
        return {"input_ids": np.array([self.ids], np.int64), "attention_mask": np.ones((1, self.length), np.int64),
                **dict(zip(decoders.past_names(LAYERS), self.past, strict=True))}

    def after(self, outputs: Mapping[str, Any]) -> tuple[int, np.ndarray, DecodeState]:
        """The step's greedy token, its last position's logits (read to the host) and the state of the next step."""
        logits = np.array(np.asarray(outputs["logits"])[0, -1])
        token = int(np.argmax(logits))
        past = tuple(outputs[n] for n in decoders.present_names(LAYERS))
        return token, logits, DecodeState((token,), past, self.length + 1)


@dataclass
class Decoded:
    """A greedy decode: per step the token, the last position's logits, the state the step ran from and, for a
    decode with host inputs, its ``present_*`` arrays (the values a held device cache must keep)."""

    tokens: list[int] = field(default_factory=list)
    logits: list[np.ndarray] = field(default_factory=list)
    states: list[DecodeState] = field(default_factory=list)
    presents: list[list[np.ndarray]] = field(default_factory=list)


Run = Callable[[dict[str, Any]], Mapping[str, Any]]


def decode(run: Run, state: DecodeState, steps: int) -> tuple[Decoded, DecodeState]:
    """``steps`` greedy steps from ``state`` through ``run`` (feeds -> outputs); returns them and the next state."""
    done = Decoded()
    for _ in range(steps):
        outputs = run(state.feeds())
        done.states.append(state)
        token, logits, state = state.after(outputs)
        done.tokens.append(token)
        done.logits.append(logits)
        if all(isinstance(outputs[n], np.ndarray) for n in decoders.present_names(LAYERS)):
            done.presents.append([outputs[n] for n in decoders.present_names(LAYERS)])
    return done, state


def on_device_run(worker: ws.Worker, **kwargs: Any) -> Run:
    return lambda feeds: worker.run(feeds, on_device=True, **kwargs)


class Session:
    """What the module's tests share: the exported decoder, one worker per backend, and per backend and prompt the
    reference decode with host numpy inputs (made on first use; the cpu's is the cross-backend reference)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.model = ws.load_model(str(path))
        self._workers: dict[str, ws.Worker] = {}
        self._references: dict[tuple[str, tuple[int, ...]], Decoded] = {}

    def worker(self, backend: str) -> ws.Worker:
        if backend not in self._workers:
            self._workers[backend] = ws.Worker(self.model, backend)
        return self._workers[backend]

    def reference(self, backend: str, prompt: tuple[int, ...] = PROMPT) -> Decoded:
        key = (backend, prompt)
        if key not in self._references:
            self._references[key], _ = decode(self.worker(backend).run, DecodeState.start(prompt), STEPS)
        return self._references[key]

    def close(self) -> None:
        for worker in self._workers.values():
            worker.close()


@pytest.fixture(scope="module")
def session() -> Iterator[Session]:
    shared = Session(decoders.export_gpt2(config=GPT2))
    cpu = shared.reference("cpu")
    assert len(set(cpu.tokens)) > 1, "the random decoder repeats one token: the checks would be weak"
    yield shared
    shared.close()


def check_steps(session: Session, backend: str, tokens: list[int], logits: list[np.ndarray], first: int, what: str,
                prompt: tuple[int, ...] = PROMPT) -> None:
    """Steps ``first``.. of a decode on ``backend`` give the reference's tokens, their logits equal those of the host
    inputs on the same backend and are within LOGIT_TOLERANCE of the cpu backend's."""
    same, cpu = session.reference(backend, prompt), session.reference("cpu", prompt)
    steps = range(first, first + len(tokens))
    assert tokens == [cpu.tokens[i] for i in steps], f"{what}: tokens differ from the cpu backend's"
    for i, got in zip(steps, logits, strict=True):
        np.testing.assert_array_equal(got, same.logits[i], err_msg=f"{what}, step {i}: logits of host inputs")
        worst = float(np.abs(got - cpu.logits[i]).max())
        assert worst <= LOGIT_TOLERANCE, f"{what}, step {i}: logits {worst:.2e} from the cpu backend's"


def check_cache(session: Session, backend: str, state: DecodeState, step: int, what: str) -> None:
    """The device cache ``state`` holds before ``step`` is the host-input decode's ``present_*`` of ``step - 1``."""
    expected = session.reference(backend).presents[step - 1]
    for name, held, want in zip(decoders.past_names(LAYERS), state.past, expected, strict=True):
        np.testing.assert_array_equal(np.asarray(held), want, err_msg=f"{what}: held '{name}'")


# -- the device cache itself --------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_device_cache_decode_gives_the_host_decode(session, backend):
    """The path every other test stands on: the cache fed back as device Tensors gives the host-input decode."""
    worker = session.worker(backend)
    ours, state = decode(on_device_run(worker), DecodeState.start(PROMPT), STEPS)
    check_steps(session, backend, ours.tokens, ours.logits, 0, f"{backend}, cache on the device")
    assert all(isinstance(t, ws.Tensor) for t in state.past)
    assert all(t.on_device for t in state.past) == (backend != "cpu")  # the cpu's device is the host
    assert state.past[0].shape == (1, GPT2.heads, len(PROMPT) + STEPS - 1, GPT2.head_size)  # the last token not fed


# -- 1. the profiler ----------------------------------------------------------------------------------------------
PROFILE_STEP = 2  # a step with a non-empty past


@pytest.mark.parametrize("backend", BACKENDS)
def test_profile_of_a_step_with_device_past(session, backend):
    """ws.profile of a step whose past inputs are device Tensors: the layer rows of the same step with host inputs,
    each timed, with no upload of the past; the held cache is left as it was."""
    worker = session.worker(backend)
    _, state = decode(on_device_run(worker), DecodeState.start(PROMPT), PROFILE_STEP)
    host_state = session.reference(backend).states[PROFILE_STEP]
    quick = {"runs": 2, "warmup": 0, "measure_ceilings": False, "pruning_layers": 0, "pruning_levels": ()}
    started = time.perf_counter()
    on_device = ws.profile(session.model, backend, inputs=state.feeds(), **quick)
    seconds = time.perf_counter() - started
    on_host = ws.profile(session.model, backend, inputs=host_state.feeds(), **quick)

    def rows(profile: ws.Profile) -> list[tuple[Any, ...]]:
        return [(r["name"], r["op_type"], r["flops"], r["bytes"], r["device"]) for r in profile.layers]

    assert len(on_device.layers) > 50, f"{len(on_device.layers)} layer rows"
    assert rows(on_device) == rows(on_host)  # the same layers, costs and placements as the host-input profile
    assert all(r["time_ms"] is not None for r in on_device.layers)
    assert sum(r["time_ms"] for r in on_device.layers) > 0 and on_device.ms_per_batch > 0, f"{seconds:.2f} s"
    assert on_device["inputs"] == on_host["inputs"]
    uploaded = {t["tensor"] for t in on_device["transfers"] if t["kind"] == "upload"}
    uploaded_by_host = {t["tensor"] for t in on_host["transfers"] if t["kind"] == "upload"}
    past = set(decoders.past_names(LAYERS))
    if backend == "cpu":
        assert uploaded == uploaded_by_host == set()
    else:  # the past is bound on the device: only the token and the mask go up
        assert uploaded == {"input_ids", "attention_mask"} and past <= uploaded_by_host
    # Profiling read the cache (its costs come from a cpu run of the feeds) and ran it: the step still gives the
    # reference on the same held tensors, and so does the rest of the decode.
    rest, _ = decode(on_device_run(worker), state, STEPS - PROFILE_STEP)
    check_steps(session, backend, rest.tokens, rest.logits, PROFILE_STEP, f"{backend}, after profiling")


# -- 2. RenderDoc capture -------------------------------------------------------------------------------------------
CAPTURE_STEP = 3
CAPTURE_CHILD = """
import json, os, stat, sys
import numpy as np
sys.path.insert(0, "tools")
import decoders
import wgsentis as ws

args = json.loads(sys.argv[1])
layers, target = args["layers"], args["target"]
ws.renderdoc.enable()  # before the first GPU worker
model = ws.load_model(args["model"])
with ws.Worker(model, args["backend"], debug_groups=args["debug_groups"]) as worker:
    ids, length = list(args["prompt"]), len(args["prompt"])
    past = [np.zeros((1, args["heads"], 0, args["head_size"]), np.float32) for _ in range(2 * layers)]
    tokens = []

    def feeds():
        return {"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, length), np.int64),
                **dict(zip(decoders.past_names(layers), past))}

    for _ in range(args["steps"]):
        out = worker.run(feeds(), on_device=True)
        past = [out[n] for n in decoders.present_names(layers)]
        ids = [int(np.argmax(np.asarray(out["logits"])[0, -1]))]
        length += 1
        tokens.append(ids[0])
    step = feeds()
    worker.run(step, on_device=True)  # records the step's plan outside the capture, as wgsentis capture does
    program = worker.program
    dispatched = [program.graph.layers[i] for i in program.plan_summary()["dispatched_layers"]]
    notes = {"wgsentis": 1, "model": model.name, "backend": args["backend"], "view_layers": [], "fallback_layers": [],
             "gpu_layers": [{"name": l.name, "op": l.op_type} for l in dispatched] if args["debug_groups"] else []}
    with ws.renderdoc.capture(target, notes=notes) as cap:
        captured = worker.run(step, on_device=True)  # returns once its work is submitted
    stats = worker.stats()
    print("RESULT " + json.dumps({
        "name": "capture", "tokens": tokens, "logits": np.asarray(captured["logits"])[0, -1].tolist(),
        "bytes": cap.bytes, "mode": stat.S_IMODE(os.stat(target).st_mode), "dispatched_layers": len(dispatched),
        "upload_bytes": stats["upload_bytes"], "download_bytes": stats["download_bytes"],
        "on_device": all(captured[n].on_device for n in decoders.present_names(layers))}))
"""


def capture_step(session: Session, backend: str, debug_groups: bool, tmp_path: Path) -> tuple[dict, dict]:
    """Capture decode step CAPTURE_STEP with its past fed as device Tensors, in a child process; returns the child's
    result and tools/rdc_report.py's report of the capture."""
    env = dict(os.environ)
    env.setdefault("XDG_RUNTIME_DIR", "/tmp/xdg-rdc")  # RenderDoc's sockets and logs
    Path(env["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True)
    target = tmp_path / f"decode-{backend}.rdc"
    args = {"model": str(session.path), "backend": backend, "debug_groups": debug_groups, "steps": CAPTURE_STEP,
            "target": str(target), "prompt": list(PROMPT), "layers": LAYERS, "heads": GPT2.heads,
            "head_size": GPT2.head_size}
    child = subprocess.run([sys.executable, "-c", CAPTURE_CHILD, json.dumps(args)], capture_output=True, text=True,
                           timeout=300, cwd=ROOT, env=env)
    assert child.returncode == 0, f"child exited {child.returncode}: {child.stderr[-3000:]}"
    result = child_results(child.stdout)["capture"]
    report_path = tmp_path / f"decode-{backend}.json"
    report = subprocess.run([sys.executable, str(ROOT / "tools" / "rdc_report.py"), str(target), "--json",
                             str(report_path)], capture_output=True, text=True, timeout=300, env=env)
    target.unlink()  # ~100 MB: RenderDoc keeps the initial contents of every buffer and texture of the device
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-3000:]
    return result, json.loads(report_path.read_text())


def check_captured_step(session: Session, backend: str, result: dict, report: dict) -> dict[str, int]:
    """The captured step gave the reference, uploaded only the token and the mask, and the capture holds the
    device-to-device copies of its past in and of its outputs out; returns the capture's actions by name."""
    ref = session.reference(backend)
    assert result["tokens"] == ref.tokens[:CAPTURE_STEP]
    check_steps(session, backend, [int(np.argmax(result["logits"]))], [np.asarray(result["logits"], np.float32)],
                CAPTURE_STEP, f"{backend}, the captured step")
    assert result["on_device"] and result["download_bytes"] == 0
    assert result["upload_bytes"] <= 16 * (1 + len(PROMPT) + CAPTURE_STEP)  # the token and the mask, no past
    assert result["mode"] == 0o600 and result["bytes"] > 0
    actions = Counter(a["name"] for a in report["outside_layers"])
    return dict(actions)


@pytest.mark.parametrize("backend", [pytest.param("gpu-pixel", marks=RENDERDOC)])
def test_capture_of_a_step_with_device_inputs_has_every_layer(session, backend, tmp_path):
    """gpu-pixel, debug groups on: every GPU layer of the step is in the capture, beside the texture copies that
    bind the 2 * LAYERS past tensors and detach the step's outputs (2 * LAYERS presents and the logits)."""
    result, report = capture_step(session, backend, True, tmp_path)
    actions = check_captured_step(session, backend, result, report)
    assert report["missing_layers"] == [] and len(report["expected_layers"]) == result["dispatched_layers"] > 50
    assert all(e["draws"] >= 1 for e in report["layers"])
    assert actions.get("vkCmdCopyImage()", 0) >= 2 * LAYERS + 2 * LAYERS + 1, actions


@pytest.mark.parametrize("backend", [pytest.param("gpu-compute", marks=RENDERDOC)])
def test_capture_of_a_step_with_device_inputs_without_debug_groups(session, backend, tmp_path):
    """gpu-compute, debug groups off: the capture holds the step's dispatches and the buffer copies of its device
    past in and of its outputs out."""
    result, report = capture_step(session, backend, False, tmp_path)
    actions = check_captured_step(session, backend, result, report)
    assert actions.get("vkCmdDispatch()", 0) >= result["dispatched_layers"] > 50, actions
    assert actions.get("vkCmdCopyBuffer()", 0) >= 2 * LAYERS + 2 * LAYERS + 1, actions


@pytest.mark.parametrize("backend", [pytest.param("gpu-compute", marks=RENDERDOC)])
def test_capture_of_a_step_with_device_inputs_and_debug_groups_on_gpu_compute(session, backend, tmp_path):
    """gpu-compute, debug groups on: every GPU layer is in the capture. A layer of copies and dispatches (the
    attention's c_attn Gemm) once had its group on the encoder around its pass, and two such groups in one encoder
    crashed RenderDoc's Vulkan layer in encoder.finish() (the child died of SIGSEGV)."""
    result, report = capture_step(session, backend, True, tmp_path)
    check_captured_step(session, backend, result, report)
    assert report["missing_layers"] == []


# -- 3. timeouts and cancel between steps ---------------------------------------------------------------------------
@contextlib.contextmanager
def in_layer(monkeypatch: pytest.MonkeyPatch, layer: str | None,
             action: Callable[[], None]) -> Iterator[list[str | None]]:
    """While inside, the first check a run makes in ``layer`` (None: at the run's start) calls ``action`` first: a
    cancel from another thread, or a layer slow enough to pass the timeout, landing exactly there. Yields the
    layers it fired in."""
    original = RunControl.check
    fired: list[str | None] = []

    def check(control: RunControl, current: Any = None) -> None:
        name = getattr(current, "name", None)
        if not fired and name == layer:
            fired.append(name)
            action()
        original(control, current)

    with monkeypatch.context() as patch:
        patch.setattr(RunControl, "check", check)
        yield fired


@pytest.mark.parametrize("backend", BACKENDS)
def test_interrupted_steps_leave_the_device_cache_usable(session, backend, monkeypatch):
    """A step that times out or is cancelled part-way raises its typed error, naming the layer; the held cache
    keeps its values, and the same step on it then gives the reference; cancel() between steps stops nothing."""
    # A worker of its own: every step's plan is recorded, so a run is checked before each layer (a replay of a
    # recorded plan is one submission, checked at its start).
    attention = [layer.name for layer in session.model.graph.layers if layer.op_type == "Softmax"][1]
    with ws.Worker(session.model, backend) as worker:
        done, state = decode(on_device_run(worker), DecodeState.start(PROMPT), 2)
        tokens, logits = done.tokens, done.logits

        # A step that passes its timeout in block 1's attention, after block 0 read the cache (the layers before it
        # take well under the second).
        with in_layer(monkeypatch, attention, lambda: time.sleep(1.1)) as fired:
            started = time.perf_counter()
            with pytest.raises(RunTimeoutError, match="timeout of 1 s in layer") as timed_out:
                worker.run(state.feeds(), on_device=True, timeout=1.0)
        assert fired == [attention] and timed_out.value.layer == attention, str(timed_out.value)
        assert time.perf_counter() - started < 30
        check_cache(session, backend, state, 2, f"{backend}, after a timeout")
        done, state = decode(on_device_run(worker, timeout=60), state, 1)  # the same step, a bound it keeps
        tokens, logits = tokens + done.tokens, logits + done.logits

        # A step cancelled while it is in that layer.
        with in_layer(monkeypatch, attention, worker.cancel) as fired:
            with pytest.raises(RunCancelledError, match="cancelled in layer") as cancelled:
                worker.run(state.feeds(), on_device=True)
        assert fired == [attention] and cancelled.value.layer == attention, str(cancelled.value)
        check_cache(session, backend, state, 3, f"{backend}, after a cancel")
        done, state = decode(on_device_run(worker), state, 1)
        tokens, logits = tokens + done.tokens, logits + done.logits

        # A replay of a recorded plan stopped before its first layer: step 3 again, its plan recorded just now.
        again = done.states[0]
        with in_layer(monkeypatch, None, lambda: time.sleep(0.1)) as fired:
            with pytest.raises(RunTimeoutError, match="before its first layer"):
                worker.run(again.feeds(), on_device=True, timeout=0.05)
        assert fired == [None]
        worker.cancel()  # between steps, with nothing running: later runs are not affected
        done, state = decode(on_device_run(worker), state, STEPS - 4)
        tokens, logits = tokens + done.tokens, logits + done.logits
    check_steps(session, backend, tokens, logits, 0, f"{backend}, decode with interrupted steps")


# -- 4. the memory budget -------------------------------------------------------------------------------------------
BUDGET_BYTES = 512 << 10  # above a decode step's intermediates and its small cache here (~250 KB at most)...
BALLAST_RUNS = 24  # ... below the outputs of 24 runs of step 1 held on the device (~37 KB each: ~880 KB)


def held(worker: ws.Worker) -> tuple[int, int]:
    stats = worker.stats()
    return stats["held_device_bytes"], stats["held_device_tensors"]


def device_bytes(outputs: list[Mapping[str, ws.Tensor]]) -> tuple[int, int]:
    """The device bytes and the count of the device Tensors in ``outputs`` (each at least its data's bytes)."""
    values = [t.device_value for out in outputs for t in out.values()]
    assert all(v is not None and v.nbytes >= 4 * v.size for v in values)
    return sum(v.nbytes for v in values), len(values)


def release(worker: ws.Worker, state: DecodeState) -> None:
    """Let go of what the worker keeps of its last run (peek_output's outputs), then collect."""
    worker.run(state.feeds())  # host outputs: the worker's last-run Tensors are these now
    gc.collect()


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_held_device_tensors_are_counted_and_freed(session, backend):
    """Each step's outputs held raise held_device_bytes by their device bytes (held_device_tensors by their count);
    dropped, the counts are back where they were."""
    worker = session.worker(backend)
    host_state = session.reference(backend).states[0]
    release(worker, host_state)
    before = held(worker)
    state, kept = DecodeState.start(PROMPT), []
    for step in range(3):
        outputs = worker.run(state.feeds(), on_device=True)
        kept.append(outputs)
        _, _, state = state.after(outputs)
        nbytes, count = device_bytes(kept)
        assert held(worker) == (before[0] + nbytes, before[1] + count), f"step {step}"
    assert nbytes >= 4 * GPT2.head_size * GPT2.heads * (3 + 4 + 5) * 2 * LAYERS  # the three caches at least
    del kept, outputs, state
    # The worker still holds its last run's outputs (what peek_output hands out, and its last run's readback) until
    # its next run replaces them: 9 tensors, 44,960 bytes here.
    release(worker, host_state)
    assert held(worker) == before


@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_memory_budget_counts_the_device_tensors_held(session, backend):
    """A budget that a decode step fits when the caller holds only its cache, but not when it also holds other
    outputs (made by another worker on the same device): the step is refused with a ResourceLimitError
    that names the budget, on a recorded plan and on a new one; dropped, the same step runs and gives the reference.
    (The budget bounds what runs allocate and what callers hold on the device, not the weights.)"""
    shared = session.worker(backend)
    release(shared, session.reference(backend).states[0])
    limit = held(shared)[0] + BUDGET_BYTES
    with ws.Worker(session.model, backend, memory_limit=limit) as worker:
        done, state = decode(on_device_run(worker), DecodeState.start(PROMPT), 2)
        # What the caller also holds: other sequences' caches, made by another worker on the same device (replays of
        # a plan it has, so no new pipelines).
        ballast = [shared.run(session.reference(backend).states[1].feeds(), on_device=True)
                   for _ in range(BALLAST_RUNS)]
        ballast_bytes, _ = device_bytes(ballast)
        assert ballast_bytes > BUDGET_BYTES
        recorded = done.states[1]  # its plan is cached: the replay's check
        with pytest.raises(ResourceLimitError, match=rf"memory_limit of {limit:,} bytes.*held by the caller") as info:
            worker.run(recorded.feeds(), on_device=True)
        assert info.value.limit == limit and info.value.total > limit
        # Named as the plan it is, not as a layer: "the recorded plan of graph '...': its N bytes bring ..."
        assert str(info.value).startswith(f"the recorded plan of graph '{session.model.graph.name}': its "), info.value
        with pytest.raises(ResourceLimitError, match=rf"memory_limit of {limit:,} bytes") as info:
            worker.run(state.feeds(), on_device=True)  # a new signature: refused while its plan is recorded
        assert info.value.total > limit, str(info.value)
        assert info.value.layer in {layer.name for layer in session.model.graph.layers}, str(info.value)
        del ballast
        release(shared, session.reference(backend).states[0])
        rest, _ = decode(on_device_run(worker), state, STEPS - 2)
    check_steps(session, backend, done.tokens + rest.tokens, done.logits + rest.logits, 0, f"{backend}, in budget")


# -- 5. the thread contract -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_threads_sharing_a_worker_each_decode_their_own_device_cache(session, backend):
    """Worker: 'a Worker may be shared by threads ... run returns the outputs of its own inputs; peek_output returns
    the outputs of the last schedule made by the calling thread'. Two threads decode two sequences at once on one
    worker, from device caches the main thread made: one by run, one by schedule + peek_output."""
    worker = session.worker(backend)
    starts = {prompt: DecodeState.start(prompt).after(worker.run(DecodeState.start(prompt).feeds(), on_device=True))
              for prompt in (PROMPT, OTHER_PROMPT)}
    barrier = threading.Barrier(2)
    names = ["logits", *decoders.present_names(LAYERS)]

    def by_schedule(feeds: dict[str, Any]) -> dict[str, ws.Tensor]:
        worker.schedule(feeds, on_device=True)
        return {n: worker.peek_output(n) for n in names}

    def decode_from(prompt: tuple[int, ...], run: Run) -> Decoded:
        barrier.wait()
        return decode(run, starts[prompt][2], STEPS - 1)[0]

    with ThreadPoolExecutor(2) as pool:
        jobs = {PROMPT: pool.submit(decode_from, PROMPT, on_device_run(worker)),
                OTHER_PROMPT: pool.submit(decode_from, OTHER_PROMPT, by_schedule)}
        results = {prompt: job.result(timeout=300) for prompt, job in jobs.items()}
    for prompt, (token, logits, _) in starts.items():
        ours = results[prompt]
        check_steps(session, backend, [token, *ours.tokens], [logits, *ours.logits], 0,
                    f"{backend}, thread decoding {prompt}", prompt)


@pytest.mark.parametrize("backend", BACKENDS)
def test_device_tensors_are_read_from_other_threads(session, backend):
    """A step's device outputs, unread, are read by four threads at once, through each readback API (two of them
    reading the same Tensor); and a cache another thread's run produced feeds a run here."""
    worker = session.worker(backend)
    ref = session.reference(backend)
    state = ref.states[1]  # host past, so that nothing of the outputs below has been read yet
    outputs = worker.run(state.feeds(), on_device=True)
    barrier = threading.Barrier(4)
    readers: dict[str, Callable[[], np.ndarray]] = {
        "np.asarray(logits)": lambda: np.asarray(outputs["logits"]),
        "logits.download_to_array()": lambda: outputs["logits"].download_to_array(),
        "present_0_k.readback_and_clone()": lambda: outputs["present_0_k"].readback_and_clone().download_to_array(),
        "last present.download_to_array()": lambda: outputs[decoders.present_names(LAYERS)[-1]].download_to_array(),
    }

    def read(how: str) -> np.ndarray:
        barrier.wait()
        return readers[how]()

    with ThreadPoolExecutor(4) as pool:
        got = dict(zip(readers, pool.map(read, readers), strict=True))
    np.testing.assert_array_equal(got["np.asarray(logits)"][0, -1], ref.logits[1])
    np.testing.assert_array_equal(got["logits.download_to_array()"][0, -1], ref.logits[1])
    np.testing.assert_array_equal(got["present_0_k.readback_and_clone()"], ref.presents[1][0])
    np.testing.assert_array_equal(got["last present.download_to_array()"], ref.presents[1][-1])
    # The next step's cache made on another thread, fed to a run on this one.
    with ThreadPoolExecutor(1) as pool:
        made = pool.submit(lambda: worker.run(ref.states[2].feeds(), on_device=True)).result(timeout=300)
    token, logits, later = ref.states[2].after(made)
    assert all(t.on_device for t in later.past) == (backend != "cpu")
    check_steps(session, backend, [token], [logits], 2, f"{backend}, made on another thread")
    token, logits, _ = later.after(worker.run(later.feeds(), on_device=True))
    check_steps(session, backend, [token], [logits], 3, f"{backend}, fed from another thread")
