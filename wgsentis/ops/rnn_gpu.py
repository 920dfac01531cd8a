"""gpu-compute programs of the rnn family: RNN, GRU and LSTM (float32).

One dispatch projects the inputs of every time step and direction at once (``XW = X @ W^T + Wb``,
a 4x4 register-tile matmul in rnn_proj.wgsl); then one dispatch per time step computes the recurrent
product ``H_prev @ R^T``, the gates and the new state of both directions together, writing ``Y[t]``
directly: 1 + seq_len dispatches in all. Hidden and cell states ping-pong between two buffers; the
first step reads initial_h / initial_c in their own layout and the last step writes Y_h / Y_c in
theirs, so no transposes or copies are needed. ``sequence_lens`` is read on the device: a finished
sequence keeps its state and writes zeros to Y, exactly the CPU kernel's mask.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from wgsentis.backends.gpu.tensors import loop_passes
from wgsentis.ops.activations import rnn_activations
from wgsentis.ops.registry import GPU_COMPUTE, register
from wgsentis.ops.rnn import DEFAULT_ACTIVATIONS
from wgsentis.ops.rnn_spec import rnn_geometry

# Step-kernel flags (see wgsl/compute/rnn_common.wgsl).
F_BIAS, F_LENS, F_H0_ZERO, F_C0_ZERO, F_Y, F_CLIP, F_VARIANT, F_PEEP = (1 << k for k in range(8))
F_REVERSE = 256  # << direction

# Stand-ins bound where an optional input is absent (module level: uploaded once per worker).
_ZERO_F = np.zeros(4, np.float32)
_ZERO_I = np.zeros(4, np.int32)

_CELLS = {  # op -> (gates, default activations, step shader, storage bindings of the step)
    "RNN": (1, DEFAULT_ACTIVATIONS["RNN"], "compute/rnn_cell.wgsl", 7),
    "GRU": (3, DEFAULT_ACTIVATIONS["GRU"], "compute/rnn_gru.wgsl", 8),
    "LSTM": (4, DEFAULT_ACTIVATIONS["LSTM"], "compute/rnn_lstm.wgsl", 10),
}
_GRU_WG = 64

def step_activations(names, alphas, betas, defaults: list[str],
                     dirs: int) -> list[list[tuple[str, float, float]]] | None:
    """Per-direction (WGSL expression, alpha, beta) lists from the records of activations.py, alpha/beta
    values consumed in order as by the CPU kernel; None where the CPU kernel would refuse."""
    try:
        per_dir = rnn_activations(names, alphas, betas, defaults, dirs)
    except ValueError:
        return None
    funcs = []
    for acts in per_dir:
        funcs.append([])
        for act, attrs in acts:
            expr, (alpha, beta, _) = act.expression(attrs)  # the step kernels bind alpha and beta only
            funcs[-1].append((expr, alpha, beta))
    return funcs


def _is_f32(t: Any) -> bool:
    return t is None or getattr(t, "dtype", None) == np.float32


def _flat(rec, t: Any, name: str):
    """A rank-1 device tensor for ``t`` (host arrays uploaded once), so one pipeline serves every shape;
    None for a tensor split over several bindings."""
    dev = t if hasattr(t, "alloc") else rec.upload(t, name)
    if dev.alloc is None:
        return None
    return rec.view(dev, (dev.size,))


def _run(op: str, rec, layer, X, W, R, B, lens, h0, c0, P, *, activation_alpha, activation_beta, activations,
         clip, direction, hidden_size, layout, variant):
    """Record the projection and the per-step dispatches; returns the requested outputs."""
    gates, defaults, shader, bindings = _CELLS[op]
    if not all(_is_f32(t) for t in (X, W, R, B, h0, c0, P)):
        return NotImplemented
    if lens is not None and getattr(lens, "dtype", None) not in (np.int32, np.int64):
        return NotImplemented
    if bindings > int(rec.ctx.limits.get("max-storage-buffers-per-shader-stage", 8)):
        return NotImplemented
    geo = rnn_geometry(X, W, R, B, lens, h0, c0, P, direction=direction, layout=layout, hidden_size=hidden_size,
                       gates=gates)
    if geo is None:
        return NotImplemented  # shapes the CPU kernel rejects, or no step to run
    layout = int(layout)
    reverse, dirs, gh, state_shape = geo.reverse, len(geo.reverse), geo.gate_rows, geo.state_shape
    seq, batch, inp, hidden = geo.seq, geo.batch, geo.inp, geo.hidden
    funcs = step_activations(activations, activation_alpha, activation_beta, defaults, dirs)
    if funcs is None:
        return NotImplemented

    name = layer.name
    zero = _flat(rec, _ZERO_F, "rnn:zero")
    x = _flat(rec, X, f"{name}:X")
    # Constant weights are transposed on the host; device ones are read as given (W) or transposed by
    # the projection dispatch (R).
    w_const, r_const = isinstance(W, np.ndarray), isinstance(R, np.ndarray)
    if w_const:
        w = _flat(rec, rec.derived(("WT",), (W,), lambda: W.reshape(dirs * gh, inp).T), f"{name}:W^T")
    else:
        w = _flat(rec, W, f"{name}:W")
    if r_const:
        rt = _flat(rec, rec.derived(("RT",), (R,), lambda: R.transpose(0, 2, 1)), f"{name}:R^T")
        r = zero
    else:
        r = _flat(rec, R, f"{name}:R")
    bias = _flat(rec, B, f"{name}:B") if B is not None else zero
    peep = _flat(rec, P, f"{name}:P") if P is not None else zero
    lens_t = _flat(rec, lens if lens is not None else _ZERO_I, f"{name}:sequence_lens")
    h_in = _flat(rec, h0, f"{name}:initial_h") if h0 is not None else zero
    c_in = _flat(rec, c0, f"{name}:initial_c") if c0 is not None else zero
    if any(t is None for t in (x, w, r, rt if r_const else r, bias, peep, lens_t, h_in, c_in)):
        return NotImplemented

    # Outputs in the requested layout; the ones not asked for get scratch stand-ins.
    wanted = [bool(n) for n in layer.outputs] + [False] * 3
    y_shape = (batch, seq, dirs, hidden) if layout else (seq, dirs, batch, hidden)
    y = rec.alloc(y_shape, np.float32) if wanted[0] else rec.alloc((1,), np.float32)
    y_h = rec.alloc(state_shape, np.float32)
    y_c = rec.alloc(state_shape, np.float32) if op == "LSTM" else None

    # (1) XW = X @ W^T + Wb: (seq * batch, dirs * GH), time-major; the same dispatch transposes R into
    # RT (dirs, hidden, GH) for the steps' coalesced weight reads.
    rows, cols = seq * batch, dirs * gh
    xw = rec.alloc((rows * cols,), np.float32)
    r_count = 0 if r_const else r.size
    if not r_const:
        rt = rec.alloc((r.size,), np.float32)
    x_st, x_sb = (inp, seq * inp) if layout else (batch * inp, inp)
    ws_k, ws_n = (cols, 1) if w_const else (1, inp)
    tiles_n = -(-cols // 4)
    tiles = tiles_n * -(-rows // 4)
    rec.dispatch("compute/rnn_proj.wgsl", [x, w, bias, r], [xw, rt if not r_const else rec.alloc((1,))],
                 [rows, cols, inp, batch, x_st, x_sb, int(B is not None), gh, tiles_n, hidden, r_count, ws_k, ws_n],
                 tiles + r_count, workgroup=64, loops=loop_passes(inp) + loop_passes(4) + loop_passes(4, 4))

    # (2) One dispatch per time step for all directions.
    def strides(lay: int) -> list[int]:  # (dir, batch) element strides of a state tensor
        return [hidden, dirs * hidden] if lay else [batch * hidden, hidden]

    # (t, dir, batch) element strides of Y
    y_strides = ([dirs * hidden, hidden, seq * dirs * hidden] if layout
                 else [dirs * batch * hidden, batch * hidden, hidden])
    flags = (F_BIAS * (B is not None) | F_LENS * (lens is not None) | F_Y * wanted[0] | F_CLIP * (clip is not None)
             | F_VARIANT * bool(variant) | F_PEEP * (P is not None))
    for d, rev in enumerate(reverse):
        flags |= F_REVERSE << d if rev else 0
    act_params: list[float] = []
    for d in range(2):
        fs = funcs[min(d, dirs - 1)]
        for k in range(3):
            act_params += list(fs[k][1:]) if k < len(fs) else [0.0, 0.0]
    subs = {}
    for k, letter in enumerate("FGH"):
        for d in range(2):
            fs = funcs[min(d, dirs - 1)]
            subs[f"{letter}{d}"] = fs[k][0] if k < len(fs) else "v"
    clip_bound = float(clip) if clip is not None else 0.0
    y_flat = rec.view(y, (y.size,))
    scratch = rec.alloc((dirs * batch * 2 * hidden,), np.float32) if op == "GRU" else None
    ping: list[tuple[Any, Any]] = []  # intermediate (H, C) states, canonical (dirs, batch, hidden)

    def state(s: int):
        while len(ping) <= s % 2:
            ping.append((rec.alloc((dirs * batch * hidden,), np.float32),
                         rec.alloc((dirs * batch * hidden,), np.float32) if op == "LSTM" else None))
        return ping[s % 2]

    batch_tiles = -(-batch // 4)  # RNN / LSTM invocations take one unit of 4 batch rows
    # Loop passes of a step: RNN / LSTM invocations loop over the hidden state once; GRU workgroups stride over
    # the units twice, looping over the hidden state for each (the second time in one of two loops, the other
    # making a masked pass per unit).
    units = -(-hidden // _GRU_WG)
    step_loops = 2 * loop_passes(units, hidden) + loop_passes(units) if op == "GRU" else loop_passes(hidden)
    for s in range(seq):
        first, last = s == 0, s == seq - 1
        if first:
            hi, ci, in_strides = h_in, c_in, strides(layout) * 2
            step_flags = flags | F_H0_ZERO * (h0 is None) | F_C0_ZERO * (c0 is None)
        else:
            hi, ci = state(s - 1)
            in_strides, step_flags = strides(0) * 2, flags
        if last:
            ho, co = rec.view(y_h, (y_h.size,)), rec.view(y_c, (y_c.size,)) if y_c is not None else None
            out_strides = strides(layout) * 2
        else:
            ho, co = state(s)
            out_strides = strides(0) * 2
        params = [dirs, batch, hidden, seq, s, step_flags, clip_bound, *in_strides, *out_strides, *y_strides,
                  *act_params]
        if op == "RNN":
            rec.dispatch(shader, [xw, rt, bias, lens_t, hi], [y_flat, ho], params, dirs * batch_tiles * hidden,
                         workgroup=64, subs=subs, loops=step_loops)
        elif op == "LSTM":
            rec.dispatch(shader, [xw, rt, bias, peep, lens_t, hi, ci if ci is not None else zero],
                         [y_flat, ho, co], params, dirs * batch_tiles * hidden, workgroup=64, subs=subs,
                         loops=step_loops)
        else:
            rec.dispatch(shader, [xw, rt, bias, lens_t, hi], [y_flat, ho, scratch], params,
                         dirs * batch * _GRU_WG, workgroup=_GRU_WG, subs=subs, loops=step_loops)

    results = [y if wanted[0] else None, y_h if wanted[1] else None, y_c if wanted[2] else None]
    n = max(1, len(layer.outputs))
    return tuple(results[:n]) if n > 1 else results[0]


def register_recurrent(backend: str, run: Any) -> None:
    """Register RNN, GRU and LSTM on ``backend``: the ONNX signatures in one place, each layer handed to the
    backend's ``run(op, rec, layer, X, W, R, B, lens, h0, c0, P, *, ..., variant)`` (variant: GRU's
    linear_before_reset, LSTM's input_forget)."""

    @register("RNN", 1, backend=backend)
    def rnn(rec, layer, X, W, R, B=None, sequence_lens=None, initial_h=None, *, activation_alpha=None,
            activation_beta=None, activations=None, clip=None, direction="forward", hidden_size=None, layout=0,
            **attrs):
        return run("RNN", rec, layer, X, W, R, B, sequence_lens, initial_h, None, None,
                   activation_alpha=activation_alpha, activation_beta=activation_beta, activations=activations,
                   clip=clip, direction=direction, hidden_size=hidden_size, layout=layout, variant=0)

    @register("GRU", 1, backend=backend)
    def gru(rec, layer, X, W, R, B=None, sequence_lens=None, initial_h=None, *, activation_alpha=None,
            activation_beta=None, activations=None, clip=None, direction="forward", hidden_size=None, layout=0,
            linear_before_reset=0, **attrs):
        return run("GRU", rec, layer, X, W, R, B, sequence_lens, initial_h, None, None,
                   activation_alpha=activation_alpha, activation_beta=activation_beta, activations=activations,
                   clip=clip, direction=direction, hidden_size=hidden_size, layout=layout,
                   variant=linear_before_reset)

    @register("LSTM", 1, backend=backend)
    def lstm(rec, layer, X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None, *,
             activation_alpha=None, activation_beta=None, activations=None, clip=None, direction="forward",
             hidden_size=None, input_forget=0, layout=0, **attrs):
        return run("LSTM", rec, layer, X, W, R, B, sequence_lens, initial_h, initial_c, P,
                   activation_alpha=activation_alpha, activation_beta=activation_beta, activations=activations,
                   clip=clip, direction=direction, hidden_size=hidden_size, layout=layout, variant=input_forget)


# RNN: 1 projection + seq_len step dispatches; GRU: one workgroup per (direction, batch) and step; LSTM with
# peepholes and input_forget.
register_recurrent(GPU_COMPUTE, _run)


