// y = f(x) texel by texel for an elementwise function given as the expression {{EXPR}} of `v` (f32), applied to
// each lane. Input and output share one texture layout (backends/pixel_layout.py), so the fragment at texel
// (x, y) reads the input's texel (x, y); texels past the tensor's end and padding lanes (pixel/lanes.wgsl) are zero.
// Params: 0 texels, 1 log2 of the texture width, 2 alpha, 3 beta, 4 gamma, 5-7 the layout's lane parameters.
#include "common/params.wgsl"
#include "common/math.wgsl"
#include "pixel/fullscreen.wgsl"
#include "pixel/lanes.wgsl"

@group(0) @binding(0) var X: texture_2d<f32>;
@group(0) @binding(1) var<uniform> params: Params;

fn f(v: f32) -> f32 {
    let alpha = pf(2u);
    let beta = pf(3u);
    let gamma = pf(4u);
    return {{EXPR}};
}

@fragment
fn fs_main(@builtin(position) position: vec4<f32>) -> @location(0) vec4<f32> {
    let texel = vec2<i32>(position.xy);
    let index = (u32(texel.y) << pu(1u)) + u32(texel.x);
    if (index >= pu(0u)) { return vec4<f32>(0.0); }
    let t = textureLoad(X, texel, 0);
    let y = vec4<f32>(f(t.x), f(t.y), f(t.z), f(t.w));
    return select(vec4<f32>(0.0), y, lane_mask(lanes_in(index, pu(5u), pu(6u), pu(7u))));
}
