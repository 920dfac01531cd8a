// The outputs and windows of one pool invocation, shared by pool.wgsl and maxpool_indices.wgsl (their
// params layout: 1..3 input spatial, 4..6 output spatial, 10..12 strides, 13..15 dilations, 16..18
// begin pads, 29 planes, then udiv's divisor words (a divisor and its f32 reciprocal): 30, 31 the invocations
// per output row (ceil(od2 / ROW_OUTPUTS)), 32, 33 od1; the grid's x runs over a plane's invocations, (y, z)
// over the N * C planes).
// The window's size per dim (params 7..9 hold the same) are pipeline constants, the layer's geometry, so that
// the compiler unrolls the window loops (a 3x3 max pool ran ~4x slower with uniform-bound loops on lavapipe).
// The output sizes are uniform words, so one pipeline serves every input size: the output position divides by
// them through udiv (common/udiv.wgsl), not WGSL's division, which lavapipe runs per lane, and an invocation
// computes ROW_OUTPUTS consecutive outputs of a row (an override constant of the window: 8, or 1 where eight
// windows' loops would pass the device's loop limit; pool_gpu.row_outputs), which share its two udivs.
#include "common/udiv.wgsl"

override KD0: i32 = 1;
override KD1: i32 = 1;
override KD2: i32 = 1;

override ROW_OUTPUTS: u32 = 8u;

struct PoolSite {
    ok: bool,  // false past the plane's last row or the last plane
    i: u32,  // flat index of the first output
    base: u32,  // the plane's first input element
    start: vec3<i32>,  // the first output's window's first input position (may be in the padding)
    dil: vec3<i32>,
    in_d: vec3<i32>,
    outputs: u32,  // of the ROW_OUTPUTS, those inside the row: output k (< outputs) is i + k, its window
    step: i32,  // starts step * k further along the row
}

fn pool_site(gid: vec3<u32>, nwg: vec3<u32>) -> PoolSite {
    var s: PoolSite;
    // No division for the plane: it comes from the grid's y and z.
    let plane = gid.y + gid.z * nwg.y;
    let od1 = pu(32u);
    let od2 = pu(6u);
    let runs = pu(30u);
    s.ok = gid.x < pu(4u) * od1 * runs && plane < pu(29u);
    let q = udiv(gid.x, runs, pf(31u));  // the output row, o0 * od1 + o1
    let o2 = ROW_OUTPUTS * (gid.x - q * runs);
    let o0 = udiv(q, od1, pf(33u));
    let o1 = q - o0 * od1;
    s.i = (plane * pu(4u) * od1 + q) * od2 + o2;
    s.outputs = min(ROW_OUTPUTS, od2 - min(o2, od2));
    s.step = pi(12u);
    s.in_d = vec3<i32>(pi(1u), pi(2u), pi(3u));
    s.start = vec3<i32>(vec3<u32>(o0, o1, o2) * vec3<u32>(pu(10u), pu(11u), pu(12u))) -
              vec3<i32>(pi(16u), pi(17u), pi(18u));
    s.dil = vec3<i32>(pi(13u), pi(14u), pi(15u));
    s.base = plane * u32(s.in_d.x * s.in_d.y * s.in_d.z);
    return s;
}

// The entry point of both: each invocation computes its row outputs with the including shader's
// pool_one(i, base, start, dil, in_d) (one output i, its window from start).
@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let site = pool_site(gid, nwg);
    if (!site.ok) { return; }
    for (var k = 0u; k < ROW_OUTPUTS; k++) {
        if (k < site.outputs) {  // masked, not a break: lavapipe runs a loop with an exit slower
            pool_one(site.i + k, site.base, site.start + vec3<i32>(0, 0, i32(k) * site.step), site.dil, site.in_d);
        }
    }
}
