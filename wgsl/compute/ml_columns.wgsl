// FeatureVectorizer: one input's first `take` columns copied into columns [offset, offset + width) of every
// row of Y, zeros past them (the input cut or padded to its width); one invocation per element written.
// Params: 0 rows * width, 1 width, 2 take, 3 the input's row length, 4 Y's row length, 5 offset.
#include "common/params.wgsl"

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
@group(0) @binding(2) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let row = i / pu(1u);
    let j = i % pu(1u);
    var v = 0.0;
    if (j < pu(2u)) { v = X[row * pu(3u) + j]; }
    Y[row * pu(4u) + pu(5u) + j] = v;
}
