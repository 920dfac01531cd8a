// ArgMax / ArgMin along one axis of an input viewed as (outer, R, inner); one invocation per output.
// Params: 0 n (outer * inner), 1 R, 2 inner, 3 select_last_index. Override OP: 0 argmax, 1 argmin.
// NaN wins as numpy's argmax/argmin: the first NaN (the last with select_last_index); IS_NAN: the element
// type's is_nan (compute/kind/is_nan_<T>.wgsl).
#include "common/params.wgsl"

override OP: u32 = 0u;

@group(0) @binding(0) var<storage, read> X: array<{{T}}>;
@group(0) @binding(1) var<storage, read_write> Y: array<i32>;
@group(0) @binding(2) var<uniform> params: Params;

{{IS_NAN}}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let r = pu(1u);
    let inner = pu(2u);
    let last = pu(3u) != 0u;
    let base = (i / inner) * r * inner + i % inner;
    var best = X[base];
    var idx = 0u;
    for (var k = 1u; k < r; k++) {
        let v = X[base + k * inner];
        var better: bool;
        if (OP == 0u) {
            better = select(v > best, v >= best, last);
        } else {
            better = select(v < best, v <= best, last);
        }
        if (is_nan(best)) {
            better = last && is_nan(v);
        } else if (is_nan(v)) {
            better = true;
        }
        if (better) { best = v; idx = k; }
    }
    Y[i] = i32(idx);
}
