// Transposed 2-D convolution, the gather after the product: COLS holds, per image, one row per
// (output channel m, tap ky, kx) and one column per input pixel (iy, ix) -- the product of the weight
// (M * kh * kw, C) with the image (C, H * W). Each output pixel sums the columns whose scatter lands
// on it, oy = iy*sh - ph + ky*dh (iy = (oy + ph - ky*dh) / sh where that divides exactly), then adds
// the bias and applies the fused activation.
// The kernel size, strides and output size are pipeline constants (KH, KW, SH, SW, OW, OH): the tap
// loops unroll and every division is by a constant (runtime integer division is slow on lavapipe).
// Where the products of all images would pass the binding limit, they are made and gathered a block of
// images at a time: COLS then holds the block's, and its outputs start at element 18 of Y.
// Params: 0 total (of the block), 1 M, 2 oh, 3 ow, 4 H, 5 W, 6 kh, 7 kw, 8 sh, 9 sw, 10 ph, 11 pw, 12 dh,
// 13 dw, 14 has bias, 15..17 activation alpha/beta/gamma, 18 the block's first output.
#include "common/params.wgsl"
#include "common/math.wgsl"

override KH: u32 = 1u;
override KW: u32 = 1u;
override SH: i32 = 1;
override SW: i32 = 1;
override OW: u32 = 1u;
override OH: u32 = 1u;

@group(0) @binding(0) var<storage, read> COLS: array<f32>;
@group(0) @binding(1) var<storage, read> BIAS: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let ow = OW;
    let oh = OH;
    let ox = i32(i % ow);
    let oy = i32((i / ow) % oh);
    let nm = i / (ow * oh);  // n * M + m
    let h = pi(4u);
    let w = pi(5u);
    let kh = KH;
    let kw = KW;
    let sh = SH;
    let sw = SW;
    let plane = u32(h * w);
    var acc = 0.0;
    for (var ky = 0u; ky < kh; ky++) {
        let ty = oy + pi(10u) - i32(ky) * pi(12u);
        if (ty < 0 || srem(ty, sh) != 0 || ty / sh >= h) { continue; }
        let iy = ty / sh;
        for (var kx = 0u; kx < kw; kx++) {
            let tx = ox + pi(11u) - i32(kx) * pi(13u);
            if (tx < 0 || srem(tx, sw) != 0 || tx / sw >= w) { continue; }
            let ix = tx / sw;
            acc += COLS[((nm * kh + ky) * kw + kx) * plane + u32(iy * w + ix)];
        }
    }
    if (pu(14u) != 0u) { acc += BIAS[nm % pu(1u)]; }
    let alpha = pf(15u);
    let beta = pf(16u);
    let gamma = pf(17u);
    let v = acc;
    Y[i + pu(18u)] = {{ACT}};
}
