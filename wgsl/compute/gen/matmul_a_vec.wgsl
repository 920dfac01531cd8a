// matmul_common.wgsl's A loaders for an A of vec4 rows (rows 16-byte aligned and contiguous; TA vec4<f32>).
fn load_a(ra: u32, k4: u32) -> vec4<f32> { return A[ra + k4]; }
fn load_a1(ra: u32, k: u32) -> f32 { return A[ra + k / 4u][k % 4u]; }
