// V_BINDING of the Winograd input transforms (winograd*_in.wgsl): V, their transformed tiles, in a storage
// buffer of vec4 (texel index i is V[i]), and the parameter block after it.
@group(0) @binding(1) var<storage, read_write> V: array<vec4<f32>>;
@group(0) @binding(2) var<uniform> params: Params;

fn store(index: u32, value: vec4<f32>) { V[index] = value; }
