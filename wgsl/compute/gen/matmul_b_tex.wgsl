// matmul_common.wgsl's B loader for a B bound as an rgba32float texture of its 2-D view: kb is the row
// (k stride 1), texel x the group of four columns.
fn load_b(kb: u32, cb: u32, nl: u32) -> vec4<f32> { return textureLoad(B, vec2<i32>(i32(cb), i32(kb)), 0); }
