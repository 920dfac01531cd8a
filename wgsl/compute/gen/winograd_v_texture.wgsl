// V_BINDING of the Winograd input transforms (winograd*_in.wgsl): V, their transformed tiles, in a linear
// write-only storage texture (texel index i at linear_texel(i), as every scratch operand texture), bound after
// the parameter block.
@group(0) @binding(1) var<uniform> params: Params;
@group(0) @binding(2) var V: texture_storage_2d<rgba32float, write>;

fn store(index: u32, value: vec4<f32>) { textureStore(V, linear_texel(index), value); }
