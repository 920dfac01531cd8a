// The float32 pool's texel-kind functions (pixel/pool.wgsl, pool_indices.wgsl): the lowest value, NaN lanes, and
// per MODE (2 Lp p = 2, 3 Lp p = 1, 4 Lp any p: pf(23) = p, pf(24) = 1/p) the power of an element and the root
// of the sum; an average divides each lane correctly rounded ({{DIV}}).
fn pool_lowest() -> vec4<f32> { return vec4<f32>(bitcast<f32>(0xff800000u)); }

fn is_nan4(v: vec4<f32>) -> vec4<bool> {
    return (bitcast<vec4<u32>>(v) & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u);
}

fn pool_power(v: vec4<f32>, mode: u32) -> vec4<f32> {
    if (mode == 2u) { return v * v; }
    if (mode == 3u) { return abs(v); }
    if (mode == 4u) { return pow(abs(v), vec4<f32>(pf(23u))); }
    return v;
}

fn pool_root(acc: vec4<f32>, mode: u32) -> vec4<f32> {
    if (mode == 2u) { return sqrt(acc); }
    if (mode == 4u) { return pow(acc, vec4<f32>(pf(24u))); }
    return acc;
}

fn pool_average(acc: vec4<f32>, count: i32) -> vec4<f32> {
    return vec4<f32>({{DIV}}(opaque_zero(), acc.x, f32(max(count, 1))), {{DIV}}(opaque_zero(), acc.y, f32(max(count, 1))),
                     {{DIV}}(opaque_zero(), acc.z, f32(max(count, 1))), {{DIV}}(opaque_zero(), acc.w, f32(max(count, 1))));
}
