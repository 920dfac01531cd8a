// Integer reductions (int32 storage): out[o] = sum / prod / max / min of row o's elements
// (wrapping like numpy's int32 arithmetic). Params and OP/PRE as reduce.wgsl (OP 0..3 only).
#include "common/params.wgsl"

override OP: u32 = 0u;
override PRE: u32 = 0u;

@group(0) @binding(0) var<storage, read> X: array<i32>;
@group(0) @binding(1) var<storage, read_write> Y: array<i32>;
@group(0) @binding(2) var<uniform> params: Params;

#include "compute/reduce_rows.wgsl"

fn load(base: u32, k: u32) -> i32 {
    let v = X[base + row_offset(k)];
    if (PRE == 1u) { return abs(v); }
    if (PRE == 2u) { return v * v; }
    return v;
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let chunks = pu(3u);
    let base = row_base(i / chunks);
    let k0 = (i % chunks) * pu(2u);
    let k1 = min(pu(1u), k0 + pu(2u));
    var acc: i32;
    if (OP == 0u) {
        acc = 0;
        for (var k = k0; k < k1; k++) { acc += load(base, k); }
    } else if (OP == 1u) {
        acc = 1;
        for (var k = k0; k < k1; k++) { acc *= load(base, k); }
    } else if (OP == 2u) {
        acc = bitcast<i32>(0x80000000u);
        for (var k = k0; k < k1; k++) { acc = max(acc, load(base, k)); }
    } else {
        acc = 0x7fffffff;
        for (var k = k0; k < k1; k++) { acc = min(acc, load(base, k)); }
    }
    Y[i] = acc;
}
