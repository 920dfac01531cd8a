// Gather along one axis: data viewed as (outer, axis_len, inner), indices flattened to (m,);
// Y (outer, m, inner). Negative indices wrap (CHECK checked_index) or are out of range (checked_nonneg:
// ArrayFeatureExtractor); out-of-range ones are never read: they are recorded in the fault slot
// (common/faults.wgsl) and the element is left unwritten (the run raises).
// Params: 0 n, 1 inner, 2 m, 3 axis_len, 4 fault slot word, 5/6 the first row and the rows of X's block along the
// axis that this dispatch binds (0 and axis_len unless a table past the binding limit is gathered from block by
// block: each dispatch writes the outputs whose index falls in its block; every one checks the indices).
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
    let local = ix - pi(5u);
    if (local < 0 || local >= pi(6u)) { return; }
    Y[i] = X[(o * pu(6u) + u32(local)) * inner + k];
}
