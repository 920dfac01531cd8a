// Normalizer: each row (X's last axis) divided by its max (NaN wins, as numpy's), the sum of its absolute
// values or the square root of the sum of its squares, in float32 (ops/ml.py normalizer); a row whose divisor
// is 0 is kept as it is. One invocation per row.
// Params: 0 rows, 1 row length. Override NORM: 0 max, 1 L1, 2 L2. DIV: the device's exact float division.
#include "common/params.wgsl"
#include "common/math.wgsl"

override NORM: u32 = 0u;

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
@group(0) @binding(2) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = flat_index(gid, nwg);
    if (row >= pu(0u)) { return; }
    let length = pu(1u);
    let at = row * length;
    var div = select(0.0, X[at], NORM == 0u);
    for (var i = 0u; i < length; i++) {
        let v = X[at + i];
        if (NORM == 0u) {
            div = select(div, v, v > div || is_nan_f32(v));
        } else if (NORM == 1u) {
            div += abs(v);
        } else {
            div += v * v;
        }
    }
    if (NORM == 2u) { div = sqrt(div); }
    for (var i = 0u; i < length; i++) {
        let v = X[at + i];
        Y[at + i] = select({{DIV}}(opaque_zero(), v, div), v, div == 0.0);
    }
}
