"""gpu-pixel programs of the rnn family: RNN, GRU and LSTM (float32), as draws.

One product (matmul_pixel's) projects the inputs of every time step and direction at once: ``XW = X @ W^T + b``
with the biases that add up front folded in (Wb, and Rb of every gate but GRU's h gate with linear_before_reset),
each gate's columns padded to a multiple of four so a block of four hidden units of one gate is one texel. Then
one draw per time step renders the new state of both directions (wgsl/pixel/rnn_cell.wgsl, rnn_gru.wgsl,
rnn_lstm.wgsl: a fragment per four hidden units of one direction and batch row, H and C as two render targets);
GRU without linear_before_reset draws r . H first (rnn_gru_reset.wgsl), as its candidate needs r of every unit.
States are (dirs, batch, hidden) textures blocked on hidden; the first step reads initial_h / initial_c in their
own layout. ``sequence_lens`` is read on the device: a finished sequence keeps its state. Y joins the states of
the steps (wgsl/pixel/rnn_y.wgsl: as many per draw as a draw binds, then the joins), reversing the backward
direction's steps, writing zeros past each sequence's length and laying Y out for ``layout``. What gpu-compute
declines (rnn_gpu.py), these decline too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from wgsentis.backends.gpu.shader_gen import rnn_join_subs
from wgsentis.backends.gpu.tensors import GTensor, loop_passes
from wgsentis.ops.matmul_pixel import divided, product
from wgsentis.ops.registry import GPU_PIXEL
from wgsentis.ops.rnn import DEFAULT_ACTIVATIONS
from wgsentis.ops.rnn_spec import rnn_geometry
from wgsentis.ops.rnn_gpu import step_activations, register_recurrent

# Step-draw flags (see wgsl/pixel/rnn_common.wgsl).
F_LENS, F_H0_ZERO, F_C0_ZERO, F_CLIP, F_VARIANT, F_PEEP, F_BIAS = (1 << k for k in range(7))
F_REVERSE = 256  # << direction
# rnn_y.wgsl's flags.
Y_LENS, Y_LAYOUT = 1, 2

MAX_PARTS = 12  # step states a Y join binds (WebGPU's 16 sampled textures a stage, less the lens and a margin)
OVERHEAD = 16  # loop passes of a step draw besides its products

# Stand-ins bound where an optional input is absent (module level: uploaded once per program).
_ZERO_F = np.zeros(4, np.float32)
_ZERO_I = np.zeros(4, np.int32)

_CELLS = {  # op -> (gates, default activations, step shader)
    "RNN": (1, DEFAULT_ACTIVATIONS["RNN"], "pixel/rnn_cell.wgsl"),
    "GRU": (3, DEFAULT_ACTIVATIONS["GRU"], "pixel/rnn_gru.wgsl"),
    "LSTM": (4, DEFAULT_ACTIVATIONS["LSTM"], "pixel/rnn_lstm.wgsl"),
}


def _is_f32(t: Any) -> bool:
    return t is None or (getattr(t, "dtype", None) == np.float32 and isinstance(t, np.ndarray | GTensor))


def _folded(gates: int, lbr: bool) -> list[bool]:
    """Which gates' recurrent bias Rb adds up front (into XW): all but GRU's h gate with linear_before_reset."""
    return [not (lbr and g == 2) for g in range(gates)]


def _pack_w(W: np.ndarray, dirs: int, gates: int, hidden: int, hp: int) -> np.ndarray:
    """W (dirs, gates * hidden, inp) as (inp, dirs * gates * hp): transposed, each gate's columns padded."""
    inp = W.shape[-1]
    out = np.zeros((inp, dirs, gates, hp), np.float32)
    out[..., :hidden] = W.reshape(dirs, gates, hidden, inp).transpose(3, 0, 1, 2)
    return out.reshape(inp, dirs * gates * hp)


def _pack_bias(B: np.ndarray, dirs: int, gates: int, hidden: int, hp: int, lbr: bool) -> np.ndarray:
    """The biases XW adds, (1, dirs * gates * hp): Wb plus the folded Rb, each gate's columns padded."""
    b = B.reshape(dirs, 2, gates, hidden).astype(np.float32)
    total = b[:, 0] + b[:, 1] * np.array(_folded(gates, lbr), np.float32)[None, :, None]
    out = np.zeros((dirs, gates, hp), np.float32)
    out[..., :hidden] = total
    return out.reshape(1, dirs * gates * hp)


