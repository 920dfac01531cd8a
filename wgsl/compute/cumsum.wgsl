// CumSum along the lines of an input viewed as (outer, R, inner); one invocation per line.
// Params: 0 lines (outer * inner), 1 R, 2 inner, 3 exclusive, 4 reverse.
#include "common/params.wgsl"

@group(0) @binding(0) var<storage, read> X: array<{{T}}>;
@group(0) @binding(1) var<storage, read_write> Y: array<{{T}}>;
@group(0) @binding(2) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let r = pu(1u);
    let inner = pu(2u);
    let exclusive = pu(3u) != 0u;
    let reverse = pu(4u) != 0u;
    let base = (i / inner) * r * inner + i % inner;
    var acc = {{T}}(0);
    for (var j = 0u; j < r; j++) {
        let k = select(j, r - 1u - j, reverse);
        let p = base + k * inner;
        let v = X[p];
        if (exclusive) {
            Y[p] = acc;
            acc += v;
        } else {
            acc += v;
            Y[p] = acc;
        }
    }
}
