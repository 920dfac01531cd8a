// matmul_common.wgsl's A loaders for an A bound as a linear texture (its floats in buffer order,
// common/linear_texture.wgsl): ra + k4 is the texel's index.
fn load_a(ra: u32, k4: u32) -> vec4<f32> { return textureLoad(A, linear_texel(ra + k4), 0); }
fn load_a1(ra: u32, k: u32) -> f32 { return textureLoad(A, linear_texel(ra + k / 4u), 0)[k % 4u]; }
