// matmul_common.wgsl's B loader for a B bound as a linear texture (its floats in buffer order,
// common/linear_texture.wgsl): kb + cb is the texel's index.
fn load_b(kb: u32, cb: u32, nl: u32) -> vec4<f32> { return textureLoad(B, linear_texel(kb + cb), 0); }
