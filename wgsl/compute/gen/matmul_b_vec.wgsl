// matmul_common.wgsl's B loader for a B of vec4 rows (TB vec4<f32>): cb counts groups of four columns.
fn load_b(kb: u32, cb: u32, nl: u32) -> vec4<f32> { return B[kb + cb]; }
