"""Plans prepared ahead for the next size of inputs that grow by the same step every run, traced while the GPU
runs the current one.

A decoder generating token by token feeds a cache one row longer each step (past_key_values (1, H, P, D), an
attention_mask (1, P + 1)): every run is a new size, and each new size's plan is traced (resize.py: from its
structure's base) before its GPU work can start, ~12 ms of host time on a GPT-2 step on lavapipe where a replay
encodes in ~1 ms. That host time is spent either way; what can change is when. Once a run is submitted the host
only waits for the device, for as long as the step takes (~13 ms on lavapipe for the same step), so the next
size's plan is traced then, and the next run replays it.

``SizeLookahead`` keeps each structure's last signatures. Where the last four runs of a structure had sizes in
arithmetic progression (every dim the same step each time, some step not zero), it predicts the next signature,
and right after the run's submission ``prepare`` traces that plan from *stand-in* feeds and caches it. A trace reads
of its feeds only what a stand-in gives the same: shapes, dtypes, int64 bounds and where each lives (a host array, a
device tensor that binds into the plan's input), and the values of inputs read on the host, which the plan keeps
(``Plan.host_read_inputs``) and every run compares, so a run whose values differ records anew. The stand-ins: an
input whose shape stays is the run's own value; one that grows is the run's value with its last slice repeated
(a mask of ones stays ones, an int64 bound stays what it was), or zeros for a float input the plan does not read
on the host; a device tensor is a ``PredictedDeviceValue`` of the new shape, which binds where the run's did and
holds no memory. The plan cache keeps the prepared plan beside its ``max_plans`` (``PlanCache.put_ahead``: it
evicts nothing until a run takes it): a prediction that misses costs one trace's host time and that plan's delta
memory until the next prediction replaces it; two misses in a row, or a trace that fails, stop the lookahead for
that structure.

Nothing is prepared while runs are profiled (timestamps, debug groups: captures), where the program keeps a single
plan, or with ``prepare_ahead=False``. The trace runs under the run's memory limit and cancel token, not its
timeout (the run itself is done). ``stats()`` counts plans prepared ahead and runs that replayed one; a run's
``ahead_ms`` is the host time it spent preparing the next."""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict
from typing import Any

import numpy as np

from wgsentis.backends.gpu.collector import COLLECTOR
from wgsentis.backends.gpu.device_tensors import DeviceValue
from wgsentis.backends.gpu.report import RunReport
from wgsentis.errors import RunCancelledError, WgSentisError
from wgsentis.run_control import RunControl

# Runs whose sizes must step alike before the next is predicted: four (three equal steps), so that three sizes
# in chance progression (8, 24, 40) predict nothing.
STEADY_RUNS = 4
MAX_STRUCTURES = 8  # structures whose signature histories are kept, the least recently run dropped first
MAX_MISSES = 2  # predictions in a row that the next run did not take, after which a structure is no longer predicted


class PredictionUnusable(Exception):  # noqa: N818 - internal: the lookahead gives up, never reaches users
    """A trace of a predicted size needed what a stand-in does not have (a device tensor's values)."""


class PredictedDeviceValue(DeviceValue):
    """A stand-in for a device tensor of a size no run has computed yet: the shape, dtype and int64 bound a plan is
    traced for, and whether it binds into the plan's input (as the run's own tensor did). It holds no device memory
    and counts nothing as held; reading it raises ``PredictionUnusable``."""

    __slots__ = ("binds",)

    def __init__(self, like: DeviceValue, shape: tuple[int, ...], binds: bool) -> None:
        # (DeviceValue.__init__ is not called: it would count device bytes as held by the caller.)
        self.ctx, self.backend, self.resource = like.ctx, like.backend, None
        self.shape, self.dtype, self.bound, self.name = tuple(shape), like.dtype, like.bound, like.name
        self.nbytes = 4 * int(np.prod(self.shape, dtype=np.int64))
        self.layout, self.binds = None, binds
        self._host = self._promise = self._staging = None

    def binds_into(self, ctx: Any, backend: str, layout: Any) -> bool:
        return self.binds and ctx is self.ctx and backend == self.backend

    def read(self) -> np.ndarray:
        raise PredictionUnusable(f"a trace of a predicted size reads device input '{self.name}' on the host")

    def copy_into(self, encoder: Any, target: Any, offset: int = 0) -> int:
        raise PredictionUnusable(f"a trace of a predicted size copies device input '{self.name}'")


def next_signature(history: list[tuple], signature: tuple) -> tuple | None:
    """The signature after ``signature`` where it and the last ``STEADY_RUNS - 1`` of ``history`` (oldest first)
    step every dim of every input by the same amount each time, some step not zero; None otherwise. Signatures
    are sorted ``(name, shape, dtype)`` entries (anything else, such as a sequence input, predicts nothing)."""
    if len(history) < STEADY_RUNS - 1:
        return None
    runs = [*history[1 - STEADY_RUNS:], signature]
    if any(len(r) != len(signature) or any(len(e) != 3 or len(e[1]) != len(c[1])
                                           for e, c in zip(r, signature, strict=True)) for r in runs):
        return None
    steps = _steps(runs[-2], signature)
    if any(_steps(older, newer) != steps for older, newer in itertools.pairwise(runs[:-1])):
        return None
    if not any(any(step) for step in steps):
        return None
    predicted = tuple((c[0], tuple(d + s for d, s in zip(c[1], step, strict=True)), c[2])
                      for c, step in zip(signature, steps, strict=True))
    return predicted if all(d >= 0 for entry in predicted for d in entry[1]) else None


