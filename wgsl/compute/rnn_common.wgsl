// Shared by the recurrent step kernels (rnn_cell, rnn_gru, rnn_lstm): one dispatch per time step,
// both directions together. Parameter layout:
//   0 dirs, 1 batch, 2 hidden, 3 seq_len, 4 step index, 5 flags (below), 6 clip bound,
//   7/8 H-in strides (dir, batch), 9/10 C-in, 11/12 H-out, 13/14 C-out, 15/16/17 Y strides (t, dir, batch),
//   18 + d * 6 + f * 2: alpha, beta of activation function f (0 f, 1 g, 2 h) of direction d.
// XW is (seq * batch, dirs * GH) time-major; RT (dirs, hidden, GH) is R transposed
// (by rnn_proj.wgsl); Bias (dirs, 2 * GH), Rb its second half.
#include "common/math.wgsl"

const F_BIAS: u32 = 1u;      // Bias is bound (else zero)
const F_LENS: u32 = 2u;      // sequence_lens is bound: steps past a sequence's length keep its state
const F_H0_ZERO: u32 = 4u;   // H-in is absent: zeros (first step without initial_h)
const F_C0_ZERO: u32 = 8u;   // C-in is absent: zeros
const F_Y: u32 = 16u;        // Y is requested
const F_CLIP: u32 = 32u;     // clip gate pre-activations to +-bound
const F_VARIANT: u32 = 64u;  // LSTM input_forget / GRU linear_before_reset
const F_PEEP: u32 = 128u;    // LSTM peepholes P are bound
// bit 8 + d: direction d runs backwards in time

fn has(flag: u32) -> bool { return (pu(5u) & flag) != 0u; }

// The time index direction d processes at this step.
fn time_of(d: u32) -> u32 {
    let s = pu(4u);
    let reverse = ((pu(5u) >> (8u + d)) & 1u) == 1u;
    return select(s, pu(3u) - 1u - s, reverse);
}

fn clipped(v: f32) -> f32 {
    if (has(F_CLIP)) {
        let c = pf(6u);
        return clamp(v, -c, c);
    }
    return v;
}

fn act_f(v: f32, d: u32) -> f32 {
    let alpha = pf(18u + d * 6u);
    let beta = pf(19u + d * 6u);
    if (d == 0u) { return {{F0}}; }
    return {{F1}};
}

fn act_g(v: f32, d: u32) -> f32 {
    let alpha = pf(20u + d * 6u);
    let beta = pf(21u + d * 6u);
    if (d == 0u) { return {{G0}}; }
    return {{G1}};
}

fn act_h(v: f32, d: u32) -> f32 {
    let alpha = pf(22u + d * 6u);
    let beta = pf(23u + d * 6u);
    if (d == 0u) { return {{H0}}; }
    return {{H1}};
}
