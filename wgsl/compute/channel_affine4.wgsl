// Y = X * A[c] + B[c] per channel c, four elements at a time: inference BatchNormalization with its
// parameters folded on the host (norm.bn_affine: A = scale * (1 / sqrt(var + eps)), B = bias - mean * A), for planes whose
// size is a multiple of 4. The dispatch is (ceil(inner / 4 / WG), C, N): the channel is the workgroup's
// y, so no element pays an integer division, a square root or a parameter load of its own.
// The output is {{ACT}} of v = the affine value: a fused activation (identity when none).
// Params: 0 inner / 4 (vec4 per plane), 1 C, 2 alpha, 3 beta, 4 gamma (the fused activation's).
#include "common/params.wgsl"
#include "common/math.wgsl"

@group(0) @binding(0) var<storage, read> X: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> A: array<f32>;
@group(0) @binding(2) var<storage, read> B: array<f32>;
@group(0) @binding(3) var<storage, read_write> Y: array<vec4<f32>>;
@group(0) @binding(4) var<uniform> params: Params;

fn act(v: f32, alpha: f32, beta: f32, gamma: f32) -> f32 {
    return {{ACT}};
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let inner4 = pu(0u);
    if (gid.x >= inner4) { return; }
    let c = gid.y;
    let i = (gid.z * pu(1u) + c) * inner4 + gid.x;
    // The product rounded on its own, as the CPU computes it: never fused with the add into an FMA.
    let product = bitcast<vec4<f32>>(bitcast<vec4<u32>>(X[i] * A[c]) ^ vec4<u32>(opaque_zero()));
    let v = product + vec4<f32>(B[c]);
    let alpha = pf(2u);
    let beta = pf(3u);
    let gamma = pf(4u);
    Y[i] = vec4<f32>(act(v.x, alpha, beta, gamma), act(v.y, alpha, beta, gamma), act(v.z, alpha, beta, gamma),
                     act(v.w, alpha, beta, gamma));
}
