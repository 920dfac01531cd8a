// The generic gpu-pixel program: each lane of the output finds its coordinates `c` (pixel/addressing.wgsl) and
// computes its value `r` with the statements substituted for BODY, which read inputs through generated accessors `xk(c)`
// (input k's element at coordinates c of its own 6-dim frame, its size-1 dims broadcast) and parameters past
// the addressing words with pe(i). Copies, layout switches, transposes, slices, pads, gathers, concatenations,
// broadcasting elementwise functions and casts are all this program with a different body.
// Params: 0-13 the output's addressing, then 14 words per input, then the body's own words (pe).
#include "common/params.wgsl"
#include "common/math.wgsl"
#include "pixel/fullscreen.wgsl"
#include "pixel/addressing.wgsl"

{{DECLS}}

#include "pixel/extra.wgsl"

{{HELPERS}}

@fragment
fn fs_main(@builtin(position) position: vec4<f32>) -> @location(0) vec4<{{OUT}}> {
    let texel = vec2<u32>(position.xy);
    let t = (texel.y << pu(13u)) + texel.x;
    var out = vec4<{{OUT}}>();
    var inside = false;
    let first = coords_of(0u, t, 0u, &inside);
    if (!inside) { return out; }
    let axis = pu(12u);
    for (var lane = 0u; lane < 4u; lane++) {
        var c = first;
        c.c[axis] = first.c[axis] + lane;
        if (c.c[axis] < dim_of(0u, axis)) {
            var r: {{OUT}};
            {{BODY}}
            out[lane] = r;
        }
    }
    return out;
}
