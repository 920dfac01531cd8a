// Copies the (optionally subsampled) spatial planes of X (rows = N * C planes of H x W) into an
// rgba32float linear storage texture (common/linear_texture.wgsl), one plane per row of width texels: texel
// r * width + x holds output pixels 4x..4x+3 of plane r, where pixel p = oy * ow + ox reads X[r, oy * sh, ox * sw], zero for p >= P. A matmul
// then reads the planes as a texture operand, which lavapipe fetches far faster than a storage buffer
// (the input of a strided 1x1 convolution, or one whose planes are not whole texels; the others reach a
// linear texture by a transfer copy). The grid is (ceil(width / WG), rows) with rows past 65535 folded
// into z, and OW, SH, SW are pipeline constants: no runtime integer division (slow on lavapipe).
// Params: 0 texels (rows * width), 1 width (texels per row), 2 P, 3 ow, 4 H * W, 5 W, 6 sh, 7 sw, 8 rows.
#include "common/params.wgsl"
#include "common/linear_texture.wgsl"

override OW: u32 = 1u;
override SH: u32 = 1u;
override SW: u32 = 1u;

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<uniform> params: Params;
@group(0) @binding(2) var T: texture_storage_2d<rgba32float, write>;

fn pixel(base: u32, p: u32, oy: u32, ox: u32) -> f32 {
    if (p >= pu(2u)) { return 0.0; }
    return X[base + oy * SH * pu(5u) + ox * SW];
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let x = gid.x;
    let row = gid.y + gid.z * nwg.y;
    if (x >= pu(1u) || row >= pu(8u)) { return; }
    let base = row * pu(4u);
    let p = x * 4u;
    var oy = p / OW;
    var ox = p - oy * OW;
    let a = pixel(base, p, oy, ox);
    ox += 1u;
    if (ox == OW) { ox = 0u; oy += 1u; }
    let b = pixel(base, p + 1u, oy, ox);
    ox += 1u;
    if (ox == OW) { ox = 0u; oy += 1u; }
    let d = pixel(base, p + 2u, oy, ox);
    ox += 1u;
    if (ox == OW) { ox = 0u; oy += 1u; }
    let e = pixel(base, p + 3u, oy, ox);
    textureStore(T, linear_texel(row * pu(1u) + x), vec4<f32>(a, b, d, e));
}
