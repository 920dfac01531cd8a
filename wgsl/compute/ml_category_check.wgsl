// OneHotEncoder with zeros=0: an element of X that is none of the categories is refused as the numpy kernel
// refuses it: recorded in the fault buffer (value_fault, the smallest flat index wins) and raised when the run's
// outputs are read. C holds the categories, then one usable flag per category (a repeated or out-of-range
// category never matches). Nothing is written but the fault words.
// Params: 0 n, 1 categories, 2 the fault slot's first word.
#include "common/params.wgsl"
#include "common/faults.wgsl"

@group(0) @binding(0) var<storage, read> X: array<i32>;
@group(0) @binding(1) var<storage, read> C: array<i32>;
@group(0) @binding(2) var<uniform> params: Params;
@group(0) @binding(3) var<storage, read_write> FAULTS: array<atomic<u32>>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let v = X[i];
    let count = pu(1u);
    var known = false;
    for (var k = 0u; k < count; k++) {
        if (C[k] == v && C[count + k] != 0) { known = true; }
    }
    if (!known) { value_fault(i, pu(2u)); }
}
