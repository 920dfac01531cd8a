// Columns of a 2-D convolution (one group) written to an rgba32float storage texture for the matmul's
// B operand: row n * Kp + kk holds cols[kk, p] = x[n, c0 + c, oy*sh - ph + ky*dh, ox*sw - pw + kx*dw]
// for kk = (c, ky, kx), p = oy * ow + ox; the texture is linear (common/linear_texture.wgsl) and texel
// row * width + x holds p = 4x..4x+3. Zero outside the input,
// for kk >= K and for p >= P. One invocation writes two texels.
// The grid is (ceil(width / 2 / WG), Kp, N): the row and image come from the workgroup id, and the kernel
// geometry is pipeline constants (KH, KW, SH, SW, DH, DW: the layer's structure), so the row's divisions are
// by constants (integer division by a runtime value is slow on lavapipe: it took ~60% of a strided 3x3
// convolution's time). The output width is a uniform, so one pipeline serves every input size: its one
// division per invocation goes through udiv (common/udiv.wgsl), the eight pixels then step along the row.
// A convolution whose columns would pass the texture's size runs in blocks of output rows and images: the
// texture then holds the block's columns, p counting from output row oy0 (param 18) of image n0 (param 19).
// Params: 0 texels per row (width), 1 width, 2 Kp, 3 K, 4 P (of the block), 5 C, 6 H, 7 W, 8 kh, 9 kw,
// 10 sh, 11 sw, 12 ph, 13 pw, 14 dh, 15 dw, 16 ow, 17 c0, 18 oy0, 19 n0, 20 ow again and 21 its f32
// reciprocal (udiv's divisor words).
#include "common/params.wgsl"
#include "common/linear_texture.wgsl"
#include "common/udiv.wgsl"

override KH: u32 = 1u;
override KW: u32 = 1u;
override SH: i32 = 1;
override SW: i32 = 1;
override DH: i32 = 1;
override DW: i32 = 1;

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<uniform> params: Params;
@group(0) @binding(2) var T: texture_storage_2d<rgba32float, write>;

// The column value at output pixel (oy, ox) of the window row starting at input row `iy0`, column `ix0`.
fn col(base: u32, p: u32, oy: u32, ox: u32, iy0: i32, ix0: i32, h: i32, w: i32) -> f32 {
    if (p >= pu(4u)) { return 0.0; }
    let iy = iy0 + i32(oy) * SH;
    let ix = ix0 + i32(ox) * SW;
    if (iy < 0 || iy >= h || ix < 0 || ix >= w) { return 0.0; }
    return X[base + u32(iy * w + ix)];
}

// The four columns of texel x (pixels 4x..4x+3) from the first pixel's (oy, ox), stepping along the rows of ow;
// (oy, ox) left at the next texel's first pixel.
fn texel(base: u32, x: u32, oy: ptr<function, u32>, ox: ptr<function, u32>, ow: u32, iy0: i32, ix0: i32, h: i32,
         w: i32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        v[j] = col(base, 4u * x + j, *oy, *ox, iy0, ix0, h, w);
        *ox += 1u;
        if (*ox == ow) { *ox = 0u; *oy += 1u; }
    }
    return v;
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    // Two texels per invocation: one division for eight pixels.
    let x = 2u * gid.x;
    let width = pu(1u);
    if (x >= width) { return; }
    let kk = gid.y;
    let n = gid.z;
    let row = n * pu(2u) + kk;
    var v0 = vec4<f32>(0.0);
    var v1 = vec4<f32>(0.0);
    if (kk < pu(3u)) {
        let kx = kk % KW;
        let ky = (kk / KW) % KH;
        let c = kk / (KW * KH);
        let h = pi(6u);
        let w = pi(7u);
        let base = ((n + pu(19u)) * pu(5u) + pu(17u) + c) * u32(h * w);
        let iy0 = i32(ky) * DH - pi(12u);
        let ix0 = i32(kx) * DW - pi(13u);
        // The first pixel's (oy, ox): one division by ow, then steps along the row.
        let ow = pu(20u);
        let row_in_tile = udiv(4u * x, ow, pf(21u));
        var ox = 4u * x - row_in_tile * ow;
        var oy = row_in_tile + pu(18u);
        v0 = texel(base, x, &oy, &ox, ow, iy0, ix0, h, w);
        v1 = texel(base, x + 1u, &oy, &ox, ow, iy0, ix0, h, w);
    }
    textureStore(T, linear_texel(row * pu(0u) + x), v0);
    if (x + 1u < width) { textureStore(T, linear_texel(row * pu(0u) + x + 1u), v1); }
}
