"""Per-run limits a worker hands to its program: a deadline, a cancel token, the memory budget and the bound on
the iterations of a Loop that has no trip count.

A program calls ``before_layer`` before each layer (and a Loop or Scan kernel before each iteration),
so a run stops between layers when it is cancelled or late, and a layer whose outputs would exceed the
memory budget is refused before anything is allocated. Backends know nothing of the worker: this object
is all they see of it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from wgsentis.budget import check_layer_outputs
from wgsentis.errors import InputError, LayerError, ResourceLimitError, RunCancelledError, RunTimeoutError

# A Loop with no trip count (or INT64_MAX, exporters' "infinite") runs until its condition turns false: past this
# many iterations it is taken for a model whose condition never does, and stopped with a LayerError rather than
# left to hang (``Worker(max_loop_iterations=...)`` moves the bound). A finite trip count is trusted as it is.
DEFAULT_MAX_LOOP_ITERATIONS = 1_000_000


def default_memory_limit() -> int:
    """Half the machine's physical memory: the documented default of ``Worker(memory_limit=...)``."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")) // 2
    except (ValueError, OSError, AttributeError):  # not POSIX: assume 16 GiB of physical memory
        return 8 << 30


def parse_memory_limit(value: Any, where: str = "Worker(memory_limit=...)") -> int | None:
    """``memory_limit`` as bytes: a positive int, "default" (half the physical memory) or None (no limit)."""
    if value is None:
        return None
    if isinstance(value, str) and value == "default":
        return default_memory_limit()
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InputError(f"{where}: memory_limit must be a positive number of bytes, 'default' or None, "
                         f"got {value!r}")
    return value


def parse_timeout(value: Any, where: str) -> float | None:
    """A run's ``timeout`` in seconds: a positive number or None (no bound)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise InputError(f"{where}: timeout must be a positive number of seconds or None, got {value!r}")
    return float(value)


def parse_max_loop_iterations(value: Any, where: str = "Worker(max_loop_iterations=...)") -> int:
    """``max_loop_iterations`` as a positive int (the bound on a Loop with no trip count)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{where}: max_loop_iterations must be a positive integer, got {value!r}")
    return value


def check_loop_iterations(control: RunControl | None, layer: Any, iteration: int) -> None:
    """Raise LayerError naming the Loop ``layer`` when an unbounded Loop (no trip count, or an 'infinite' one) is
    about to run iteration ``iteration`` (0-based) past the run's bound; the same check on every backend.
    Without a RunControl (a program run directly) the default bound applies."""
    bound = DEFAULT_MAX_LOOP_ITERATIONS if control is None else control.max_loop_iterations
    if iteration < bound:
        return
    raise LayerError(getattr(layer, "name", str(layer)), getattr(layer, "op_type", "Loop"),
                     f"Loop ran {iteration} iterations with no trip count (or an 'infinite' one) and its condition "
                     f"never turned false: stopped at the bound Worker(max_loop_iterations={bound}) "
                     "(raise it if the model truly needs more; a model bug?)")


class CancelToken:
    """Set by ``Worker.cancel()``; every run scheduled before that call holds this token."""

    # A plain flag, read before every layer (an Event's is_set costs a call and a lock-free check more; nothing
    # waits on the token): setting it is atomic under the GIL.
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class RunControl:
    """What bounds one run: ``memory_limit`` bytes per allocation request (None: unbounded), a
    ``timeout`` in seconds counted from the run's start (None: unbounded), a cancel token, and
    ``max_loop_iterations``, the iterations a Loop with no trip count may run (``check_loop_iterations``)."""

    model: str = "model"
    memory_limit: int | None = None
    timeout: float | None = None
    max_loop_iterations: int = DEFAULT_MAX_LOOP_ITERATIONS
    token: CancelToken = field(default_factory=CancelToken)
    deadline: float | None = None  # time.monotonic() past which the run stops; set by start()
    layer: Any = None  # the layer running now (what an interruption names)

    def start(self) -> None:
        """Mark the run's start: the timeout counts from here (time queued behind other runs is not counted)."""
        self.deadline = None if self.timeout is None else time.monotonic() + self.timeout
        self.check()

    def check(self, layer: Any = None) -> None:
        """Raise RunCancelledError / RunTimeoutError when the run must stop; ``layer`` is the one running."""
        if layer is not None:
            self.layer = layer
        token_cancelled = self.token.cancelled
        late = self.deadline is not None and time.monotonic() > self.deadline
        if not (token_cancelled or late):
            return
        current = self.layer
        name = getattr(current, "name", None)
        op = getattr(current, "op_type", None)
        where = f"in layer '{name}' ({op})" if name else "before its first layer"
        if token_cancelled:
            raise RunCancelledError(f"model '{self.model}': the run was cancelled {where}", name, op)
        raise RunTimeoutError(f"model '{self.model}': the run passed its timeout of {self.timeout:g} s {where}",
                              name, op)

    def check_bytes(self, layer: Any, shape: tuple[int, ...] | None, nbytes: int, detail: str = "") -> None:
        """Raise ResourceLimitError when ``nbytes`` (a layer's output, or what it accumulates) exceeds the
        memory budget; call it before allocating."""
        if self.memory_limit is not None and nbytes > self.memory_limit:
            raise ResourceLimitError(getattr(layer, "name", str(layer)), getattr(layer, "op_type", "?"),
                                     shape, nbytes, self.memory_limit, detail)

    def before_layer(self, layer: Any, args: list[Any]) -> None:
        """The checks made before a layer runs: interruption, then its outputs' size against the budget."""
        self.check(layer)
        if self.memory_limit is not None:
            check_layer_outputs(self, layer, args)
