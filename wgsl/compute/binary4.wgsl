// Float32 binary op four output elements at a time (the element count is a multiple of 4): drivers
// that scalarise storage loads (lavapipe) load a vec4 in one go. Per component:
// out = {{ACT}} of v = {{EXPR}} of `a` and `b`, the same scalar expressions as binary.wgsl.
// Each operand is read by its loader (compute/gen/binary4_<form>.wgsl, LOAD_A and LOAD_B, chosen by
// shader_gen.binary4_subs): at_X(i) the operand's state at invocation i's first group, load_X(g, state) its vec4
// for group g (elements 4g..4g+3) and step_X(state) the state s groups on, where
//   full    - the output's shape: the vec4 at g (no state);
//   scalar  - one element, splat (no state);
//   axis    - one non-unit axis whose inner extent (the product of the output dims after it) is a
//             multiple of 4, so the group's four elements share the element (4g / inner) % dim; the state is
//             (g % (inner / 4), that element).
// An axis operand's inner extent and dim are uniform words, not override constants, so one pipeline serves
// every size: at_X divides by them through udiv (common/udiv.wgsl; WGSL's division lavapipe runs per lane),
// step_X adds the host's division of s by them and carries, so that GROUPS groups (an override constant, of the
// operands' forms: 1 without an axis operand) share one invocation's two udivs.
// Params: 0 n / 4, 1 alpha, 2 beta, 3 gamma (the fused activation's), 4 the output group of this dispatch's
// group 0: an output past the binding limit runs in blocks, a full operand and Y bound as windows of the
// block (indexed by g), a broadcast operand bound whole (an axis operand's at_X adds params[4] to i);
// 5 s, the invocations (ceil(n / 4 / GROUPS)): invocation i computes groups i, i + s, ... below n / 4;
// 6..11 A's, 12..17 B's axis words (shader_gen.BINARY4_AXIS_WORDS): inner / 4 and its f32 reciprocal, dim
// and its reciprocal (udiv's divisor words), s % (inner / 4) and (s / (inner / 4)) % dim; 1, 1, 1, 1, 0, 0 for
// an operand that is no axis.
#include "common/params.wgsl"
#include "common/math.wgsl"
#include "common/udiv.wgsl"

override GROUPS: u32 = 1u;

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
    let s = pu(5u);
    if (i >= s) { return; }
    let n = pu(0u);
    let alpha = pf(1u);
    let beta = pf(2u);
    let gamma = pf(3u);
    var sa = at_A(i);
    var sb = at_B(i);
    for (var k = 0u; k < GROUPS; k++) {
        let g = i + k * s;
        // Masked, not a return: a return inside the loop ran the full form 1.2x slower on lavapipe.
        if (g < n) {
            let p = load_A(g, sa);
            let q = load_B(g, sb);
            Y[g] = vec4<f32>(f(p.x, q.x, alpha, beta, gamma), f(p.y, q.y, alpha, beta, gamma),
                             f(p.z, q.z, alpha, beta, gamma), f(p.w, q.w, alpha, beta, gamma));
        }
        sa = step_A(sa);
        sb = step_B(sb);
    }
}
