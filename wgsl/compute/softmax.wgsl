// Softmax / LogSoftmax / Hardmax along the rows of an input viewed as (outer, R, inner); one
// invocation per row (outer * inner rows), three passes over it: max, sum of exp, write.
// The sum of exp runs in blocks of BLOCK elements, each block's sum added to the total, so its
// rounding error grows as BLOCK + R / BLOCK rather than as R (a row of 2e4: 3.4e-6 -> ~2e-7).
// Params: 0 rows, 1 R, 2 inner. Override MODE: 0 softmax, 1 log-softmax, 2 hardmax.
#include "common/params.wgsl"
#include "common/math.wgsl"

override MODE: u32 = 0u;
// Elements per partial sum of exp (reduce_gpu.SOFTMAX_BLOCK counts the loop passes it makes).
const BLOCK: u32 = 64u;

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
@group(0) @binding(2) var<uniform> params: Params;

fn is_nan(v: f32) -> bool { return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u; }

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let r = pu(1u);
    let inner = pu(2u);
    let base = (i / inner) * r * inner + i % inner;
    var peak = X[base];
    var at = 0u;
    for (var k = 1u; k < r; k++) {
        let v = X[base + k * inner];
        if ((v > peak && !is_nan(peak)) || (is_nan(v) && !is_nan(peak))) { peak = v; at = k; }
    }
    if (MODE == 2u) {
        for (var k = 0u; k < r; k++) { Y[base + k * inner] = select(0.0, 1.0, k == at); }
        return;
    }
    var total = 0.0;
    let blocks = (r + BLOCK - 1u) / BLOCK;
    for (var b = 0u; b < blocks; b++) {
        var part = 0.0;
        let end = min(r, (b + 1u) * BLOCK);
        for (var k = b * BLOCK; k < end; k++) { part += exp_accurate(X[base + k * inner] - peak); }
        total += part;
    }
    if (MODE == 0u) {
        for (var k = 0u; k < r; k++) {
            let p = base + k * inner;
            Y[p] = exp_accurate(X[p] - peak) / total;
        }
    } else {
        let lt = log(total);
        for (var k = 0u; k < r; k++) {
            let p = base + k * inner;
            Y[p] = (X[p] - peak) - lt;
        }
    }
}
