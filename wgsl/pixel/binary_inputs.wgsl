// The bindings and the function of the gpu-pixel binary programs (binary.wgsl, binary_broadcast.wgsl): two
// input textures, the uniform parameter block, and f, the expression {{EXPR}} of `a` and `b` (f32).
@group(0) @binding(0) var A: texture_2d<f32>;
@group(0) @binding(1) var B: texture_2d<f32>;
@group(0) @binding(2) var<uniform> params: Params;

fn f(a: f32, b: f32) -> f32 {
    return {{EXPR}};
}
