// Columns of a 2-D convolution (one group) written to an rgba32float storage texture for the matmul's
// B operand: row n * Kp + kk holds cols[kk, p] = x[n, c0 + c, oy*sh - ph + ky*dh, ox*sw - pw + kx*dw]
// for kk = (c, ky, kx), p = oy * ow + ox; texel (x, row) holds p = 4x..4x+3. Zero outside the input,
// for kk >= K and for p >= P. One invocation writes one texel.
// Params: 0 texels (N * Kp * width), 1 width, 2 Kp, 3 K, 4 P, 5 C, 6 H, 7 W, 8 kh, 9 kw, 10 sh, 11 sw,
// 12 ph, 13 pw, 14 dh, 15 dw, 16 ow, 17 c0.
#include "common/params.wgsl"

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<uniform> params: Params;
@group(0) @binding(2) var T: texture_storage_2d<rgba32float, write>;

// The column value at pixel p of the window row starting at input row `iy0`, column `ix0`.
fn col(base: u32, p: u32, iy0: i32, ix0: i32, h: i32, w: i32) -> f32 {
    if (p >= pu(4u)) { return 0.0; }
    let ow = pu(16u);
    let oy = p / ow;
    let iy = iy0 + i32(oy * pu(10u));
    let ix = ix0 + i32((p - oy * ow) * pu(11u));
    if (iy < 0 || iy >= h || ix < 0 || ix >= w) { return 0.0; }
    return X[base + u32(iy * w + ix)];
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let width = pu(1u);
    let row = i / width;
    let x = i - row * width;
    let kp = pu(2u);
    let kk = row % kp;
    let n = row / kp;
    var v = vec4<f32>(0.0);
    if (kk < pu(3u)) {
        let kw = pu(9u);
        let kh = pu(8u);
        let kx = kk % kw;
        let ky = (kk / kw) % kh;
        let c = kk / (kw * kh);
        let h = pi(6u);
        let w = pi(7u);
        let base = (n * pu(5u) + pu(17u) + c) * u32(h * w);
        let iy0 = i32(ky * pu(14u)) - pi(12u);
        let ix0 = i32(kx * pu(15u)) - pi(13u);
        let p = 4u * x;
        v = vec4<f32>(col(base, p, iy0, ix0, h, w), col(base, p + 1u, iy0, ix0, h, w),
                      col(base, p + 2u, iy0, ix0, h, w), col(base, p + 3u, iy0, ix0, h, w));
    }
    textureStore(T, vec2<i32>(i32(x), i32(row)), v);
}
