// Copies the (optionally subsampled) spatial planes of X (rows = N * C planes of H x W) into an
// rgba32float storage texture, one plane per texture row: texel (x, r) holds output pixels 4x..4x+3
// of plane r, where pixel p = oy * ow + ox reads X[r, oy * sh, ox * sw], zero for p >= P. A matmul
// then reads the planes as a texture operand, which lavapipe fetches far faster than a storage buffer
// (a 1x1 convolution's input). CONTIGUOUS = 1: unit strides and P = H * W a multiple of 4, so each
// texel is one vec4 of the plane.
// Params: 0 texels (rows * width), 1 width (texels per row), 2 P, 3 ow, 4 H * W, 5 W, 6 sh, 7 sw.
#include "common/params.wgsl"

override CONTIGUOUS: u32 = 0u;

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<uniform> params: Params;
@group(0) @binding(2) var T: texture_storage_2d<rgba32float, write>;

fn pixel(base: u32, p: u32) -> f32 {
    if (p >= pu(2u)) { return 0.0; }
    let ow = pu(3u);
    let oy = p / ow;
    return X[base + oy * pu(6u) * pu(5u) + (p - oy * ow) * pu(7u)];
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let width = pu(1u);
    let row = i / width;
    let x = i - row * width;
    var v: vec4<f32>;
    if (CONTIGUOUS == 1u) {
        let o = i * 4u;
        v = vec4<f32>(X[o], X[o + 1u], X[o + 2u], X[o + 3u]);
    } else {
        let base = row * pu(4u);
        let p = x * 4u;
        v = vec4<f32>(pixel(base, p), pixel(base, p + 1u), pixel(base, p + 2u), pixel(base, p + 3u));
    }
    textureStore(T, vec2<i32>(i32(x), i32(row)), v);
}
