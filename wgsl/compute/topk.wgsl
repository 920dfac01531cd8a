// TopK by rank: element a of a row (data viewed as (outer, len, inner), the row along len) counts the
// elements ahead of it (ahead(w, v, j, a), common/topk_order.wgsl: the CPU kernel's order)
// and, when that rank is below k, writes itself and its index at that position of the output row. Ranks
// within a row are all different, so every output element is written once.
// Params: 0 n (elements of X), 1 inner, 2 len, 3 k.
#include "common/params.wgsl"
#include "common/math.wgsl"
#include "common/topk_order.wgsl"

@group(0) @binding(0) var<storage, read> X: array<{{T}}>;
@group(0) @binding(1) var<storage, read_write> V: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> I: array<i32>;
@group(0) @binding(3) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let inner = pu(1u);
    let len = pu(2u);
    let k = pu(3u);
    let outer = i / (inner * len);
    let rest = i - outer * inner * len;
    let a = rest / inner;
    let col = rest - a * inner;
    let base = outer * inner * len + col;
    let v = X[i];
    var rank = 0u;
    for (var j = 0u; j < len; j++) {
        if (ahead(X[base + j * inner], v, j, a)) { rank++; }
    }
    if (rank < k) {
        let o = (outer * k + rank) * inner + col;
        V[o] = v;
        I[o] = i32(a);
    }
}
