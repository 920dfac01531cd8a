// matmul_common.wgsl's A loaders for an A bound as an rgba32float texture of its 2-D view: ra is the row,
// texel x the group of four k.
fn load_a(ra: u32, k4: u32) -> vec4<f32> { return textureLoad(A, vec2<i32>(i32(k4), i32(ra)), 0); }
fn load_a1(ra: u32, k: u32) -> f32 { return textureLoad(A, vec2<i32>(i32(k / 4u), i32(ra)), 0)[k % 4u]; }
