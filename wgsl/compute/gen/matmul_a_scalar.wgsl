// matmul_common.wgsl's A loaders for a strided A (TA f32): k steps of params word 5 elements.
fn load_a(ra: u32, k4: u32) -> vec4<f32> {
    let s = pu(5u);
    let o = ra + k4 * 4u * s;
    return vec4<f32>(A[o], A[o + s], A[o + 2u * s], A[o + 3u * s]);
}
fn load_a1(ra: u32, k: u32) -> f32 { return A[ra + k * pu(5u)]; }
