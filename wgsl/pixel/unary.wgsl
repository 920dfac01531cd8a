// y = f(x) texel by texel for an elementwise function given as the expression {{EXPR}} of `v` (f32), applied to
// each lane. Input and output share one texture layout (backends/pixel_layout.py), so the fragment at texel
// (x, y) reads the input's texel (x, y); lanes past a tensor's end hold f(0), which no reader looks at.
// Params: 0 texels, 1 alpha, 2 beta, 3 gamma, 4 width shift.
#include "common/params.wgsl"
#include "common/math.wgsl"
#include "pixel/fullscreen.wgsl"

@group(0) @binding(0) var X: texture_2d<f32>;
@group(0) @binding(1) var<uniform> params: Params;

fn f(v: f32) -> f32 {
    let alpha = pf(1u);
    let beta = pf(2u);
    let gamma = pf(3u);
    return {{EXPR}};
}

@fragment
fn fs_main(@builtin(position) position: vec4<f32>) -> @location(0) vec4<f32> {
    let texel = vec2<i32>(position.xy);
    let t = textureLoad(X, texel, 0);
    return vec4<f32>(f(t.x), f(t.y), f(t.z), f(t.w));
}
