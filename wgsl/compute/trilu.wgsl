// Trilu: keep X's upper (col - row >= k) or lower (col - row <= k) triangle of each matrix, zero elsewhere.
// Params: 0 n, 1 rows, 2 cols, 3 k (i32), 4 upper.
#include "common/params.wgsl"

@group(0) @binding(0) var<storage, read> X: array<{{T}}>;
@group(0) @binding(1) var<storage, read_write> Y: array<{{T}}>;
@group(0) @binding(2) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let cols = pu(2u);
    let col = i32(i % cols);
    let row = i32((i / cols) % pu(1u));
    let diff = col - row;
    let keep = select(diff <= pi(3u), diff >= pi(3u), pu(4u) != 0u);
    Y[i] = select(bitcast<{{T}}>(0u), X[i], keep);
}
