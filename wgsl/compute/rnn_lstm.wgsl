// One time step of the LSTM (gates i, o, f, c) for every (direction, batch, hidden unit):
//   i = f(Xi + H Ri + Rbi + Pi . C), f = f(Xf + H Rf + Rbf + Pf . C) (or 1 - i with input_forget),
//   C' = f . C + i . g(Xc + H Rc + Rbc), o = f(Xo + H Ro + Rbo + Po . C'), H' = o . h(C'),
// written to H-out, C-out and Y[t]. Bindings and params: see rnn_common.wgsl.
#include "common/params.wgsl"
#include "compute/rnn_common.wgsl"

@group(0) @binding(0) var<storage, read> XW: array<f32>;
@group(0) @binding(1) var<storage, read> RT: array<f32>;
@group(0) @binding(2) var<storage, read> Bias: array<f32>;
@group(0) @binding(3) var<storage, read> P: array<f32>;
@group(0) @binding(4) var<storage, read> Lens: array<i32>;
@group(0) @binding(5) var<storage, read> Hin: array<f32>;
@group(0) @binding(6) var<storage, read> Cin: array<f32>;
@group(0) @binding(7) var<storage, read_write> Y: array<f32>;
@group(0) @binding(8) var<storage, read_write> Hout: array<f32>;
@group(0) @binding(9) var<storage, read_write> Cout: array<f32>;
@group(0) @binding(10) var<uniform> params: Params;

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
    let gh = 4u * hidden;
    let hb = d * pu(7u) + b * pu(8u);
    var gi = 0.0;
    var go = 0.0;
    var gf = 0.0;
    var gc = 0.0;
    var h_prev = 0.0;
    if (!has(F_H0_ZERO)) {
        // RT row k holds the four gates' weights of every unit; unit j's are hidden apart.
        var r = d * hidden * gh + j;
        for (var k = 0u; k < hidden; k++) {
            let hk = Hin[hb + k];
            gi += hk * RT[r];
            go += hk * RT[r + hidden];
            gf += hk * RT[r + 2u * hidden];
            gc += hk * RT[r + 3u * hidden];
            r += gh;
        }
        h_prev = Hin[hb + j];
    }
    let xb = (t * batch + b) * dirs * gh + d * gh + j;
    gi += XW[xb];
    go += XW[xb + hidden];
    gf += XW[xb + 2u * hidden];
    gc += XW[xb + 3u * hidden];
    if (has(F_BIAS)) {
        let bb = d * 2u * gh + gh + j;
        gi += Bias[bb];
        go += Bias[bb + hidden];
        gf += Bias[bb + 2u * hidden];
        gc += Bias[bb + 3u * hidden];
    }
    var c_prev = 0.0;
    if (!has(F_C0_ZERO)) {
        c_prev = Cin[d * pu(9u) + b * pu(10u) + j];
    }
    let pb = d * 3u * hidden + j;
    if (has(F_PEEP)) {
        gi += P[pb] * c_prev;
        gf += P[pb + 2u * hidden] * c_prev;
    }
    let ig = act_f(clipped(gi), d);
    var fg = 1.0 - ig;
    if (!has(F_VARIANT)) {
        fg = act_f(clipped(gf), d);
    }
    let c_new = fg * c_prev + ig * act_g(clipped(gc), d);
    if (has(F_PEEP)) {
        go += P[pb + hidden] * c_new;
    }
    let h_new = act_f(clipped(go), d) * act_h(c_new, d);
    let live = !has(F_LENS) || i32(t) < Lens[b];
    Hout[d * pu(11u) + b * pu(12u) + j] = select(h_prev, h_new, live);
    Cout[d * pu(13u) + b * pu(14u) + j] = select(c_prev, c_new, live);
    if (has(F_Y)) {
        Y[t * pu(15u) + d * pu(16u) + b * pu(17u) + j] = select(0.0, h_new, live);
    }
}
