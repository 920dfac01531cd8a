// GatherElements: A data, B indices, {{STORE}} "Y[i] = A[off];" : Y[idx] = A[idx with idx[axis] := B[idx]].
// ScatterElements: A indices, B updates, {{STORE}} "Y[off] = B[i];" : Y[idx with idx[axis] := A[idx]] = B[idx]
// (Y already holds a copy of the data). The invocation index runs over the indices' shape; data
// strides address the data. {{INDEX}} reads the index tensor at i.
// Params: 0 n, 1 rank, 2 axis, 3 axis_len, 4..9 indices shape, 10..15 data strides.
#include "common/params.wgsl"

@group(0) @binding(0) var<storage, read> A: array<{{TA}}>;
@group(0) @binding(1) var<storage, read> B: array<{{TB}}>;
@group(0) @binding(2) var<storage, read_write> Y: array<{{T}}>;
@group(0) @binding(3) var<uniform> params: Params;

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
            var v = {{INDEX}};
            if (v < 0) { v += len; }
            c = u32(clamp(v, 0, len - 1));
        }
        off += c * pu(10u + axis);
    }
    {{STORE}}
}
