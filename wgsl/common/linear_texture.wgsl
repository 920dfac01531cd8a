// Linear textures hold a matrix's texels in buffer order, 1024 texels (LINEAR_TEXELS in
// backends/gpu/tensors.py) per texture row: texel t is at (t & 1023, t >> 10). Every scratch operand
// texture is linear, so one texture serves any layer's operand whatever its shape.
fn linear_texel(t: u32) -> vec2<i32> {
    return vec2<i32>(i32(t & 1023u), i32(t >> 10u));
}
