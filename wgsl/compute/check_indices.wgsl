// Bounds checks alone, for a gather whose output is empty (its slices have no elements, so no invocation
// of the gather would read its indices): invocation i checks index word i, component j = i % k of its
// tuple, against dim j, recording a fault in slot j (common/faults.wgsl: CHECK checked_index, or
// checked_nonneg where negative indices are out of range), as the gather would have.
// Params: 0 n (index words), 1 k, 2..7 the dims of the indexed axes, 8 first fault slot word.
#include "common/params.wgsl"
#include "common/faults.wgsl"

@group(0) @binding(0) var<storage, read> I: array<i32>;
@group(0) @binding(1) var<uniform> params: Params;
@group(0) @binding(2) var<storage, read_write> FAULTS: array<atomic<u32>>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let j = i % pu(1u);
    _ = {{CHECK}}(I[i], pi(2u + j), pu(8u) + 2u * j);
}
