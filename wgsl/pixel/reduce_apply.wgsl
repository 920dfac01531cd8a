// y = EXPR(x, o0, o1, ...) texel by texel in x's layout, each operand ok broadcast onto x (numpy rules, shapes
// right-aligned): an operand that varies along x's blocked axis is blocked on it too and read a texel (four
// lanes) at a time, any other is read one element and splat over the four lanes. This applies per-row
// statistics (the reductions of ops/reduce_pixel.py, kept dims of size 1) and per-channel parameters to x:
// softmax, the normalizations, BatchNormalization's affine. EXPR is a vec4<f32> expression of `x` and the
// operands `ok`; padding lanes and texels past the end are zero.
// Params: 0-13 x's addressing (pixel/addressing.wgsl), 14 words per operand, then the expression's own words
// (pe / pef).
#include "common/params.wgsl"
#include "common/math.wgsl"
#include "pixel/fullscreen.wgsl"
#include "pixel/addressing.wgsl"

@group(0) @binding(0) var X: texture_2d<f32>;
{{DECLS}}

#include "pixel/extra.wgsl"

fn exp4(v: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(exp_accurate(v.x), exp_accurate(v.y), exp_accurate(v.z), exp_accurate(v.w));
}

{{HELPERS}}

@fragment
fn fs_main(@builtin(position) position: vec4<f32>) -> @location(0) vec4<f32> {
    let texel = vec2<u32>(position.xy);
    let t = (texel.y << pu(13u)) + texel.x;
    var inside = false;
    let c = coords_of(0u, t, 0u, &inside);
    if (!inside) { return vec4<f32>(0.0); }
    let axis = pu(12u);
    let valid = vec4<u32>(c.c[axis]) + vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(dim_of(0u, axis));
    let x = textureLoad(X, vec2<i32>(texel), 0);
    {{LOADS}}
    let y = {{EXPR}};
    return select(vec4<f32>(0.0), y, valid);
}
