// GatherElements: A data, B indices: Y[idx] = A[idx with idx[axis] := B[idx]].
// ScatterElements: A indices, B updates: Y[idx with idx[axis] := A[idx]] = B[idx]
// (Y already holds a copy of the data). The invocation index runs over the indices' shape; data
// strides address the data. ROLE: which, its index_component (the index tensor at i) and store
// (compute/kind/index_gather.wgsl, index_scatter.wgsl; never WINDOWED here).
// An index outside [-axis_len, axis_len) is recorded in the fault slot (common/faults.wgsl) and
// nothing is read or written for it (the run raises).
// Params: 0 n, 1 rank, 2 axis, 3 axis_len, 4..9 indices shape, 10..15 data strides, 16 fault slot word.
#include "common/params.wgsl"
#include "common/faults.wgsl"

@group(0) @binding(0) var<storage, read> A: array<{{TA}}>;
@group(0) @binding(1) var<storage, read> B: array<{{TB}}>;
@group(0) @binding(2) var<storage, read_write> Y: array<{{T}}>;
@group(0) @binding(3) var<uniform> params: Params;
@group(0) @binding(4) var<storage, read_write> FAULTS: array<atomic<u32>>;

{{ROLE}}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let rank = pu(1u);
    let ax = pu(2u);
    let len = pi(3u);
    var rem = i;
    var off = 0u;
    for (var d = 0u; d < rank; d++) {
        let axis = rank - 1u - d;
        let dim = pu(4u + axis);
        let q = rem / dim;
        var c = rem - q * dim;
        rem = q;
        if (axis == ax) {
            let v = checked_index(index_component(i), len, pu(16u));
            if (v < 0) { return; }
            c = u32(v);
        }
        off += c * pu(10u + axis);
    }
    store(i, off);
}
