// matmul_common.wgsl's B loader for a B of vec4<f16> rows (weights held in half precision; TB vec4<f16>),
// widened to f32 on load.
fn load_b(kb: u32, cb: u32, nl: u32) -> vec4<f32> { return vec4<f32>(B[kb + cb]); }
