"""Recurrent operators: RNN, GRU, LSTM (all directions, layouts, sequence_lens, peepholes, clip).

The input projection ``X @ W^T + Wb`` of every time step is one BLAS call for the whole sequence;
only the recurrent product ``H @ R^T`` runs per step. Variable ``sequence_lens`` are handled with a
per-step batch mask: a finished sequence keeps its state and writes zeros to ``Y``. In the reverse
direction each sequence runs backwards from its own last step, which the mask also gives for free
(steps past a sequence's length come first and leave its state untouched).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from wgsentis.ops.activations import rnn_activations
from wgsentis.ops.registry import register, register_flops

_FLOAT_KINDS = (np.dtype(np.float32), np.dtype(np.float64))

ActivationFn = Callable[[np.ndarray], np.ndarray]

# The spec's default `activations` of one direction of each op (f; f, g; f, g, h).
DEFAULT_ACTIVATIONS: dict[str, list[str]] = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"],
                                             "LSTM": ["Sigmoid", "Tanh", "Tanh"]}


def _activations(names, alphas, betas, defaults: list[str], num_directions: int) -> list[list[ActivationFn]]:
    """Per-direction activation functions (the records of activations.py by their RNN names); alpha/beta
    values are consumed in order by the functions using them."""

    def bind(act, attrs) -> ActivationFn:
        return lambda x: act.kernel(x, **attrs)

    return [[bind(act, attrs) for act, attrs in per_dir]
            for per_dir in rnn_activations(names, alphas, betas, defaults, num_directions)]


class _Setup:
    """Shapes, dtype and per-direction weights shared by the three recurrent ops."""

    def __init__(self, X, W, R, B, sequence_lens, initial_h, direction, layout, hidden_size, num_gates):
        self.out_dtype = X.dtype
        self.dtype = X.dtype if X.dtype in _FLOAT_KINDS else np.dtype(np.float32)
        x = X.astype(self.dtype, copy=False)
        self.layout = int(layout)
        if self.layout:
            x = x.transpose(1, 0, 2)  # (batch, seq, in) -> (seq, batch, in)
        self.x = x
        self.seq_len, self.batch = x.shape[:2]
        direction = direction.lower()
        if direction in ("forward", "foward"):
            self.reverse_flags = [False]
        elif direction == "reverse":
            self.reverse_flags = [True]
        elif direction == "bidirectional":
            self.reverse_flags = [False, True]
        else:
            raise ValueError(f"unknown direction {direction!r}")
        self.num_directions = len(self.reverse_flags)
        self.hidden = int(hidden_size) if hidden_size is not None else R.shape[-1]
        h = self.hidden
        if W.shape[0] != self.num_directions or W.shape[1] != num_gates * h:
            raise ValueError(f"W of shape {list(W.shape)} does not match {self.num_directions} direction(s) "
                             f"of {num_gates} gates x hidden {h}")
        self.W = W.astype(self.dtype, copy=False)
        self.R = R.astype(self.dtype, copy=False)
        if B is None:
            B = np.zeros((self.num_directions, 2 * num_gates * h), dtype=self.dtype)
        self.B = B.astype(self.dtype, copy=False)
        if sequence_lens is None:
            self.lens = None
        else:
            lens = np.asarray(sequence_lens, dtype=np.int64).reshape(-1)
            self.lens = None if np.all(lens == self.seq_len) else lens
        self.h0 = self.initial_state(initial_h)

    def initial_state(self, state):
        """(num_directions, batch, hidden) initial state, zeros if absent; layout 1 is batch-major."""
        if state is None:
            return np.zeros((self.num_directions, self.batch, self.hidden), dtype=self.dtype)
        state = state.astype(self.dtype, copy=False)
        return state.transpose(1, 0, 2) if self.layout else state

    def input_projection(self, d: int) -> np.ndarray:
        """X @ W^T + Wb for all time steps at once: (seq, batch, gates*hidden)."""
        gates_h = self.W.shape[1]
        xw = np.matmul(self.x.reshape(-1, self.x.shape[-1]), self.W[d].T)
        xw += self.B[d, :gates_h]
        return xw.reshape(self.seq_len, self.batch, gates_h)

    def steps(self, d: int):
        """(time index, active-batch mask or None) in processing order for direction ``d``."""
        order = range(self.seq_len - 1, -1, -1) if self.reverse_flags[d] else range(self.seq_len)
        for t in order:
            yield t, (None if self.lens is None else (t < self.lens)[:, None])

    def outputs(self, ctx, ys, finals):
        """Assemble (Y, Y_h[, Y_c]) in the requested layout and output dtype."""
        y = np.stack(ys, axis=1)  # (seq, dirs, batch, hidden)
        results = [y.transpose(2, 0, 1, 3) if self.layout else y]
        for final in finals:
            f = np.stack(final, axis=0)  # (dirs, batch, hidden)
            results.append(f.transpose(1, 0, 2) if self.layout else f)
        results = [r.astype(self.out_dtype, copy=False) for r in results]
        n = max(1, ctx.num_outputs)
        return tuple(results[:n]) if n > 1 else results[0]


def _clipper(clip):
    if clip is None:
        return lambda v: v
    bound = float(clip)
    return lambda v: np.clip(v, -bound, bound)


def _masked(mask, new, old):
    return new if mask is None else np.where(mask, new, old)


# --------------------------------------------------------------------------------------------
# RNN
# --------------------------------------------------------------------------------------------

@register("RNN", 1)
def rnn(ctx, X, W, R, B=None, sequence_lens=None, initial_h=None, *, activation_alpha=None,
        activation_beta=None, activations=None, clip=None, direction="forward", hidden_size=None, layout=0,
        output_sequence=0):
    """Simple RNN: H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb)."""
    s = _Setup(X, W, R, B, sequence_lens, initial_h, direction, layout, hidden_size, 1)
    funcs = _activations(activations, activation_alpha, activation_beta, DEFAULT_ACTIVATIONS["RNN"],
                         s.num_directions)
    clip_fn = _clipper(clip)
    ys, finals = [], []
    for d in range(s.num_directions):
        (f,) = funcs[d]
        xw = s.input_projection(d)
        xw += s.B[d, s.hidden:]
        r_t = s.R[d].T
        h = s.h0[d]
        y = np.zeros((s.seq_len, s.batch, s.hidden), dtype=s.dtype)
        for t, mask in s.steps(d):
            h_new = f(clip_fn(xw[t] + h @ r_t))
            h = _masked(mask, h_new, h)
            y[t] = h_new if mask is None else np.where(mask, h_new, 0)
        ys.append(y)
        finals.append(h)
    return s.outputs(ctx, ys, [finals])


# --------------------------------------------------------------------------------------------
# GRU
# --------------------------------------------------------------------------------------------

@register("GRU", 1)
def gru(ctx, X, W, R, B=None, sequence_lens=None, initial_h=None, *, activation_alpha=None,
        activation_beta=None, activations=None, clip=None, direction="forward", hidden_size=None, layout=0,
        linear_before_reset=0, output_sequence=0):
    """GRU with gates [z, r, h]; linear_before_reset applies r after the recurrent product."""
    s = _Setup(X, W, R, B, sequence_lens, initial_h, direction, layout, hidden_size, 3)
    funcs = _activations(activations, activation_alpha, activation_beta, DEFAULT_ACTIVATIONS["GRU"],
                         s.num_directions)
    clip_fn = _clipper(clip)
    hs = s.hidden
    ys, finals = [], []
    for d in range(s.num_directions):
        f, g = funcs[d]
        xw = s.input_projection(d)
        rb = s.B[d, 3 * hs:]
        xw[:, :, :2 * hs] += rb[:2 * hs]  # z and r recurrent biases fold into the projection
        rb_h = rb[2 * hs:]
        r_zr = s.R[d, :2 * hs].T  # (H, 2H)
        r_h = s.R[d, 2 * hs:].T  # (H, H)
        h = s.h0[d]
        y = np.zeros((s.seq_len, s.batch, hs), dtype=s.dtype)
        for t, mask in s.steps(d):
            x_t = xw[t]
            zr = x_t[:, :2 * hs] + h @ r_zr
            z = f(clip_fn(zr[:, :hs]))
            r = f(clip_fn(zr[:, hs:]))
            if linear_before_reset:
                cand = x_t[:, 2 * hs:] + r * (h @ r_h + rb_h)
            else:
                cand = x_t[:, 2 * hs:] + (r * h) @ r_h + rb_h
            h_tilde = g(clip_fn(cand))
            h_new = (1 - z) * h_tilde + z * h
            h = _masked(mask, h_new, h)
            y[t] = h_new if mask is None else np.where(mask, h_new, 0)
        ys.append(y)
        finals.append(h)
    return s.outputs(ctx, ys, [finals])


# --------------------------------------------------------------------------------------------
# LSTM
# --------------------------------------------------------------------------------------------

@register("LSTM", 1)
def lstm(ctx, X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None, *,
         activation_alpha=None, activation_beta=None, activations=None, clip=None, direction="forward",
         hidden_size=None, input_forget=0, layout=0, output_sequence=0):
    """LSTM with gates [i, o, f, c], optional peepholes P [i, o, f] and coupled input/forget gates."""
    s = _Setup(X, W, R, B, sequence_lens, initial_h, direction, layout, hidden_size, 4)
    funcs = _activations(activations, activation_alpha, activation_beta, DEFAULT_ACTIVATIONS["LSTM"],
                         s.num_directions)
    clip_fn = _clipper(clip)
    hs = s.hidden
    c0 = s.initial_state(initial_c)
    peep = None if P is None else P.astype(s.dtype, copy=False).reshape(s.num_directions, 3, hs)
    ys, finals_h, finals_c = [], [], []
    for d in range(s.num_directions):
        f, g, h_act = funcs[d]
        xw = s.input_projection(d)
        xw += s.B[d, 4 * hs:]
        r_t = s.R[d].T  # (H, 4H)
        h, c = s.h0[d], c0[d]
        p_i, p_o, p_f = (None, None, None) if peep is None else peep[d]
        y = np.zeros((s.seq_len, s.batch, hs), dtype=s.dtype)
        for t, mask in s.steps(d):
            gates = xw[t] + h @ r_t
            gi, go, gf, gc = (gates[:, k * hs:(k + 1) * hs] for k in range(4))
            if p_i is not None:
                gi = gi + p_i * c
                gf = gf + p_f * c
            i = f(clip_fn(gi))
            forget = 1 - i if input_forget else f(clip_fn(gf))
            c_new = forget * c + i * g(clip_fn(gc))
            if p_o is not None:
                go = go + p_o * c_new
            o = f(clip_fn(go))
            h_new = o * h_act(c_new)
            h = _masked(mask, h_new, h)
            c = _masked(mask, c_new, c)
            y[t] = h_new if mask is None else np.where(mask, h_new, 0)
        ys.append(y)
        finals_h.append(h)
        finals_c.append(c)
    return s.outputs(ctx, ys, [finals_h, finals_c])


# --------------------------------------------------------------------------------------------
# FLOPs
# --------------------------------------------------------------------------------------------

def _rnn_flops(in_shapes, num_gates: int, pointwise_per_hidden: int) -> int:
    if len(in_shapes) < 3 or in_shapes[0] is None or in_shapes[2] is None:
        return 0
    x_shape, r_shape = in_shapes[0], in_shapes[2]
    seq_batch = x_shape[0] * x_shape[1]
    dirs, _, hidden = r_shape
    input_size = x_shape[2]
    macs = seq_batch * dirs * num_gates * hidden * (input_size + hidden)
    return 2 * macs + seq_batch * dirs * hidden * pointwise_per_hidden


@register_flops("RNN")
def rnn_flops(layer, in_shapes, out_shapes) -> int:
    """2 FLOPs per multiply-add of X W^T and H R^T (seq * batch * dirs * H * (I + H)), + 3 per hidden unit
    per step for the bias adds and the activation."""
    return _rnn_flops(in_shapes, 1, 3)


@register_flops("GRU")
def gru_flops(layer, in_shapes, out_shapes) -> int:
    """2 FLOPs per multiply-add of the 3 gates' X W^T and H R^T, + 12 per hidden unit per step for the
    biases, gate activations and the state interpolation."""
    return _rnn_flops(in_shapes, 3, 12)


@register_flops("LSTM")
def lstm_flops(layer, in_shapes, out_shapes) -> int:
    """2 FLOPs per multiply-add of the 4 gates' X W^T and H R^T, + 14 per hidden unit per step for the
    biases, gate activations and the cell/hidden updates."""
    return _rnn_flops(in_shapes, 4, 14)
