// matmul_common.wgsl's B loader for a strided B (TB f32): columns step by params word 7 elements, those past
// the last column nl clamped to it.
fn load_b(kb: u32, cb: u32, nl: u32) -> vec4<f32> {
    let s = pu(7u);
    return vec4<f32>(B[kb + cb * s], B[kb + min(cb + 1u, nl) * s], B[kb + min(cb + 2u, nl) * s],
                     B[kb + min(cb + 3u, nl) * s]);
}
