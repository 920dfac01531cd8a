// One time step of the LSTM (gates i, o, f, c) for every (direction, batch, hidden unit):
//   i = f(Xi + H Ri + Rbi + Pi . C), f = f(Xf + H Rf + Rbf + Pf . C) (or 1 - i with input_forget),
//   C' = f . C + i . g(Xc + H Rc + Rbc), o = f(Xo + H Ro + Rbo + Po . C'), H' = o . h(C'),
// written to H-out, C-out and Y[t]. Each invocation takes one unit of up to 4 batch rows, so every
// weight read serves 4 rows. Bindings and params: see rnn_common.wgsl.
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

// The gates (i, o, f, c) of unit j in batch row b, from their recurrent part `rec`, to the new state.
fn finish(d: u32, b: u32, j: u32, t: u32, rec: vec4<f32>) {
    let dirs = pu(0u);
    let batch = pu(1u);
    let hidden = pu(2u);
    let gh = 4u * hidden;
    let xb = (t * batch + b) * dirs * gh + d * gh + j;
    var g = rec + vec4<f32>(XW[xb], XW[xb + hidden], XW[xb + 2u * hidden], XW[xb + 3u * hidden]);
    if (has(F_BIAS)) {
        let bb = d * 2u * gh + gh + j;
        g += vec4<f32>(Bias[bb], Bias[bb + hidden], Bias[bb + 2u * hidden], Bias[bb + 3u * hidden]);
    }
    var h_prev = 0.0;
    if (!has(F_H0_ZERO)) {
        h_prev = Hin[d * pu(7u) + b * pu(8u) + j];
    }
    var c_prev = 0.0;
    if (!has(F_C0_ZERO)) {
        c_prev = Cin[d * pu(9u) + b * pu(10u) + j];
    }
    let pb = d * 3u * hidden + j;
    if (has(F_PEEP)) {
        g.x += P[pb] * c_prev;
        g.z += P[pb + 2u * hidden] * c_prev;
    }
    let ig = act_f(clipped(g.x), d);
    var fg = 1.0 - ig;
    if (!has(F_VARIANT)) {
        fg = act_f(clipped(g.z), d);
    }
    let c_new = fg * c_prev + ig * act_g(clipped(g.w), d);
    var go = g.y;
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
    let gh = 4u * hidden;
    var a0 = vec4<f32>(0.0);
    var a1 = vec4<f32>(0.0);
    var a2 = vec4<f32>(0.0);
    var a3 = vec4<f32>(0.0);
    if (!has(F_H0_ZERO)) {
        // Rows past the batch repeat the last one (computed, never stored).
        let h0 = d * pu(7u) + b0 * pu(8u);
        let h1 = d * pu(7u) + min(b0 + 1u, batch - 1u) * pu(8u);
        let h2 = d * pu(7u) + min(b0 + 2u, batch - 1u) * pu(8u);
        let h3 = d * pu(7u) + min(b0 + 3u, batch - 1u) * pu(8u);
        // RT row k holds the four gates' weights of every unit; unit j's are hidden apart.
        var r = d * hidden * gh + j;
        for (var k = 0u; k < hidden; k++) {
            let w = vec4<f32>(RT[r], RT[r + hidden], RT[r + 2u * hidden], RT[r + 3u * hidden]);
            a0 += Hin[h0 + k] * w;
            a1 += Hin[h1 + k] * w;
            a2 += Hin[h2 + k] * w;
            a3 += Hin[h3 + k] * w;
            r += gh;
        }
    }
    finish(d, b0, j, t, a0);
    if (b0 + 1u < batch) { finish(d, b0 + 1u, j, t, a1); }
    if (b0 + 2u < batch) { finish(d, b0 + 2u, j, t, a2); }
    if (b0 + 3u < batch) { finish(d, b0 + 3u, j, t, a3); }
}
