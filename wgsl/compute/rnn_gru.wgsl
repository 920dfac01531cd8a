// One time step of the GRU (gates z, r, h); one workgroup per (direction, batch) row, since the
// candidate without linear_before_reset needs (r . H) of every hidden unit:
//   phase 1 (each unit j): z = f(Xz + H Rz + Rbz), r = f(Xr + H Rr + Rbr); z and r . H (or r) to Scratch
//   phase 2 (each unit j): h~ = g(Xh + (r . H) Rh + Rbh)   or, with linear_before_reset,
//                          h~ = g(Xh + r . (H Rh + Rbh));  H' = (1 - z) . h~ + z . H
// written to H-out and Y[t]. Scratch is (dirs * batch, 2 * hidden). Params: see rnn_common.wgsl.
#include "common/params.wgsl"
#include "compute/rnn_common.wgsl"

@group(0) @binding(0) var<storage, read> XW: array<f32>;
@group(0) @binding(1) var<storage, read> RT: array<f32>;
@group(0) @binding(2) var<storage, read> Bias: array<f32>;
@group(0) @binding(3) var<storage, read> Lens: array<i32>;
@group(0) @binding(4) var<storage, read> Hin: array<f32>;
@group(0) @binding(5) var<storage, read_write> Y: array<f32>;
@group(0) @binding(6) var<storage, read_write> Hout: array<f32>;
@group(0) @binding(7) var<storage, read_write> Scratch: array<f32>;
@group(0) @binding(8) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let dirs = pu(0u);
    let batch = pu(1u);
    let hidden = pu(2u);
    let row = wid.x + wid.y * nwg.x;  // d * batch + b; uniform across the workgroup
    if (row >= dirs * batch) { return; }
    let d = row / batch;
    let b = row % batch;
    let t = time_of(d);
    let gh = 3u * hidden;
    let hb = d * pu(7u) + b * pu(8u);
    let xb = (t * batch + b) * dirs * gh + d * gh;
    let bb = d * 2u * gh + gh;
    let sb = row * 2u * hidden;
    let h_zero = has(F_H0_ZERO);
    let lbr = has(F_VARIANT);
    for (var j = lid; j < hidden; j += WG) {
        var az = XW[xb + j];
        var ar = XW[xb + hidden + j];
        var h_prev = 0.0;
        if (!h_zero) {
            var r = d * hidden * gh + j;
            for (var k = 0u; k < hidden; k++) {
                let hk = Hin[hb + k];
                az += hk * RT[r];
                ar += hk * RT[r + hidden];
                r += gh;
            }
            h_prev = Hin[hb + j];
        }
        if (has(F_BIAS)) {
            az += Bias[bb + j];
            ar += Bias[bb + hidden + j];
        }
        let r = act_f(clipped(ar), d);
        Scratch[sb + j] = act_f(clipped(az), d);
        Scratch[sb + hidden + j] = select(r * h_prev, r, lbr);
    }
    storageBarrier();
    for (var j = lid; j < hidden; j += WG) {
        let z = Scratch[sb + j];
        let rh = d * hidden * gh + 2u * hidden + j;
        var rbh = 0.0;
        if (has(F_BIAS)) {
            rbh = Bias[bb + 2u * hidden + j];
        }
        var h_prev = 0.0;
        var dot = 0.0;
        if (!h_zero) {
            h_prev = Hin[hb + j];
            if (lbr) {
                for (var k = 0u; k < hidden; k++) {
                    dot += Hin[hb + k] * RT[rh + k * gh];
                }
            } else {
                for (var k = 0u; k < hidden; k++) {
                    dot += Scratch[sb + hidden + k] * RT[rh + k * gh];
                }
            }
        }
        var cand = XW[xb + 2u * hidden + j];
        if (lbr) {
            cand += Scratch[sb + hidden + j] * (dot + rbh);
        } else {
            cand += dot + rbh;
        }
        let h_new = (1.0 - z) * act_g(clipped(cand), d) + z * h_prev;
        let live = !has(F_LENS) || i32(t) < Lens[b];
        Hout[d * pu(11u) + b * pu(12u) + j] = select(h_prev, h_new, live);
        if (has(F_Y)) {
            Y[t * pu(15u) + d * pu(16u) + b * pu(17u) + j] = select(0.0, h_new, live);
        }
    }
}