def _steps(older: tuple, newer: tuple) -> list[tuple[int, ...]]:
    """Per input of two signatures of one structure, how much each dim grew from ``older`` to ``newer``."""
    return [tuple(y - x for x, y in zip(a[1], b[1], strict=True)) for a, b in zip(older, newer, strict=True)]


def stand_in(program: Any, name: str, value: Any, shape: tuple[int, ...], plan: Any) -> Any:
    """A stand-in for input ``name``'s ``value`` at ``shape``, for the next size's trace (see the module's
    docstring); ``plan`` is the run's own."""
    if tuple(value.shape) == shape:
        return value
    if isinstance(value, DeviceValue):
        t = plan.input_tensors.get(name)
        return PredictedDeviceValue(value, shape, t is None or program.binds_device_value(value, t))
    array = np.asarray(value)
    if name not in plan.host_read_inputs and array.dtype.kind == "f":
        return np.zeros(shape, array.dtype)  # (neither read on the host nor bounded: only its shape matters)
    # Shrunk axes cut, grown ones extended by their last slice (the same values, the same int64 bound).
    cut = array[tuple(slice(0, min(n, d)) for n, d in zip(shape, array.shape, strict=True))]
    if cut.size == 0:
        return np.zeros(shape, array.dtype)
    return np.pad(cut, [(0, n - d) for n, d in zip(shape, cut.shape, strict=True)], mode="edge")


class SizeLookahead:
    """Per structure (input names, ranks, dtypes), the last signatures run and the prediction prepared for it;
    counts of plans prepared ahead, runs that replayed one and preparations that failed."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.paused = False  # while runs are profiled (GPUProgram.set_timestamps)
        self._history: OrderedDict[tuple, list[tuple]] = OrderedDict()
        self._pending: dict[tuple, tuple] = {}  # structure -> the signature prepared for its next run
        self._misses: dict[tuple, int] = {}
        self._stopped: set[tuple] = set()  # structures not predicted any more
        self.prepared = 0
        self.used = 0
        self.failed = 0

    def observe(self, structure: tuple, signature: tuple) -> tuple | None:
        """A run of ``signature`` begins: returns the signature predicted for the structure's next run, or None."""
        if not self.enabled:
            return None
        pending = self._pending.pop(structure, None)
        if pending is not None and pending != signature:
            self._miss(structure)
        history = self._history.pop(structure, [])
        predicted = None if structure in self._stopped else next_signature(history, signature)
        self._history[structure] = [*history[2 - STEADY_RUNS:], signature]
        while len(self._history) > MAX_STRUCTURES:
            self._history.popitem(last=False)
        return predicted

    def prepare(self, program: Any, predicted: tuple | None, structure: tuple, feeds: dict[str, Any],
                plan: Any) -> None:
        """Trace and cache the plan of ``predicted`` (``observe``'s answer for this run), the run of ``feeds``
        with ``plan`` having been submitted; nothing where there is nothing to predict, the program is profiled or
        keeps one plan, or the plan exists already."""
        if (predicted is None or self.paused or structure in self._stopped or program.debug_groups
                or program.plans.capacity < 2 or predicted in program.plans):
            return
        shapes = {entry[0]: entry[1] for entry in predicted}
        ahead = {name: stand_in(program, name, value, shapes[name], plan) for name, value in feeds.items()}
        # What stats() says of the run (its report, plan and the last recording's counts) stays the run's own.
        saved = (program.last_run, program.last_plan, program.control, program.gpu_layers_kept,
                 program.layer_reuse.reused, program.layer_reuse.built, program.shape_values.kept)
        report = program.last_run
        control = program.control
        program.last_run = RunReport()
        if control is not None:  # (the budget and the cancel token hold; the run's timeout is the run's)
            program.control = RunControl(model=control.model, memory_limit=control.memory_limit,
                                         max_loop_iterations=control.max_loop_iterations, token=control.token)
        started = time.perf_counter()
        try:
            with COLLECTOR.paused():  # (collector.py)
                prepared = program.trace_signature(structure, ahead)
        except RunCancelledError:
            return  # (the run's token: no verdict on the prediction)
        except (WgSentisError, PredictionUnusable):
            prepared = None
        finally:
            (program.last_run, program.last_plan, program.control, program.gpu_layers_kept,
             program.layer_reuse.reused, program.layer_reuse.built, program.shape_values.kept) = saved
            report.ahead += time.perf_counter() - started
        if prepared is None:
            self.failed += 1
            self._stopped.add(structure)
            return
        prepared.prepared_ahead = True
        program.plans.put_ahead(predicted, prepared)
        self._pending[structure] = predicted
        self.prepared += 1

    def rejected(self, structure: tuple, plan: Any) -> None:
        """A run of ``plan``'s signature found values of its inputs read on the host other than it was traced for:
        where it was prepared ahead, a miss (the values were not the ones predicted)."""
        if plan.prepared_ahead:
            self._miss(structure)

    def _miss(self, structure: tuple) -> None:
        self._misses[structure] = self._misses.get(structure, 0) + 1
        if self._misses[structure] >= MAX_MISSES:
            self._stopped.add(structure)

    def replayed(self, structure: tuple, plan: Any, report: RunReport) -> None:
        """A run of ``structure`` replays ``plan``: counted where the plan was prepared ahead (its first replay)."""
        if plan.prepared_ahead:
            plan.prepared_ahead = False
            report.prepared_ahead = True
            self.used += 1
            self._misses.pop(structure, None)  # (a hit: misses count in a row)
