// A pixel program that moves whole texels: the fragment finds the coordinates `c` of its texel's first lane and
// BODY sets the vec4 `out` from the inputs' texels, read with generated accessors `xk(d)` (the texel of input k
// holding coordinates d of its 6-dim frame). For copies that keep the blocked axis and four-aligned offsets on it
// (a transpose carrying the blocked axis along, a concatenation of four-aligned parts, a slice that leaves the
// blocked axis whole). Lanes past the output's end are cleared: padding lanes stay zero.
// Params: 0-13 the output's addressing, then 14 words per input, then the body's own words (pe).
#include "common/params.wgsl"
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
    let c = coords_of(0u, t, 0u, &inside);
    if (!inside) { return out; }
    {{BODY}}
    let lanes = min(4u, dim_of(0u, pu(12u)) - c.c[pu(12u)]);
    return select(vec4<{{OUT}}>(), out, vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(lanes));
}
