// ReverseSequence: along the time axis, the first L[b] steps of batch b reversed, the rest copied.
// Element i sits at time t = (i / time_stride) % T and batch b = (i / batch_stride) % B; it reads time
// L[b] - 1 - t when t < L[b] (the builder checked 0 <= L[b] <= T on the host), else t.
// Params: 0 n, 1 time_stride, 2 T, 3 batch_stride, 4 B.
#include "common/params.wgsl"

@group(0) @binding(0) var<storage, read> X: array<{{T}}>;
@group(0) @binding(1) var<storage, read> L: array<i32>;
@group(0) @binding(2) var<storage, read_write> Y: array<{{T}}>;
@group(0) @binding(3) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let ts = pu(1u);
    let t = (i / ts) % pu(2u);
    let n = u32(L[(i / pu(3u)) % pu(4u)]);
    let src = select(t, n - 1u - t, t < n);
    Y[i] = X[i - t * ts + src * ts];
}
