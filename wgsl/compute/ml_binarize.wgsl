// Binarizer: Y[i] = 1 where X[i] > threshold, else 0; a NaN is refused as the numpy kernel refuses it: recorded in
// the fault buffer (value_fault, the smallest flat index wins) and raised when the run's outputs are read.
// Params: 0 n, 1 threshold (f32), 2 the fault slot's first word.
#include "common/params.wgsl"
#include "common/math.wgsl"
#include "common/faults.wgsl"

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
@group(0) @binding(2) var<uniform> params: Params;
@group(0) @binding(3) var<storage, read_write> FAULTS: array<atomic<u32>>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let v = X[i];
    if (is_nan_f32(v)) {
        value_fault(i, pu(2u));
    }
    Y[i] = select(0.0, 1.0, v > pf(1u));
}
