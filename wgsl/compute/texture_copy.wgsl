// Copies a constant matrix held as an rgba32float texture (texel (x, y) = columns 4x..4x+3 of row y)
// into a row-major buffer: the reference for how texture-held weights are read.
// Params: 0 rows * cols, 1 cols.
#include "common/params.wgsl"

@group(0) @binding(0) var<storage, read_write> Y: array<f32>;
@group(0) @binding(1) var<uniform> params: Params;
@group(0) @binding(2) var W: texture_2d<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let cols = pu(1u);
    let row = i / cols;
    let col = i - row * cols;
    let texel = textureLoad(W, vec2<i32>(i32(col / 4u), i32(row)), 0);
    Y[i] = texel[col % 4u];
}
