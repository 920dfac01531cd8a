// GatherND / ScatterND over index tuples of length k (after batch_dims leading batch axes).
// Invocation i covers slice element `inner` (of S) of index tuple `pos`; the tuple's batch is
// pos / M (M tuples per batch). Data offset = batch * batch_stride + sum_j idx_j * stride_j + inner.
// GatherND: A data, B indices; ScatterND: A indices, B updates. ROLE: which, its index_component and store
// (compute/kind/index_gather.wgsl, index_scatter.wgsl); their override WINDOWED: the data (GatherND) or the
// output (ScatterND) is bound as a window, the block of params 18/19.
// Component j of a tuple outside [-dim_j, dim_j) is recorded in fault slot j (common/faults.wgsl, the
// slots of one layer are consecutive) and nothing is read or written for it (the run raises).
// Params: 0 n, 1 S, 2 M, 3 batch_stride, 4 k, 5..10 data dims of the indexed axes, 11..16 their strides,
//         17 first fault slot word, 18/19 the first and end element of the block of the data (GatherND) or of the
//         output (ScatterND) this dispatch binds, where that tensor passes the binding limit (store masks to it).
#include "common/params.wgsl"
#include "common/faults.wgsl"

@group(0) @binding(0) var<storage, read> A: array<{{TA}}>;
@group(0) @binding(1) var<storage, read> B: array<{{TB}}>;
@group(0) @binding(2) var<storage, read_write> Y: array<{{T}}>;
@group(0) @binding(3) var<uniform> params: Params;
@group(0) @binding(4) var<storage, read_write> FAULTS: array<atomic<u32>>;

{{ROLE}}

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
        let v = checked_index(index_component(pos * k + j), pi(5u + j), pu(17u) + 2u * j);
        if (v < 0) { return; }
        off += u32(v) * pu(11u + j);
    }
    store(i, off);
}