def _weights(rec, name: str, W, R, B, *, dirs: int, gates: int, hidden: int, inp: int, lbr: bool):
    """(W^T padded (inp, N), the XW bias (1, N) or None, R4 (dirs, gates, hidden, hidden) blocked on axis 2, GRU's
    Rb_h (dirs, hidden) or None): host constants packed once per program, device tensors rearranged by draws."""
    hp = -(-hidden // 4) * 4
    n = dirs * gates * hp
    if isinstance(W, np.ndarray):
        wt = rec.upload(rec.derived(("pixel-rnn-W", gates, hidden), (W,),
                                    lambda: _pack_w(W, dirs, gates, hidden, hp)), f"{name}:W^T")
    else:
        w = rec.tensor(W, f"{name}:W")
        # (inp, N): column n is unit j = n % hp of gate-row dg = n // hp, zero past hidden
        wt = rec.map([w], (inp, n), np.float32, -1, "pixel/body/rnn_w_transpose.wgsl", [hp, hidden, gates])
    bias = None
    rbh = None
    if isinstance(B, np.ndarray):
        bias = rec.upload(rec.derived(("pixel-rnn-B", gates, hidden, lbr), (B,),
                                      lambda: _pack_bias(B, dirs, gates, hidden, hp, lbr)), f"{name}:bias")
        if lbr:
            rbh = rec.upload(rec.derived(("pixel-rnn-Rbh", gates, hidden), (B,),
                                         lambda: B.reshape(dirs, 2 * gates * hidden)[:, (gates + 2) * hidden:]
                                         .astype(np.float32)), f"{name}:Rb_h")
    elif B is not None:
        b = rec.tensor(B, f"{name}:B")
        fold = sum(1 << g for g, f in enumerate(_folded(gates, lbr)) if f)
        bias = rec.map([b], (1, n), np.float32, -1, "pixel/body/rnn_bias.wgsl", [hp, hidden, gates, fold])
        if lbr:
            rbh = rec.map([b], (dirs, hidden), np.float32, -1, "pixel/body/rnn_rbh.wgsl", [(gates + 2) * hidden])
    if isinstance(R, np.ndarray):
        r4 = rec.upload(rec.derived(("pixel-rnn-R", gates, hidden), (R,),
                                    lambda: R.reshape(dirs, gates, hidden, hidden)), f"{name}:R", 2)
    else:
        r = rec.tensor(R, f"{name}:R", axis=-1)
        r4 = rec.relayout(rec.reshape(r, (dirs, gates, hidden, hidden), -1), 2)
    return wt, bias, r4, rbh


def _join(rec, parts: list[GTensor], out: GTensor, steps: int, dirs: int, batch: int, jbs: int, flags: int,
          size: int, lens: GTensor, limit: int) -> None:
    """One rnn_y.wgsl draw of ``out`` from ``parts`` (``size`` steps each, the last maybe fewer), bound as
    ``limit`` parts (the last repeated, never read past ``steps``): one pipeline for every sequence length."""
    parts = parts + [parts[-1]] * (limit - len(parts))
    params = [out.layout.texels, out.layout.shift, steps, dirs, batch, jbs, flags, size, lens.layout.shift,
              *[p.layout.shift for p in parts]]
    rec.draw("pixel/rnn_y.wgsl", [*parts, lens], [out], params, subs=rnn_join_subs(limit))


def _assemble(rec, states: list[GTensor], y_shape: tuple[int, ...], dirs: int, batch: int, hidden: int,
              flags: int, lens: GTensor) -> GTensor:
    """Y from the per-step states: joins of MAX_PARTS parts in step order while there are more, then the last;
    every join binds as many parts (``_join``), so the sequence length is only in words."""
    jbs = -(-hidden // 4)
    # The step states as one-step parts (1, dirs, batch, hidden), the rank of the joined ones: a join's pipeline
    # key holds its parts' ranks, and so is the same whether or not Y takes joins of joins.
    parts = [rec.reshape(s, (1, dirs, batch, hidden), -1) for s in states]
    size, seq = 1, len(states)
    limit = max(2, min(MAX_PARTS, int(rec.ctx.limits.get("max-sampled-textures-per-shader-stage", 16)) - 2))
    while len(parts) > limit:
        joined = []
        for i in range(0, len(parts), limit):
            group = parts[i:i + limit]
            steps = min(size * len(group), seq - i * size)
            out = rec.alloc((steps, dirs, batch, hidden), np.float32, -1)
            _join(rec, group, out, steps, dirs, batch, jbs, 0, size, lens, limit)
            joined.append(out)
        parts, size = joined, size * limit
    y = rec.alloc(y_shape, np.float32, -1)
    _join(rec, parts, y, seq, dirs, batch, jbs, flags, size, lens, limit)
    return y


def _batch_major(rec, state: GTensor) -> GTensor:
    """A (dirs, batch, hidden) state as (batch, dirs, hidden) (layout=1's Y_h / Y_c), texel by texel."""
    dirs, batch, hidden = state.shape
    return rec.texels([state], (batch, dirs, hidden), np.float32, -1, "pixel/body/rnn_batch_major.wgsl")


def _run(op: str, rec, layer, X, W, R, B, lens, h0, c0, P, *, activation_alpha, activation_beta, activations,
         clip, direction, hidden_size, layout, variant):
    """Record the projection, the step draws and Y; returns the requested outputs."""
    gates, defaults, shader = _CELLS[op]
    if not all(_is_f32(t) for t in (X, W, R, B, h0, c0, P)) or X is None or W is None or R is None:
        return NotImplemented
    if lens is not None and getattr(lens, "dtype", None) not in (np.int32, np.int64):
        return NotImplemented
    geo = rnn_geometry(X, W, R, B, lens, h0, c0, P, direction=direction, layout=layout, hidden_size=hidden_size,
                       gates=gates)
    if geo is None or 0 in (geo.hidden, geo.batch, geo.inp):
        return NotImplemented  # shapes the CPU kernel rejects, or nothing to run
    layout = int(layout)
    reverse, dirs = geo.reverse, len(geo.reverse)
    seq, batch, inp, hidden = geo.seq, geo.batch, geo.inp, geo.hidden
    funcs = step_activations(activations, activation_alpha, activation_beta, defaults, dirs)
    if funcs is None:
        return NotImplemented
    jbs = -(-hidden // 4)
    # Loop passes: the projection's product, and each step's gate products one after another.
    step_passes = gates * loop_passes(hidden // 4) + OVERHEAD
    if not (rec.loops_fit(loop_passes(inp // 4)) and rec.loops_fit(step_passes)):
        return NotImplemented
    if isinstance(lens, np.ndarray) and np.all(np.asarray(lens).reshape(-1) == seq):
        lens = None  # every sequence full: no mask, as the CPU kernel

    name = layer.name
    lbr = op == "GRU" and bool(variant)
    x = rec.tensor(X, f"{name}:X", axis=-1)
    zero = rec.upload(rec.static(_ZERO_F), "rnn:zero")
    lens_t = rec.tensor(lens, f"{name}:sequence_lens", axis=0) if lens is not None \
        else rec.upload(rec.static(_ZERO_I), "rnn:zi")
    h_in = rec.tensor(h0, f"{name}:initial_h", axis=-1) if h0 is not None else zero
    c_in = rec.tensor(c0, f"{name}:initial_c", axis=-1) if c0 is not None else zero
    if P is None:
        peep = zero
    elif isinstance(P, np.ndarray):
        peep = rec.upload(rec.derived(("pixel-rnn-P", hidden), (P,), lambda: P.reshape(dirs, 3, hidden)),
                          f"{name}:P")
    else:
        peep = rec.reshape(rec.tensor(P, f"{name}:P", axis=-1), (dirs, 3, hidden), -1)
    if any(t is None for t in (x, lens_t, h_in, c_in, peep)):
        return NotImplemented
    wt, bias, r4, rbh = _weights(rec, name, W, R, B, dirs=dirs, gates=gates, hidden=hidden, inp=inp, lbr=lbr)

    # (1) XW = X @ W^T + biases: (seq * batch, dirs * gates * hp) rows in X's order, one product.
    rows, ncols = seq * batch, dirs * gates * jbs * 4
    xw = rec.alloc((rows, ncols), np.float32, -1)
    kb = -(-inp // 4)
    c = (bias, 0, 1, 1) if bias is not None else None  # one row broadcast, a texel of four columns
    if not product(rec, layer, rec.view(x, (rows, inp)), wt, xw, m=rows, n=ncols, k=inp, batch=(),
                    a_strides=(kb, 1, []), b_strides=(ncols // 4, 1, []), c=c):
        return NotImplemented

    # (2) The steps, both directions in each draw.
    def strides(lay: int) -> list[int]:  # texel strides (dir, batch) of a state
        return [jbs, dirs * jbs] if lay else [batch * jbs, jbs]

    flags = (F_LENS * (lens is not None) | F_CLIP * (clip is not None) | F_VARIANT * (op == "LSTM" and bool(variant))
             | F_PEEP * (P is not None) | F_BIAS * (rbh is not None))
    for d, rev in enumerate(reverse):
        flags |= F_REVERSE << d if rev else 0
    act_params: list[float] = []
    subs = {}
    for d in range(2):
        fs = funcs[min(d, dirs - 1)]
        for k in range(3):
            act_params += [float(v) for v in fs[k][1:]] if k < len(fs) else [0.0, 0.0]
    for k, letter in enumerate("FGH"):
        for d in range(2):
            fs = funcs[min(d, dirs - 1)]
            subs[f"{letter}{d}"] = divided(rec, fs[k][0]) if k < len(fs) else "v"
    xw_strides = [1, seq] if layout else [batch, 1]  # XW rows per (time, batch row)
    clip_bound = float(clip) if clip is not None else 0.0

    def words(out: GTensor, h: GTensor, cell: GTensor, rh: GTensor, s: int, step_flags: int) -> list[int | float]:
        """rnn_common.wgsl's params of step ``s`` drawing ``out``; the first step reads the states in the input
        layout, later ones in the canonical (dirs, batch, hidden)."""
        state_strides = strides(layout if s == 0 else 0)
        return [out.layout.texels, out.layout.shift, dirs, batch, hidden, jbs, seq, s, step_flags, clip_bound,
                xw.layout.shift, r4.layout.shift, h.layout.shift, cell.layout.shift, lens_t.layout.shift,
                peep.layout.shift, rbh.layout.shift if rbh is not None else 0, rh.layout.shift, *state_strides,
                *state_strides, *xw_strides, ncols // 4, gates, *act_params]

    state = (dirs, batch, hidden)
    wanted = [bool(o) for o in layer.outputs] + [False] * 3
    states: list[GTensor] = []  # each step's H, for Y
    h, cell = h_in, c_in
    for s in range(seq):
        first = s == 0
        step_flags = flags | (F_H0_ZERO * (h0 is None) | F_C0_ZERO * (c0 is None) if first else 0)
        h_new = rec.alloc(state, np.float32, -1)
        if op == "RNN":
            rec.draw(shader, [xw, r4, h, lens_t], [h_new], words(h_new, h, cell, zero, s, step_flags), subs=subs)
        elif op == "LSTM":
            c_new = rec.alloc(state, np.float32, -1)
            rec.draw(shader, [xw, r4, h, cell, lens_t, peep], [h_new, c_new],
                     words(h_new, h, cell, zero, s, step_flags), subs=subs)
            cell = c_new
        else:
            rh = zero  # r . H is zero where H is (the first step without initial_h)
            if not lbr and not (first and h0 is None):
                rh = rec.alloc(state, np.float32, -1)
                rec.draw("pixel/rnn_gru_reset.wgsl", [xw, r4, h], [rh], words(rh, h, cell, zero, s, step_flags),
                         subs=subs)
            rec.draw(shader, [xw, r4, h, lens_t, rbh if rbh is not None else zero, rh], [h_new],
                     words(h_new, h, cell, rh, s, step_flags), constants={"LINEAR_BEFORE_RESET": lbr}, subs=subs)
        h = h_new
        if wanted[0]:
            states.append(h_new)

    # (3) The outputs in the requested layout.
    y = None
    if wanted[0]:
        y_flags = Y_LENS * (lens is not None) | Y_LAYOUT * bool(layout)
        for d, rev in enumerate(reverse):
            y_flags |= F_REVERSE << d if rev else 0
        y_shape = (batch, seq, dirs, hidden) if layout else (seq, dirs, batch, hidden)
        y = _assemble(rec, states, y_shape, dirs, batch, hidden, y_flags, lens_t)
    y_h = (_batch_major(rec, h) if layout else h) if wanted[1] else None
    y_c = (_batch_major(rec, cell) if layout else cell) if wanted[2] and op == "LSTM" else None
    results = [y, y_h, y_c]
    n = max(1, len(layer.outputs))
    return tuple(results[:n]) if n > 1 else results[0]


# RNN: 1 projection + seq_len step draws + the joins of Y; GRU: 2 draws a step without linear_before_reset;
# LSTM: H and C as two render targets of each step's draw.
register_recurrent(GPU_PIXEL, _run)
