// ScatterElements with a reduction (add, mul, max, min), deterministically: one invocation per output element
// walks the updates that can name it (those whose coordinates off the axis are its own, p = 0, 1, ... along the
// axis) and folds, in that order, every one whose index names it (common/scatter_fold.wgsl), starting from the
// data element; this is numpy's ufunc.at order, so the cpu's sums come out bit for bit. Float atomics do not
// exist in WGSL, and this needs none. An index outside [-axis_len, axis_len) is recorded in the fault slot
// (common/faults.wgsl; every output element of its column reads it) and never used: the run raises.
// A walk longer than the device's loop limit is split along the axis into dispatches [p_first, p_end), each
// going on from Y (FIRST = 0) where the previous one stopped.
// Params: 0 n (data elements), 1 rank, 2 axis, 3 axis_len, 4..9 data shape, 10..15 indices shape, 16..21
// indices strides, 22 fault slot word, 23 p_first, 24 p_end. Override HOW: 0 add, 1 mul, 2 max, 3 min;
// FIRST: 1 when this dispatch starts from the data.
#include "common/params.wgsl"
#include "common/math.wgsl"
#include "common/faults.wgsl"
#include "common/subnormal.wgsl"
#include "common/scatter_fold.wgsl"

override HOW: u32 = 0u;
override FIRST: u32 = 1u;

@group(0) @binding(0) var<storage, read> X: array<{{T}}>;
@group(0) @binding(1) var<storage, read> I: array<i32>;
@group(0) @binding(2) var<storage, read> U: array<{{T}}>;
@group(0) @binding(3) var<storage, read_write> Y: array<{{T}}>;
@group(0) @binding(4) var<uniform> params: Params;
@group(0) @binding(5) var<storage, read_write> FAULTS: array<atomic<u32>>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let rank = pu(1u);
    let ax = pu(2u);
    var acc = select(Y[i], X[i], FIRST == 1u);
    // The output's coordinate along the axis, and the flat index of update (its coordinates, p = 0).
    var rem = i;
    var own = 0u;
    var first = 0u;
    var inside = true;
    for (var d = 0u; d < rank; d++) {
        let axis = rank - 1u - d;
        let dim = pu(4u + axis);
        let q = rem / dim;
        let c = rem - q * dim;
        rem = q;
        if (axis == ax) {
            own = c;
        } else {
            inside = inside && c < pu(10u + axis);
            first += c * pu(16u + axis);
        }
    }
    if (inside) {
        let step = pu(16u + ax);
        let len = pi(3u);
        for (var p = pu(23u); p < pu(24u); p++) {
            let e = first + p * step;
            let k = checked_index(I[e], len, pu(22u));
            if (k == i32(own)) { acc = fold_{{T}}(acc, U[e], HOW); }
        }
    }
    Y[i] = acc;
}
