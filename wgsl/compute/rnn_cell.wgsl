// One time step of the simple RNN for every (direction, batch, hidden unit):
//   H_t = f(clip(XW_t + H_{t-1} R^T + Rb)), written to H-out and Y[t]. Each invocation takes one unit
// of up to 4 batch rows, so every weight read serves 4 rows.
// Bindings and params: see rnn_common.wgsl.
#include "common/params.wgsl"
#include "compute/rnn_common.wgsl"

@group(0) @binding(0) var<storage, read> XW: array<f32>;
@group(0) @binding(1) var<storage, read> RT: array<f32>;
@group(0) @binding(2) var<storage, read> Bias: array<f32>;
@group(0) @binding(3) var<storage, read> Lens: array<i32>;
@group(0) @binding(4) var<storage, read> Hin: array<f32>;
@group(0) @binding(5) var<storage, read_write> Y: array<f32>;
@group(0) @binding(6) var<storage, read_write> Hout: array<f32>;
@group(0) @binding(7) var<uniform> params: Params;

// Unit j of batch row b from its recurrent part `rec` to the new state.
fn finish(d: u32, b: u32, j: u32, t: u32, rec: f32) {
    let dirs = pu(0u);
    let batch = pu(1u);
    let hidden = pu(2u);
    var acc = rec + XW[(t * batch + b) * dirs * hidden + d * hidden + j];
    if (has(F_BIAS)) {
        acc += Bias[d * 2u * hidden + hidden + j];
    }
    var h_prev = 0.0;
    if (!has(F_H0_ZERO)) {
        h_prev = Hin[d * pu(7u) + b * pu(8u) + j];
    }
    let h_new = act_f(clipped(acc), d);
    let live = !has(F_LENS) || i32(t) < Lens[b];
    Hout[d * pu(11u) + b * pu(12u) + j] = select(h_prev, h_new, live);
    if (has(F_Y)) {
        Y[t * pu(15u) + d * pu(16u) + b * pu(17u) + j] = select(0.0, h_new, live);
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    let dirs = pu(0u);
    let batch = pu(1u);
    let hidden = pu(2u);
    let tiles = (batch + 3u) / 4u;
    if (i >= dirs * tiles * hidden) { return; }
    let j = i % hidden;
    let b0 = ((i / hidden) % tiles) * 4u;
    let d = i / (hidden * tiles);
    let t = time_of(d);
    var a = vec4<f32>(0.0);  // rows b0 .. b0 + 3
    if (!has(F_H0_ZERO)) {
        // Rows past the batch repeat the last one (computed, never stored).
        let h0 = d * pu(7u) + b0 * pu(8u);
        let h1 = d * pu(7u) + min(b0 + 1u, batch - 1u) * pu(8u);
        let h2 = d * pu(7u) + min(b0 + 2u, batch - 1u) * pu(8u);
        let h3 = d * pu(7u) + min(b0 + 3u, batch - 1u) * pu(8u);
        var r = d * hidden * hidden + j;
        for (var k = 0u; k < hidden; k++) {
            a += vec4<f32>(Hin[h0 + k], Hin[h1 + k], Hin[h2 + k], Hin[h3 + k]) * RT[r];
            r += hidden;
        }
    }
    finish(d, b0, j, t, a.x);
    if (b0 + 1u < batch) { finish(d, b0 + 1u, j, t, a.y); }
    if (b0 + 2u < batch) { finish(d, b0 + 2u, j, t, a.z); }
    if (b0 + 3u < batch) { finish(d, b0 + 3u, j, t, a.w); }
}
