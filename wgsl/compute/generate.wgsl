// Y[i] = {{EXPR}} of the flat index i and the parameters: fills (ConstantOfShape, Dropout's
// mask), identity matrices (EyeLike), Range.
// Params: 0 n, then per expression (see tensor_gpu.py).
#include "common/params.wgsl"

@group(0) @binding(0) var<storage, read_write> Y: array<{{T}}>;
@group(0) @binding(1) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    Y[i] = {{EXPR}};
}
