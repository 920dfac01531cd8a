// Float32 binary op four output elements at a time (the element count is a multiple of 4): drivers
// that scalarise storage loads (lavapipe) load a vec4 in one go. Per component:
// out = {{ACT}} of v = {{EXPR}} of `a` and `b`, the same scalar expressions as binary.wgsl.
// Each operand is read by its loader load_A / load_B of the group index i (elements 4i..4i+3), LOAD_A and
// LOAD_B (compute/gen/binary4_<form>.wgsl, chosen by shader_gen.binary4_subs):
//   full    - the output's shape: the vec4 at i;
//   scalar  - one element, splat;
//   axis    - one non-unit axis whose inner extent (the product of the output dims after it) is a
//             multiple of 4, so the group's four elements share the element (4i / inner) % dim.
// An axis operand's inner extent and dim are pipeline constants (A_INNER, A_DIM, B_INNER, B_DIM):
// dividing by them costs little, where a runtime integer division is slow on lavapipe.
// Params: 0 n / 4, 1 alpha, 2 beta, 3 gamma (the fused activation's), 4 the output group of this dispatch's
// group 0: an output past the binding limit runs in blocks, a full operand and Y bound as windows of the
// block (indexed by i), a broadcast operand bound whole (an axis operand's loader adds params[4] to i).
#include "common/params.wgsl"
#include "common/math.wgsl"

override A_INNER: u32 = 1u;
override A_DIM: u32 = 1u;
override B_INNER: u32 = 1u;
override B_DIM: u32 = 1u;

@group(0) @binding(0) var<storage, read> A: array<{{TA}}>;
@group(0) @binding(1) var<storage, read> B: array<{{TB}}>;
@group(0) @binding(2) var<storage, read_write> Y: array<vec4<f32>>;
@group(0) @binding(3) var<uniform> params: Params;

fn f(a: f32, b: f32, alpha: f32, beta: f32, gamma: f32) -> f32 {
    let v = {{EXPR}};
    return {{ACT}};
}

{{LOAD_A}}
{{LOAD_B}}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let p = load_A(i);
    let q = load_B(i);
    let alpha = pf(1u);
    let beta = pf(2u);
    let gamma = pf(3u);
    Y[i] = vec4<f32>(f(p.x, q.x, alpha, beta, gamma), f(p.y, q.y, alpha, beta, gamma),
                     f(p.z, q.z, alpha, beta, gamma), f(p.w, q.w, alpha, beta, gamma));
}
