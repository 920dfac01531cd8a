"""Size rules of the recurrences (RNN, GRU, LSTM) and Attention.

Each rule is ``fn(layer, args) -> [(shape, nbytes, detail)]`` (``wgsentis.ops.spec.SizeRule``); the memory budget
(``wgsentis.budget``) reads them from the ops' specs."""

from __future__ import annotations

from typing import Any


from wgsentis.ops import spec
from wgsentis.ops.spec import Output, size_rule


# -- recurrences and attention ---------------------------------------------------------------------------


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
