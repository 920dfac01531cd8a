// y[i] = f(x[i]) on float32 data four elements at a time (the element count is a multiple of 4):
// drivers that scalarise storage loads (lavapipe) load a vec4 in one go. {{EXPR}} is the same scalar
// expression of `v` as in unary.wgsl, applied to each component.
// Params: 0 n / 4, 1 alpha, 2 beta, 3 gamma.
#include "common/params.wgsl"
#include "common/math.wgsl"

@group(0) @binding(0) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> y: array<vec4<f32>>;
@group(0) @binding(2) var<uniform> params: Params;

fn f(v: f32, alpha: f32, beta: f32, gamma: f32) -> f32 {
    return {{EXPR}};
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let q = x[i];
    let alpha = pf(1u);
    let beta = pf(2u);
    let gamma = pf(3u);
    y[i] = vec4<f32>(f(q.x, alpha, beta, gamma), f(q.y, alpha, beta, gamma), f(q.z, alpha, beta, gamma),
                     f(q.w, alpha, beta, gamma));
}
