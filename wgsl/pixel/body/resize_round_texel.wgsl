// Resize's products, texel by texel: each rounded on its own (an XOR with a zero the compiler cannot see), so no
// driver contracts them into FMAs; a term is the rounded product (texel draws have no divisor).
fn rz_round(v: vec4<f32>) -> vec4<f32> { return bitcast<vec4<f32>>(bitcast<vec4<u32>>(v) ^ vec4<u32>(opaque_zero())); }
fn rz_term(v: vec4<f32>, w: f32, d: f32) -> vec4<f32> { return rz_round(v * w); }
