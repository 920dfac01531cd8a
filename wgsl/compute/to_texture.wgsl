// Copies the (optionally subsampled) spatial planes of X (rows = N * C planes of H x W) into an
// rgba32float linear storage texture (common/linear_texture.wgsl), one plane per row of width texels: texel
// r * width + x holds output pixels 4x..4x+3 of plane r, where pixel p = oy * ow + ox reads X[r, oy * sh, ox * sw], zero for p >= P. A matmul
// then reads the planes as a texture operand, which lavapipe fetches far faster than a storage buffer
// (the input of a strided 1x1 convolution, or one whose planes are not whole texels; the others reach a
// linear texture by a transfer copy). Each invocation writes two texels; the grid is (ceil(width / 2 / WG),
// rows) with rows past 65535 folded into z. SH, SW (the layer's strides) are pipeline constants; ow is a
// uniform, so one pipeline serves every input size, and its one division per invocation goes through udiv
// (common/udiv.wgsl), not WGSL's integer division (lavapipe runs it per lane), the eight pixels then
// stepping along the row.
// Params: 0 texels (rows * width), 1 width (texels per row), 2 P, 3 ow, 4 H * W, 5 W, 6 sh, 7 sw, 8 rows,
// 9 ow again and 10 its f32 reciprocal (udiv's divisor words).
#include "common/params.wgsl"
#include "common/linear_texture.wgsl"
#include "common/udiv.wgsl"

override SH: u32 = 1u;
override SW: u32 = 1u;

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<uniform> params: Params;
@group(0) @binding(2) var T: texture_storage_2d<rgba32float, write>;

// The pixel p (oy, ox) of the plane at `base`, zero for p >= P.
fn pixel(base: u32, p: u32, oy: u32, ox: u32) -> f32 {
    if (p >= pu(2u)) { return 0.0; }
    return X[base + oy * SH * pu(5u) + ox * SW];
}

// The four pixels of texel x of the plane at `base` from the first's (oy, ox), stepping along the rows of ow;
// (oy, ox) left at the next texel's first pixel.
fn texel(base: u32, x: u32, oy: ptr<function, u32>, ox: ptr<function, u32>, ow: u32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
        v[j] = pixel(base, 4u * x + j, *oy, *ox);
        *ox += 1u;
        if (*ox == ow) { *ox = 0u; *oy += 1u; }
    }
    return v;
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    // Two texels per invocation: one division for eight pixels.
    let x = 2u * gid.x;
    let row = gid.y + gid.z * nwg.y;
    let width = pu(1u);
    if (x >= width || row >= pu(8u)) { return; }
    let base = row * pu(4u);
    let ow = pu(9u);
    var oy = udiv(4u * x, ow, pf(10u));
    var ox = 4u * x - oy * ow;
    textureStore(T, linear_texel(row * width + x), texel(base, x, &oy, &ox, ow));
    if (x + 1u < width) {
        textureStore(T, linear_texel(row * width + x + 1u), texel(base, x + 1u, &oy, &ox, ow));
    }
}
