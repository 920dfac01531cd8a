// out[i] = {{ACT}} of v = {{EXPR}} of `a` and `b`, with numpy broadcasting through zero strides;
// {{ACT}} is a fused activation of `v` (just `v` when there is none), e.g. a residual Add + Relu.
// Params: 0 n, 1 rank, 2..7 out shape, 8..13 a strides, 14..19 b strides, 20 same-shape flag,
//         21..23 the activation's alpha, beta, gamma, 24 the output element of this dispatch's element 0,
//         25/26 the element of A/B where its binding starts. An output past the binding limit runs in blocks of
//         n elements: Y (and an operand of its size) bound as windows of the block, a broadcast operand whole.
#include "common/params.wgsl"
#include "common/math.wgsl"
#include "common/broadcast.wgsl"

@group(0) @binding(0) var<storage, read> A: array<{{TA}}>;
@group(0) @binding(1) var<storage, read> B: array<{{TB}}>;
@group(0) @binding(2) var<storage, read_write> Y: array<{{TY}}>;
@group(0) @binding(3) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let o = broadcast_offsets(i + pu(24u)) - vec2<u32>(pu(25u), pu(26u));
    let a = A[o.x];
    let b = B[o.y];
    let v = {{EXPR}};
    let alpha = pf(21u);
    let beta = pf(22u);
    let gamma = pf(23u);
    Y[i] = {{ACT}};
}
