// The output and window of one pool invocation, shared by pool.wgsl and maxpool_indices.wgsl (their
// params layout: 1..3 input spatial, 4..6 output spatial, 10..12 strides, 13..15 dilations, 16..18
// begin pads, 29 planes; the grid's x runs over a plane's outputs, (y, z) over the N * C planes).
// The window's size per dim (params 7..9 hold the same) are pipeline constants, so that the compiler
// unrolls the window loops (a 3x3 max pool ran ~4x slower with uniform-bound loops on lavapipe).
override KD0: i32 = 1;
override KD1: i32 = 1;
override KD2: i32 = 1;
// The output's last two spatial sizes (params 5, 6 hold the same): the output position is found by
// dividing by constants (runtime integer division is slow on lavapipe).
override OD1: u32 = 1u;
override OD2: u32 = 1u;

struct PoolSite {
    ok: bool,  // false past the last output or plane
    i: u32,  // flat output index
    base: u32,  // the plane's first input element
    start: vec3<i32>,  // the window's first input position (may be in the padding)
    dil: vec3<i32>,
    in_d: vec3<i32>,
}

fn pool_site(gid: vec3<u32>, nwg: vec3<u32>) -> PoolSite {
    var s: PoolSite;
    // No division for the plane: it comes from the grid's y and z.
    let plane = gid.y + gid.z * nwg.y;
    let plane_size = pu(4u) * OD1 * OD2;
    s.ok = gid.x < plane_size && plane < pu(29u);
    s.i = plane * plane_size + gid.x;
    s.in_d = vec3<i32>(pi(1u), pi(2u), pi(3u));
    let q = gid.x / OD2;
    let o2 = gid.x - q * OD2;
    let o0 = q / OD1;
    let o1 = q - o0 * OD1;
    s.start = vec3<i32>(vec3<u32>(o0, o1, o2) * vec3<u32>(pu(10u), pu(11u), pu(12u))) -
              vec3<i32>(pi(16u), pi(17u), pi(18u));
    s.dil = vec3<i32>(pi(13u), pi(14u), pi(15u));
    s.base = plane * u32(s.in_d.x * s.in_d.y * s.in_d.z);
    return s;
}
