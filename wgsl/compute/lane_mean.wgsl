// Y[r] = the mean of row r of X (rows of `length` floats) summed in ONNX Runtime's order (pool.lane_sums): four
// running lane sums over the row's whole 4-float packets, combined as (s0 + s2) + (s1 + s3), then the leftover
// elements one by one; one invocation per row.
// Params: 0 rows, 1 length.
#include "common/params.wgsl"
#include "common/math.wgsl"

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
@group(0) @binding(2) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = flat_index(gid, nwg);
    if (r >= pu(0u)) { return; }
    let length = pu(1u);
    let base = r * length;
    let packets = length / 4u;
    var lanes = vec4<f32>(0.0);
    for (var k = 0u; k < packets; k++) {
        let o = base + 4u * k;
        lanes = lanes + vec4<f32>(X[o], X[o + 1u], X[o + 2u], X[o + 3u]);
    }
    var total = (lanes.x + lanes.z) + (lanes.y + lanes.w);
    for (var k = 4u * packets; k < length; k++) {
        total = total + X[base + k];
    }
    Y[r] = {{DIV}}(opaque_zero(), total, f32(length));  // correctly rounded (math.wgsl)
}
