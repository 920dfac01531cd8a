// y = act(x * a[c] + b[c]) texel by texel, c the channel (axis 1) of x: inference BatchNormalization folded on
// the host, with the layer's fused activation {{ACT}} (an expression of `v` with alpha, beta, gamma). a and b are
// (C,) textures blocked on their only axis (texel c / 4 holds four channels). With x channels blocked
// (override CHANNELS_BLOCKED) a fragment's four lanes are four channels and read one texel of a and of b; else
// they share one channel and read one lane of each. Padding lanes and texels past the end are zero.
// Params: 0 texels, 1 log2 of the width, 2 texels after each step along the channel axis, 3 steps along it
// (channel blocks or channels), 4 log2 of a's and b's width, 5-7 x's lane parameters (pixel/lanes.wgsl),
// 8 alpha, 9 beta, 10 gamma (f32).
#include "common/params.wgsl"
#include "common/math.wgsl"
#include "pixel/fullscreen.wgsl"
#include "pixel/lanes.wgsl"

override CHANNELS_BLOCKED: bool = true;

@group(0) @binding(0) var X: texture_2d<f32>;
@group(0) @binding(1) var A: texture_2d<f32>;
@group(0) @binding(2) var B: texture_2d<f32>;
@group(0) @binding(3) var<uniform> params: Params;

fn act(v: f32) -> f32 {
    let alpha = pf(8u);
    let beta = pf(9u);
    let gamma = pf(10u);
    return {{ACT}};
}

fn at_texel(t: u32, shift: u32) -> vec2<i32> {
    return vec2<i32>(i32(t & ((1u << shift) - 1u)), i32(t >> shift));
}

@fragment
fn fs_main(@builtin(position) position: vec4<f32>) -> @location(0) vec4<f32> {
    let texel = vec2<i32>(position.xy);
    let t = (u32(texel.y) << pu(1u)) + u32(texel.x);
    if (t >= pu(0u)) { return vec4<f32>(0.0); }
    let c = (t / pu(2u)) % pu(3u);
    var a: vec4<f32>;
    var b: vec4<f32>;
    if (CHANNELS_BLOCKED) {
        a = textureLoad(A, at_texel(c, pu(4u)), 0);
        b = textureLoad(B, at_texel(c, pu(4u)), 0);
    } else {
        a = vec4<f32>(textureLoad(A, at_texel(c / 4u, pu(4u)), 0)[c % 4u]);
        b = vec4<f32>(textureLoad(B, at_texel(c / 4u, pu(4u)), 0)[c % 4u]);
    }
    // The product rounded on its own, as the CPU computes it: never fused with the add into an FMA.
    let product = textureLoad(X, texel, 0) * a;
    let z = bitcast<vec4<f32>>(bitcast<vec4<u32>>(product) ^ vec4<u32>(opaque_zero())) + b;
    let y = vec4<f32>(act(z.x), act(z.y), act(z.z), act(z.w));
    return select(vec4<f32>(0.0), y, lane_mask(lanes_in(t, pu(5u), pu(6u), pu(7u))));
}
