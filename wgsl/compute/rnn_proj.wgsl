// XW = X @ W^T (+ Wb): the input projection of every time step and direction of a recurrent op at once.
// Rows m = t * batch + b (time-major whatever X's layout); columns n = d * GH + c, W element (k, n) at
// k * ws_k + n * ws_n (W as given, (dirs * GH, K), or repacked on the host as W^T (K, dirs * GH), which
// neighbouring invocations read contiguously); Wb is the first GH values of each direction's 2 * GH
// bias row. Each invocation computes a 4 x 4 register tile (8 loads per 16 multiply-adds); edges are
// clamped on load and skipped on store.
// The invocations past the tiles transpose R (dirs, GH, hidden) into RT (dirs, hidden, GH), so that in
// the step kernels neighbouring hidden units read neighbouring weights (coalesced on GPUs, vector
// loads on lavapipe) at no extra dispatch.
// Params: 0 M, 1 N, 2 K, 3 batch, 4 X t-stride, 5 X b-stride, 6 has bias, 7 GH, 8 tiles along N,
//         9 hidden, 10 R elements to transpose (0 when RT was repacked on the host), 11 ws_k, 12 ws_n.
#include "common/params.wgsl"

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read> W: array<f32>;
@group(0) @binding(2) var<storage, read> Bias: array<f32>;
@group(0) @binding(3) var<storage, read> R: array<f32>;
@group(0) @binding(4) var<storage, read_write> XW: array<f32>;
@group(0) @binding(5) var<storage, read_write> RT: array<f32>;
@group(0) @binding(6) var<uniform> params: Params;

fn transpose_r(e: u32) {
    // e indexes RT = (dirs, hidden, GH): (d, k, c) reads R[d, c, k].
    let gh = pu(7u);
    let hidden = pu(9u);
    let c = e % gh;
    let k = (e / gh) % hidden;
    let d = e / (gh * hidden);
    RT[e] = R[(d * gh + c) * hidden + k];
}

fn x_row(m: u32) -> u32 {
    let batch = pu(3u);
    return (m / batch) * pu(4u) + (m % batch) * pu(5u);
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    let m_total = pu(0u);
    let n_total = pu(1u);
    let k_total = pu(2u);
    let tiles_n = pu(8u);
    let tiles = tiles_n * ((m_total + 3u) / 4u);
    if (i >= tiles) {
        if (i - tiles < pu(10u)) { transpose_r(i - tiles); }
        return;
    }
    let n0 = (i % tiles_n) * 4u;
    let m0 = (i / tiles_n) * 4u;
    let x0 = x_row(m0);
    let x1 = x_row(min(m0 + 1u, m_total - 1u));
    let x2 = x_row(min(m0 + 2u, m_total - 1u));
    let x3 = x_row(min(m0 + 3u, m_total - 1u));
    let ws_k = pu(11u);
    let ws_n = pu(12u);
    let w0 = n0 * ws_n;
    let w1 = min(n0 + 1u, n_total - 1u) * ws_n;
    let w2 = min(n0 + 2u, n_total - 1u) * ws_n;
    let w3 = min(n0 + 3u, n_total - 1u) * ws_n;
    var a0 = vec4<f32>(0.0);
    var a1 = vec4<f32>(0.0);
    var a2 = vec4<f32>(0.0);
    var a3 = vec4<f32>(0.0);
    for (var k = 0u; k < k_total; k++) {
        let wk = k * ws_k;
        let w = vec4<f32>(W[wk + w0], W[wk + w1], W[wk + w2], W[wk + w3]);
        a0 += X[x0 + k] * w;
        a1 += X[x1 + k] * w;
        a2 += X[x2 + k] * w;
        a3 += X[x3 + k] * w;
    }
    var bias = vec4<f32>(0.0);
    if (pu(6u) != 0u) {
        let gh = pu(7u);
        for (var c = 0u; c < 4u; c++) {
            let n = min(n0 + c, n_total - 1u);
            bias[c] = Bias[(n / gh) * 2u * gh + n % gh];
        }
    }
    let acc = array<vec4<f32>, 4>(a0 + bias, a1 + bias, a2 + bias, a3 + bias);
    for (var r = 0u; r < 4u; r++) {
        let m = m0 + r;
        if (m >= m_total) { break; }
        for (var c = 0u; c < 4u; c++) {
            let n = n0 + c;
            if (n < n_total) { XW[m * n_total + n] = acc[r][c]; }
        }
    }
}
