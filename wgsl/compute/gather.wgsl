// Gather along one axis: data viewed as (outer, axis_len, inner), indices flattened to (m,);
// Y (outer, m, inner). Negative indices wrap (CHECK checked_index) or are out of range (checked_nonneg:
// ArrayFeatureExtractor); out-of-range ones are never read: they are recorded in the fault slot
// (common/faults.wgsl) and the element is left unwritten (the run raises).
// Params: 0 n, 1 inner, 2 m, 3 axis_len, 4 fault slot word.
#include "common/params.wgsl"
#include "common/faults.wgsl"

@group(0) @binding(0) var<storage, read> X: array<{{T}}>;
@group(0) @binding(1) var<storage, read> I: array<i32>;
@group(0) @binding(2) var<storage, read_write> Y: array<{{T}}>;
@group(0) @binding(3) var<uniform> params: Params;
@group(0) @binding(4) var<storage, read_write> FAULTS: array<atomic<u32>>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let inner = pu(1u);
    let m = pu(2u);
    let len = pi(3u);
    // (x - q * d instead of %: lavapipe's integer division is not vectorized, halve the count)
    let t = i / inner;
    let k = i - t * inner;
    let o = t / m;
    let ix = {{CHECK}}(I[t - o * m], len, pu(4u));
    if (ix < 0) { return; }
    Y[i] = X[(o * u32(len) + u32(ix)) * inner + k];
}
