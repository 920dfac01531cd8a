// Depthwise 2-D convolution (one filter per channel, any channel multiplier): each invocation computes
// four horizontally adjacent outputs of one row, sharing the filter's loads and the index arithmetic.
// The kernel size, strides and dilations are pipeline constants (KH, KW, SH, SW, DH, DW), and so are the
// channels (M, MULT): the layer's structure, so the tap loops unroll and no integer division by a runtime
// value is left (slow on lavapipe: it runs per lane). The sizes are uniforms, so one pipeline serves every
// input size; the one division by a size, by ceil(ow / 4), goes through udiv (common/udiv.wgsl).
// Params: 0 total (N * M * oh * ceil(ow / 4)), 1 M (output channels), 2 oh, 3 ow, 4 H, 5 W, 6 kh, 7 kw,
// 8 sh, 9 sw, 10 ph, 11 pw, 12 dh, 13 dw, 14 multiplier (output channels per input channel), 15 C,
// 16 flags (1: bias, 2: add the residual that Y holds already (FusedConv)), 17..19 activation
// alpha/beta/gamma, 20 planes (N * M), 21 ow4 = ceil(ow / 4) (groups of four outputs per output row),
// 22 its f32 reciprocal (udiv).
#include "common/params.wgsl"
#include "common/math.wgsl"
#include "common/udiv.wgsl"

override M: u32 = 1u;  // output channels
override MULT: u32 = 1u;  // output channels per input channel
override KH: u32 = 3u;
override KW: u32 = 3u;
override SH: i32 = 1;
override SW: i32 = 1;
override DH: i32 = 1;
override DW: i32 = 1;

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read> WT: array<f32>;
@group(0) @binding(2) var<storage, read> BIAS: array<f32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;
@group(0) @binding(4) var<uniform> params: Params;

// X at column ix of the row starting at `row`, zero outside [0, w).
fn ld(row: u32, ix: i32, w: i32) -> f32 {
    if (ix < 0 || ix >= w) { return 0.0; }
    return X[row + u32(ix)];
}

fn act(v: f32, alpha: f32, beta: f32, gamma: f32) -> f32 { return {{ACT}}; }

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    // The grid is (ceil(oh * ow4 / WG), planes) with N * M planes, those past 65535 folded into z: a
    // plane per workgroup row, one udiv per invocation and divisions by constants otherwise.
    let ow = pu(3u);
    let oh = pu(2u);
    let ow4 = pu(21u);
    let s = gid.x;
    let nm = gid.y + gid.z * nwg.y;
    if (s >= oh * ow4 || nm >= pu(20u)) { return; }
    let oy = udiv(s, ow4, pf(22u));
    let qx = s - oy * ow4;
    let m = nm % M;
    let n = nm / M;
    let c = m / MULT;
    let h = pi(4u);
    let w = pi(5u);
    let base = (n * pu(15u) + c) * u32(h * w);
    let y0 = i32(oy) * SH - pi(10u);
    let x0 = i32(qx * 4u) * SW - pi(11u);
    var acc = vec4<f32>(0.0);
    for (var ky = 0u; ky < KH; ky++) {
        let iy = y0 + i32(ky) * DH;
        if (iy < 0 || iy >= h) { continue; }
        let row = base + u32(iy * w);
        let wrow = (m * KH + ky) * KW;
        for (var kx = 0u; kx < KW; kx++) {
            let ix = x0 + i32(kx) * DW;
            let xv = vec4<f32>(ld(row, ix, w), ld(row, ix + SW, w), ld(row, ix + 2 * SW, w), ld(row, ix + 3 * SW, w));
            acc = fma(xv, vec4<f32>(WT[wrow + kx]), acc);
        }
    }
    let flags = pu(16u);
    if ((flags & 1u) != 0u) { acc += vec4<f32>(BIAS[m]); }
    let alpha = pf(17u);
    let beta = pf(18u);
    let gamma = pf(19u);
    let ox = qx * 4u;
    let yi = (nm * oh + oy) * ow + ox;
    for (var j = 0u; j < 4u; j++) {
        if (ox + j >= ow) { break; }
        var v = acc[j];
        if ((flags & 2u) != 0u) { v += Y[yi + j]; }
        Y[yi + j] = act(v, alpha, beta, gamma);
    }
}
