// y[i] = f(x[i]) for an elementwise function given as the expression {{EXPR}} of `v`.
// Params: 0 n, 1 alpha, 2 beta, 3 gamma.
#include "common/params.wgsl"
#include "common/math.wgsl"

@group(0) @binding(0) var<storage, read> x: array<{{TX}}>;
@group(0) @binding(1) var<storage, read_write> y: array<{{TY}}>;
@group(0) @binding(2) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let v = x[i];
    let alpha = pf(1u);
    let beta = pf(2u);
    let gamma = pf(3u);
    y[i] = {{EXPR}};
}
