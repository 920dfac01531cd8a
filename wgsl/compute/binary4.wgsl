// Same-shape float32 binary op four elements at a time (the element count is a multiple of 4):
// drivers that scalarise storage loads (lavapipe) load a vec4 in one go. Per component:
// out = {{ACT}} of v = {{EXPR}} of `a` and `b`, the same scalar expressions as binary.wgsl.
// Params: 0 n / 4, 1 alpha, 2 beta, 3 gamma (the fused activation's).
#include "common/params.wgsl"
#include "common/math.wgsl"

@group(0) @binding(0) var<storage, read> A: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> B: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> Y: array<vec4<f32>>;
@group(0) @binding(3) var<uniform> params: Params;

fn f(a: f32, b: f32, alpha: f32, beta: f32, gamma: f32) -> f32 {
    let v = {{EXPR}};
    return {{ACT}};
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let p = A[i];
    let q = B[i];
    let alpha = pf(1u);
    let beta = pf(2u);
    let gamma = pf(3u);
    Y[i] = vec4<f32>(f(p.x, q.x, alpha, beta, gamma), f(p.y, q.y, alpha, beta, gamma),
                     f(p.z, q.z, alpha, beta, gamma), f(p.w, q.w, alpha, beta, gamma));
}
