// ScatterND with a reduction (add, mul, max, min), deterministically and without float atomics: one invocation
// per element s of the update slices folds, row after row of the index tuples, update (row, s) into the output
// element its tuple names (common/scatter_fold.wgsl): numpy's ufunc.at order, so the cpu's sums come out bit for
// bit, and invocations write disjoint elements (each its own offset s within every slice). Y starts as a copy
// of the data. Component j of a tuple outside [-dim_j, dim_j) is recorded in fault slot j (common/faults.wgsl)
// and the row is skipped (the run raises). Rows past the device's loop limit are split into dispatches
// [row_first, row_end), each going on from where the previous one stopped.
// Params: 0 S (slice elements), 1 k (tuple length), 2..7 the indexed data dims, 8..13 their strides, 14 first
// fault slot word, 15 row_first, 16 row_end. Override HOW: 0 add, 1 mul, 2 max, 3 min.
#include "common/params.wgsl"
#include "common/math.wgsl"
#include "common/faults.wgsl"
#include "common/subnormal.wgsl"
#include "common/scatter_fold.wgsl"

override HOW: u32 = 0u;

@group(0) @binding(0) var<storage, read> I: array<i32>;
@group(0) @binding(1) var<storage, read> U: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> Y: array<{{T}}>;
@group(0) @binding(3) var<uniform> params: Params;
@group(0) @binding(4) var<storage, read_write> FAULTS: array<atomic<u32>>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let s = flat_index(gid, nwg);
    let slice = pu(0u);
    if (s >= slice) { return; }
    let k = pu(1u);
    for (var row = pu(15u); row < pu(16u); row++) {
        var off = s;
        var bad = false;
        for (var j = 0u; j < k; j++) {
            let v = checked_index(I[row * k + j], pi(2u + j), pu(14u) + 2u * j);
            if (v < 0) { bad = true; } else { off += u32(v) * pu(8u + j); }
        }
        if (!bad) { Y[off] = fold_{{T}}(Y[off], U[row * slice + s], HOW); }
    }
}
