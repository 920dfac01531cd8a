// ScatterElements with a reduction (add, mul, max, min), deterministically and without float atomics (WGSL has
// none): one invocation per column of the updates (their coordinates off the axis) folds the column's updates
// into Y one after the other, p = 0, 1, ... along the axis (common/scatter_fold.wgsl). That is numpy's ufunc.at
// order, so the cpu's sums come out bit for bit; columns write disjoint elements, so no two invocations touch
// one. Y starts as a copy of the data. An index outside [-axis_len, axis_len) is recorded in the fault slot
// (common/faults.wgsl) and never used: the run raises. A column longer than the device's loop limit is split
// along the axis into dispatches [p_first, p_end), each going on from where the previous one stopped.
// Params: 0 columns, 1 rank, 2 axis, 3 axis_len, 4..9 indices shape, 10..15 indices strides, 16..21 data
// strides, 22 fault slot word, 23 p_first, 24 p_end. Override HOW: 0 add, 1 mul, 2 max, 3 min.
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
    let column = flat_index(gid, nwg);
    if (column >= pu(0u)) { return; }
    let rank = pu(1u);
    let ax = pu(2u);
    // The column's first update (p = 0) and the data element its coordinates off the axis name.
    var rem = column;
    var at_update = 0u;
    var at_data = 0u;
    for (var d = 0u; d < rank; d++) {
        let axis = rank - 1u - d;
        if (axis != ax) {
            let dim = pu(4u + axis);
            let q = rem / dim;
            let c = rem - q * dim;
            rem = q;
            at_update += c * pu(10u + axis);
            at_data += c * pu(16u + axis);
        }
    }
    let update_step = pu(10u + ax);
    let data_step = pu(16u + ax);
    let len = pi(3u);
    for (var p = pu(23u); p < pu(24u); p++) {
        let e = at_update + p * update_step;
        let k = checked_index(I[e], len, pu(22u));
        if (k >= 0) {
            let o = at_data + u32(k) * data_step;
            Y[o] = fold_{{T}}(Y[o], U[e], HOW);
        }
    }
}
