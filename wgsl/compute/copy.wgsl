// Generic strided copy: Transpose, Slice, Expand, Tile, Concat, Split, Depth/SpaceToDepth.
// Each invocation takes one index of the iteration shape and copies
//   Y[out_base + sum(idx_a * out_stride_a)] = X[in_base + sum((idx_a mod m_a) * in_stride_a)]
// (m_a = 0: no modulo; only with TILE = 1). Input strides are signed (Slice with negative steps).
// Params: 0 n, 1 rank, 2 in_base (i32), 3 out_base, 4..9 shape, 10..15 in strides (i32),
//         16..21 out strides, 22..27 modulo per axis.
// lavapipe has no SIMD integer division and runs both sides of every branch, so each division
// here costs about as much as the copy itself: one per axis but the outermost, and the modulo
// code exists only in the TILE pipeline. Loads and stores at computed addresses are scalarized
// too: IN_LINEAR / OUT_LINEAR = 1 say that side is contiguous (index i + base), as for Concat's
// inputs and the outputs of Transpose, Slice, Expand, Tile and Split.
#include "common/params.wgsl"

override TILE: u32 = 0u;
override IN_LINEAR: u32 = 0u;
override OUT_LINEAR: u32 = 0u;

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
    for (var axis = rank - 1u; axis > 0u; axis--) {
        let dim = pu(4u + axis);
        let q = rem / dim;
        var idx = rem - q * dim;
        rem = q;
        dst += idx * pu(16u + axis);
        if (TILE == 1u) { idx = idx % max(pu(22u + axis), 1u); }
        src += i32(idx) * pi(10u + axis);
    }
    // The outermost axis needs no division: what is left is its index.
    dst += rem * pu(16u);
    if (TILE == 1u) { rem = rem % max(pu(22u), 1u); }
    src += i32(rem) * pi(10u);
    if (IN_LINEAR == 1u && OUT_LINEAR == 1u) {
        Y[i + pu(3u)] = X[i + pu(2u)];
    } else if (IN_LINEAR == 1u) {
        Y[dst] = X[i + pu(2u)];
    } else if (OUT_LINEAR == 1u) {
        Y[i + pu(3u)] = X[u32(src)];
    } else {
        Y[dst] = X[u32(src)];
    }
}
