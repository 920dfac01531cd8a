// matmul_common.wgsl's A loaders for an A of vec4<f16> rows (weights held in half precision; TA vec4<f16>),
// widened to f32 on load.
fn load_a(ra: u32, k4: u32) -> vec4<f32> { return vec4<f32>(A[ra + k4]); }
fn load_a1(ra: u32, k: u32) -> f32 { return f32(A[ra + k / 4u][k % 4u]); }
