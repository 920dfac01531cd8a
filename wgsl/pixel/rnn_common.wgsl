// Shared by the gpu-pixel recurrent step programs (rnn_cell, rnn_gru, rnn_gru_reset, rnn_lstm; ops/rnn_pixel.py):
// one draw per time step (two for GRU without linear_before_reset) renders the new state of every
// (direction, batch row, block of four hidden units), both directions together. States are (dirs, batch, hidden)
// blocked on hidden; the first step reads initial_h / initial_c through the strides of their own layout.
// XW (rows, dirs * gates * Hp) is the input projection of every time step with its biases folded in, each gate's
// columns padded to Hp (hidden rounded up to four), so a gate's block of four units is one texel. R4
// (dirs, gates, hidden_j, hidden_k) is R blocked on hidden_j: texel ((d * G + g) * JB + jb) * hidden + k holds
// R[d, g * hidden + 4 jb .. + 3, k], so four consecutive texels and one texel of H make a mat4x4 * vec4 product.
// Params: 0 texels of the state, 1 log2 of its width, 2 dirs, 3 batch, 4 hidden, 5 JB (hidden blocks), 6 seq_len,
// 7 step index, 8 flags (below), 9 clip bound, 10-17 log2 of the widths of XW, R4, H-in, C-in, lens, P, Rb_h and
// R.H (GRU), 18/19 H-in texel strides (dir, batch), 20/21 C-in's, 22/23 XW row strides (time, batch), 24 XW
// texels per row, 25 gates, 26 + d * 6 + f * 2: alpha, beta of activation f (0 f, 1 g, 2 h) of direction d.
#include "common/params.wgsl"
#include "common/math.wgsl"
#include "pixel/fullscreen.wgsl"

const F_LENS: u32 = 1u;      // sequence_lens is bound: steps past a sequence's length keep its state
const F_H0_ZERO: u32 = 2u;   // H-in is absent: zeros (first step without initial_h)
const F_C0_ZERO: u32 = 4u;   // C-in is absent: zeros
const F_CLIP: u32 = 8u;      // clip gate pre-activations to +-bound
const F_VARIANT: u32 = 16u;  // LSTM input_forget
const F_PEEP: u32 = 32u;     // LSTM peepholes P are bound
const F_BIAS: u32 = 64u;     // GRU linear_before_reset: Rb_h is bound
// bit 8 + d: direction d runs backwards in time

fn has(flag: u32) -> bool { return (pu(8u) & flag) != 0u; }

fn at(t: u32, shift: u32) -> vec2<i32> {
    return vec2<i32>(i32(t & ((1u << shift) - 1u)), i32(t >> shift));
}

// The time index direction d processes at this step.
fn time_of(d: u32) -> u32 {
    let s = pu(7u);
    let reverse = ((pu(8u) >> (8u + d)) & 1u) == 1u;
    return select(s, pu(6u) - 1u - s, reverse);
}

// Where the state texel of this fragment lies: (direction, batch row, hidden block); false past the state's end.
struct Unit { d: u32, b: u32, jb: u32, inside: bool }

fn unit_of(position: vec4<f32>) -> Unit {
    let texel = vec2<u32>(position.xy);
    let t = (texel.y << pu(1u)) + texel.x;
    let jbs = pu(5u);
    let r = t / jbs;
    return Unit(r / pu(3u), r % pu(3u), t % jbs, t < pu(0u));
}

// Lanes past the hidden size: 0 (the padding lanes of the state stay zero).
fn lanes_in(jb: u32) -> vec4<bool> {
    return vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(pu(4u) - 4u * jb);
}

// Whether batch row b's sequence is still running at `time` (sequence_lens).
fn live(Lens: texture_2d<i32>, b: u32, time: u32) -> bool {
    if (!has(F_LENS)) { return true; }
    return i32(time) < textureLoad(Lens, at(b / 4u, pu(14u)), 0)[b % 4u];
}

// The XW texel of gate g of the fragment's units at `time`: the projection with its folded biases.
fn projected(XW: texture_2d<f32>, u: Unit, time: u32, g: u32) -> vec4<f32> {
    let row = time * pu(22u) + u.b * pu(23u);
    return textureLoad(XW, at(row * pu(24u) + (u.d * pu(25u) + g) * pu(5u) + u.jb, pu(10u)), 0);
}

// Gate g's recurrent product of the fragment's four units, H R_g^T, with H's row of blocks at texel `h0` of H
// (width shift `hs`).
fn product(R: texture_2d<f32>, H: texture_2d<f32>, hs: u32, h0: u32, u: Unit, g: u32) -> vec4<f32> {
    let hidden = pu(4u);
    let rs = pu(11u);
    var r = ((u.d * pu(25u) + g) * pu(5u) + u.jb) * hidden;
    var acc = vec4<f32>(0.0);
    let full = hidden / 4u;
    for (var kb = 0u; kb < full; kb++) {
        let m = mat4x4<f32>(textureLoad(R, at(r, rs), 0), textureLoad(R, at(r + 1u, rs), 0),
                            textureLoad(R, at(r + 2u, rs), 0), textureLoad(R, at(r + 3u, rs), 0));
        acc += m * textureLoad(H, at(h0 + kb, hs), 0);
        r += 4u;
    }
    let rem = hidden % 4u;
    if (rem != 0u) {
        // The last, partial block: R rows past hidden belong to the next units (H's lanes there are zero, but
        // they are not read as numbers).
        let zero = vec4<f32>(0.0);
        let m = mat4x4<f32>(textureLoad(R, at(r, rs), 0), select(zero, textureLoad(R, at(r + 1u, rs), 0), rem > 1u),
                            select(zero, textureLoad(R, at(r + 2u, rs), 0), rem > 2u), zero);
        acc += m * textureLoad(H, at(h0 + full, hs), 0);
    }
    return acc;
}

fn clipped(v: vec4<f32>) -> vec4<f32> {
    if (has(F_CLIP)) {
        let c = pf(9u);
        return clamp(v, vec4<f32>(-c), vec4<f32>(c));
    }
    return v;
}

fn act_f1(v: f32, d: u32) -> f32 {
    let alpha = pf(26u + d * 6u);
    let beta = pf(27u + d * 6u);
    if (d == 0u) { return {{F0}}; }
    return {{F1}};
}

fn act_g1(v: f32, d: u32) -> f32 {
    let alpha = pf(28u + d * 6u);
    let beta = pf(29u + d * 6u);
    if (d == 0u) { return {{G0}}; }
    return {{G1}};
}

fn act_h1(v: f32, d: u32) -> f32 {
    let alpha = pf(30u + d * 6u);
    let beta = pf(31u + d * 6u);
    if (d == 0u) { return {{H0}}; }
    return {{H1}};
}

fn act_f(v: vec4<f32>, d: u32) -> vec4<f32> {
    return vec4<f32>(act_f1(v.x, d), act_f1(v.y, d), act_f1(v.z, d), act_f1(v.w, d));
}

fn act_g(v: vec4<f32>, d: u32) -> vec4<f32> {
    return vec4<f32>(act_g1(v.x, d), act_g1(v.y, d), act_g1(v.z, d), act_g1(v.w, d));
}

fn act_h(v: vec4<f32>, d: u32) -> vec4<f32> {
    return vec4<f32>(act_h1(v.x, d), act_h1(v.y, d), act_h1(v.z, d), act_h1(v.w, d));
}
