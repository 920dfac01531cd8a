// Transposed 2-D convolution in gather form: each output pixel sums the input pixels whose scatter
// lands on it: oy = iy*sh - ph + ky*dh, i.e. iy = (oy + ph - ky*dh) / sh when that divides exactly.
// Params: 0 total, 1 M (output channels), 2 oh, 3 ow, 4 H, 5 W, 6 kh, 7 kw, 8 sh, 9 sw, 10 ph, 11 pw,
// 12 dh, 13 dw, 14 C (input channels), 15 channels per group (input), 16 output channels per group,
// 17 has bias, 18..20 activation alpha/beta/gamma, 21 the output element of this dispatch's element 0 (an
// output past the binding limit runs in blocks, Y bound as a window of each). W is (C, M/group, kh, kw).
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
    let o = i + pu(21u);
    let ow = pu(3u);
    let oh = pu(2u);
    let ox = i32(o % ow);
    let oy = i32((o / ow) % oh);
    let nm = o / (ow * oh);
    let m = nm % pu(1u);
    let n = nm / pu(1u);
    let mg = pu(16u);
    let cg = pu(15u);
    let g = m / mg;
    let mo = m - g * mg;
    let h = pi(4u);
    let w = pi(5u);
    let kh = pu(6u);
    let kw = pu(7u);
    let sh = pi(8u);
    let sw = pi(9u);
    var acc = 0.0;
    for (var ky = 0u; ky < kh; ky++) {
        let ty = oy + pi(10u) - i32(ky) * pi(12u);
        if (ty < 0 || srem(ty, sh) != 0 || ty / sh >= h) { continue; }
        let iy = ty / sh;
        for (var kx = 0u; kx < kw; kx++) {
            let tx = ox + pi(11u) - i32(kx) * pi(13u);
            if (tx < 0 || srem(tx, sw) != 0 || tx / sw >= w) { continue; }
            let ix = tx / sw;
            for (var c = g * cg; c < (g + 1u) * cg; c++) {
                let xv = X[((n * pu(14u) + c) * u32(h) + u32(iy)) * u32(w) + u32(ix)];
                acc = fma(xv, WT[((c * mg + mo) * kh + ky) * kw + kx], acc);
            }
        }
    }
    if (pu(17u) != 0u) { acc += BIAS[m]; }
    let alpha = pf(18u);
    let beta = pf(19u);
    let gamma = pf(20u);
    let v = acc;
    Y[i] = {{ACT}};
}
