// The fastest form of pixel/map4.wgsl: every input has the output's shape and layout, so the fragment at texel
// (x, y) reads texel (x, y) of each input, with no coordinates to work out. LOADS binds the texels va, vb, ...
// and LANE computes `r` for one lane from the scalars a, b, ...; padding lanes (pixel/lanes.wgsl) stay zero.
// Params: 0 texels, 1 log2 of the texture width, 2-4 the layout's lane parameters, then the function's words (pe, from word 5).
#include "common/params.wgsl"
#include "common/math.wgsl"
#include "pixel/fullscreen.wgsl"
#include "pixel/lanes.wgsl"

{{DECLS}}

#include "pixel/extra.wgsl"

{{HELPERS}}

@fragment
fn fs_main(@builtin(position) position: vec4<f32>) -> @location(0) vec4<{{OUT}}> {
    let texel = vec2<i32>(position.xy);
    let t = (u32(texel.y) << pu(1u)) + u32(texel.x);
    var out = vec4<{{OUT}}>();
    if (t >= pu(0u)) { return out; }
    let lanes = lanes_in(t, pu(2u), pu(3u), pu(4u));
    {{LOADS}}
    for (var lane = 0u; lane < lanes; lane++) {
        var r: {{OUT}};
        {{LANE}}
        out[lane] = r;
    }
    return out;
}
