// Y[i] = C[i] ? X[i] : Z[i] with numpy broadcasting of all three.
// Params: 0 n, 1 rank, 2..7 out shape, 8..13 c strides, 14..19 x strides, 20..25 z strides.
#include "common/params.wgsl"

@group(0) @binding(0) var<storage, read> C: array<u32>;
@group(0) @binding(1) var<storage, read> X: array<{{T}}>;
@group(0) @binding(2) var<storage, read> Z: array<{{T}}>;
@group(0) @binding(3) var<storage, read_write> Y: array<{{T}}>;
@group(0) @binding(4) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let rank = pu(1u);
    var rem = i;
    var ic = 0u;
    var ix = 0u;
    var iz = 0u;
    for (var d = 0u; d < rank; d++) {
        let axis = rank - 1u - d;
        let idx = rem % pu(2u + axis);
        rem = rem / pu(2u + axis);
        ic += idx * pu(8u + axis);
        ix += idx * pu(14u + axis);
        iz += idx * pu(20u + axis);
    }
    Y[i] = select(Z[iz], X[ix], C[ic] != 0u);
}
