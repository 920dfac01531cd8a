// One time step of the simple RNN for every (direction, batch, hidden unit):
//   H_t = f(clip(XW_t + H_{t-1} R^T + Rb)), written to H-out and Y[t].
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

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    let dirs = pu(0u);
    let batch = pu(1u);
    let hidden = pu(2u);
    if (i >= dirs * batch * hidden) { return; }
    let j = i % hidden;
    let b = (i / hidden) % batch;
    let d = i / (hidden * batch);
    let t = time_of(d);
    let hb = d * pu(7u) + b * pu(8u);
    var acc = XW[(t * batch + b) * dirs * hidden + d * hidden + j];
    var h_prev = 0.0;
    if (!has(F_H0_ZERO)) {
        let r = d * hidden * hidden + j;
        var dot = 0.0;
        for (var k = 0u; k < hidden; k++) {
            dot += Hin[hb + k] * RT[r + k * hidden];
        }
        acc += dot;
        h_prev = Hin[hb + j];
    }
    if (has(F_BIAS)) {
        acc += Bias[d * 2u * hidden + hidden + j];
    }
    let h_new = act_f(clipped(acc), d);
    let live = !has(F_LENS) || i32(t) < Lens[b];
    Hout[d * pu(11u) + b * pu(12u) + j] = select(h_prev, h_new, live);
    if (has(F_Y)) {
        Y[t * pu(15u) + d * pu(16u) + b * pu(17u) + j] = select(0.0, h_new, live);
    }
}
