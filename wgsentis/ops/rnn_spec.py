"""Facets of the recurrences (RNN, GRU, LSTM) and Attention: their size rules, and the recurrences' one shape rule
(``rnn_geometry``) that both GPU backends read.

Each rule is ``fn(layer, args) -> [(shape, nbytes, detail)]`` (``wgsentis.ops.spec.SizeRule``); the memory budget
(``wgsentis.budget``) reads them from the ops' specs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wgsentis.ops import spec
from wgsentis.ops.spec import Output, size_rule


# -- recurrences and attention ---------------------------------------------------------------------------

# The directions a recurrence runs (ONNX's "foward" typo, which exporters wrote, included): reversed or not.
DIRECTIONS = {"forward": (False,), "foward": (False,), "reverse": (True,), "bidirectional": (False, True)}


@dataclass(frozen=True)
class RnnGeometry:
    """A recurrence's sizes: ``reverse`` per direction, sequence, batch, input and hidden sizes, the states'
    shape (its layout's) and the gates' rows (gates * hidden)."""

    reverse: tuple[bool, ...]
    seq: int
    batch: int
    inp: int
    hidden: int
    state_shape: tuple[int, int, int]
    gate_rows: int


def rnn_geometry(X: Any, W: Any, R: Any, B: Any, lens: Any, h0: Any, c0: Any, P: Any, *, direction: Any,
                 layout: Any, hidden_size: Any, gates: int) -> RnnGeometry | None:
    """RNN's, GRU's and LSTM's one shape rule (``gates``: 1, 3, 4): the sizes, or None where the shapes are ones
    the CPU kernel rejects (or there is no step to run)."""
    reverse = DIRECTIONS.get(str(direction).lower())
    if reverse is None or X.ndim != 3 or W.ndim != 3 or R.ndim != 3:
        return None
    dirs = len(reverse)
    seq, batch, inp = (X.shape[1], X.shape[0], X.shape[2]) if int(layout) else X.shape
    hidden = int(hidden_size) if hidden_size is not None else R.shape[-1]
    gh = gates * hidden
    state_shape = (batch, dirs, hidden) if int(layout) else (dirs, batch, hidden)
    if (tuple(W.shape) != (dirs, gh, inp) or tuple(R.shape) != (dirs, gh, hidden) or seq == 0
            or (B is not None and B.size != dirs * 2 * gh) or (P is not None and P.size != dirs * 3 * hidden)
            or (lens is not None and lens.size != batch)
            or any(s is not None and tuple(s.shape) != state_shape for s in (h0, c0))):
        return None
    return RnnGeometry(reverse, seq, batch, inp, hidden, state_shape, gh)


@size_rule("RNN", "GRU", "LSTM")
def _recurrent(layer: Any, args: list[Any]) -> list[Output]:
    x, r = spec.shape_of(args[0]), spec.shape_of(args[2])
    directions, hidden = r[0], r[-1]
    seq, batch = (x[1], x[0]) if int(layer.attrs.get("layout", 0)) else (x[0], x[1])
    return [spec.out((seq, directions, batch, hidden), spec.itemsize_of(args[0]))]


@size_rule("Attention")
def _attention(layer: Any, args: list[Any]) -> list[Output]:
    q, k = spec.shape_of(args[0]), spec.shape_of(args[1])
    past = spec.arg(args, 4)
    if len(q) == 3:
        batch, heads, q_len, kv_len = q[0], int(layer.attrs["q_num_heads"]), q[1], k[1]
    else:
        batch, heads, q_len, kv_len = q[0], q[1], q[2], k[2]
    kv_len += 0 if past is None else spec.shape_of(past)[2]
    return [spec.out((batch, heads, q_len, kv_len), spec.itemsize_of(args[0]), "the attention scores")]
