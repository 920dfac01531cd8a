// Generic strided copy: Transpose, Slice, Expand, Tile, Concat, Split, Depth/SpaceToDepth.
// Each invocation takes one index of the iteration shape and copies
//   Y[out_base + sum(idx_a * out_stride_a)] = X[in_base + sum((idx_a mod m_a) * in_stride_a)]
// (m_a = 0: no modulo; Tile uses it). Input strides are signed (Slice with negative steps).
// Params: 0 n, 1 rank, 2 in_base (i32), 3 out_base, 4..9 shape, 10..15 in strides (i32),
//         16..21 out strides, 22..27 modulo per axis.
#include "common/params.wgsl"

@group(0) @binding(0) var<storage, read> X: array<{{T}}>;
@group(0) @binding(1) var<storage, read_write> Y: array<{{T}}>;
@group(0) @binding(2) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let rank = pu(1u);
    var rem = i;
    var src = pi(2u);
    var dst = pu(3u);
    for (var d = 0u; d < rank; d++) {
        let axis = rank - 1u - d;
        let dim = pu(4u + axis);
        var idx = rem % dim;
        rem = rem / dim;
        dst += idx * pu(16u + axis);
        let m = pu(22u + axis);
        if (m != 0u) { idx = idx % m; }
        src += i32(idx) * pi(10u + axis);
    }
    Y[dst] = X[u32(src)];
}
