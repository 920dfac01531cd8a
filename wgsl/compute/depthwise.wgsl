// Depthwise 2-D convolution (one filter per channel, any channel multiplier): one output per invocation.
// Params: 0 total, 1 M (output channels), 2 oh, 3 ow, 4 H, 5 W, 6 kh, 7 kw, 8 sh, 9 sw, 10 ph, 11 pw,
// 12 dh, 13 dw, 14 multiplier (output channels per input channel), 15 C, 16 flags (1: bias, 2: add
// the residual that Y holds already (FusedConv)),
// 17..19 activation alpha/beta/gamma.
#include "common/params.wgsl"
#include "common/math.wgsl"

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read> WT: array<f32>;
@group(0) @binding(2) var<storage, read> BIAS: array<f32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;
@group(0) @binding(4) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let ow = pu(3u);
    let oh = pu(2u);
    let ox = i % ow;
    let oy = (i / ow) % oh;
    let nm = i / (ow * oh);
    let m = nm % pu(1u);
    let n = nm / pu(1u);
    let c = m / pu(14u);
    let h = pi(4u);
    let w = pi(5u);
    let kh = pu(6u);
    let kw = pu(7u);
    let base = (n * pu(15u) + c) * u32(h * w);
    let y0 = i32(oy * pu(8u)) - pi(10u);
    let x0 = i32(ox * pu(9u)) - pi(11u);
    let dh = pi(12u);
    let dw = pi(13u);
    var acc = 0.0;
    for (var ky = 0u; ky < kh; ky++) {
        let iy = y0 + i32(ky) * dh;
        if (iy < 0 || iy >= h) { continue; }
        let row = base + u32(iy * w);
        let wrow = (m * kh + ky) * kw;
        for (var kx = 0u; kx < kw; kx++) {
            let ix = x0 + i32(kx) * dw;
            if (ix >= 0 && ix < w) { acc = fma(X[row + u32(ix)], WT[wrow + kx], acc); }
        }
    }
    if ((pu(16u) & 1u) != 0u) { acc += BIAS[m]; }
    if ((pu(16u) & 2u) != 0u) { acc += Y[i]; }
    let alpha = pf(17u);
    let beta = pf(18u);
    let gamma = pf(19u);
    let v = acc;
    Y[i] = {{ACT}};
}
