// GatherND / ScatterND over index tuples of length k (after batch_dims leading batch axes).
// Invocation i covers slice element `inner` (of S) of index tuple `pos`; the tuple's batch is
// pos / M (M tuples per batch). Data offset = batch * batch_stride + sum_j idx_j * stride_j + inner.
// GatherND: A data, B indices, {{STORE}} "Y[i] = A[off];"; {{INDEX}} "B[pos * k + j]".
// ScatterND: A indices, B updates, {{STORE}} "Y[off] = B[i];"; {{INDEX}} "A[pos * k + j]".
// Params: 0 n, 1 S, 2 M, 3 batch_stride, 4 k, 5..10 data dims of the indexed axes, 11..16 their strides.
#include "common/params.wgsl"

@group(0) @binding(0) var<storage, read> A: array<{{TA}}>;
@group(0) @binding(1) var<storage, read> B: array<{{TB}}>;
@group(0) @binding(2) var<storage, read_write> Y: array<{{T}}>;
@group(0) @binding(3) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let s = pu(1u);
    let k = pu(4u);
    let pos = i / s;
    let inner = i - pos * s;
    var off = (pos / pu(2u)) * pu(3u) + inner;
    for (var j = 0u; j < k; j++) {
        let len = pi(5u + j);
        var v = {{INDEX}};
        if (v < 0) { v += len; }
        off += u32(clamp(v, 0, len - 1)) * pu(11u + j);
    }
    {{STORE}}
}
