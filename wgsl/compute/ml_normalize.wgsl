// Normalizer: each row (X's last axis) divided by its max, the sum of its absolute values or the square root
// of the sum of its squares, in float32 as ONNX Runtime computes it (ops/ml_transforms.py normalizer): the max
// starts at float32's lowest value and skips NaN (NaN is never greater); the sums add one element after the
// other; L2 writes sqrt(x * x / sum), negated where x < 0 (a row whose squares overflow: NaN where x * x is
// infinite). Squares go through opaque() (math.wgsl), so no driver fuses them into an fma; NaN and zero are
// tested on the bits (math.wgsl is_nan_f32: lavapipe folds x != x to false). A row whose divisor
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
    var div = select(0.0, -3.40282347e+38, NORM == 0u);
    for (var i = 0u; i < length; i++) {
        let v = X[at + i];
        if (NORM == 0u) {
            if (!is_nan_f32(v) && v > div) { div = v; }
        } else if (NORM == 1u) {
            div += abs(v);
        } else {
            div += opaque(v * v, opaque_zero());
        }
    }
    for (var i = 0u; i < length; i++) {
        let v = X[at + i];
        var y = v;
        if ((bitcast<u32>(div) & 0x7fffffffu) != 0u) {  // a bit test: drivers may fold a NaN compare
            if (NORM == 2u) {
                let root = sqrt({{DIV}}(opaque_zero(), opaque(v * v, opaque_zero()), div));
                y = select(root, -root, v < 0.0);
            } else {
                y = {{DIV}}(opaque_zero(), v, div);
            }
        }
        Y[at + i] = y;
    }
}
