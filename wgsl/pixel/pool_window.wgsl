// The output texel and window of one gpu-pixel pool fragment, shared by pool.wgsl and pool_indices.wgsl. Input
// and output are (N, C, D0, D1, D2) with the channels blocked (1-D and 2-D pools have leading spatial dims of
// 1), so texel t of the output is (n * CB + cb, o0, o1, o2) row-major and its four lanes are four channels.
// Params: 0 output texels, 1 log2 of the output's width, 2-4 input spatial dims, 5-7 output spatial dims,
// 8-10 strides, 11-13 dilations, 14-16 begin pads (i32), 17-19 / 20-22 the positions an average counts
// ([lo, hi) per dim, i32), 23 p (f32), 24 1/p (f32), 25 channel blocks CB, 26 log2 of the input's width,
// 27 channels C, 28 storage_order, 29 spatial dims of the pool (1-3).
// The window's size per dim are pipeline constants, so that the compiler unrolls the window loops.
override KD0: i32 = 1;
override KD1: i32 = 1;
override KD2: i32 = 1;

struct PoolSite {
    ok: bool,  // false past the output's last texel
    plane: u32,  // n * CB + cb
    start: vec3<i32>,  // the window's first input position (may be in the padding)
    dil: vec3<i32>,
    in_d: vec3<i32>,
    lanes: u32,  // channels of the texel that exist
}

fn pool_site(position: vec4<f32>) -> PoolSite {
    var s: PoolSite;
    let texel = vec2<u32>(position.xy);
    let t = (texel.y << pu(1u)) + texel.x;
    s.ok = t < pu(0u);
    let o2 = t % pu(7u);
    var q = t / pu(7u);
    let o1 = q % pu(6u);
    q = q / pu(6u);
    let o0 = q % pu(5u);
    s.plane = q / pu(5u);
    s.in_d = vec3<i32>(pi(2u), pi(3u), pi(4u));
    s.start = vec3<i32>(vec3<u32>(o0, o1, o2) * vec3<u32>(pu(8u), pu(9u), pu(10u))) -
              vec3<i32>(pi(14u), pi(15u), pi(16u));
    s.dil = vec3<i32>(pi(11u), pi(12u), pi(13u));
    let cb = s.plane % pu(25u);
    s.lanes = min(pu(27u) - cb * 4u, 4u);
    return s;
}

// The input texel at position p of plane `plane` (p inside the input).
fn pool_load(plane: u32, p: vec3<i32>, in_d: vec3<i32>) -> vec4<{{T}}> {
    let t = ((plane * u32(in_d.x) + u32(p.x)) * u32(in_d.y) + u32(p.y)) * u32(in_d.z) + u32(p.z);
    let shift = pu(26u);
    return textureLoad(X, vec2<i32>(i32(t & ((1u << shift) - 1u)), i32(t >> shift)), 0);
}
