// The texel-wise form of pixel/map.wgsl for elementwise functions: every input is blocked on the output's blocked
// axis with the output's extent there (or extent 1: its one lane is splat), so each input gives the fragment one
// whole texel, loaded once (other axes broadcast through pixel/addressing.wgsl). LOADS binds the texels va, vb,
// ... and LANE computes `r` for one lane from the scalars a, b, ... of that lane. Padding lanes stay zero.
// Params: 0-13 the output's addressing, then 14 words per input, then the function's own words (pe).
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
    let c = coords_of(0u, t, 0u, &inside);
    if (!inside) { return out; }
    let axis = pu(12u);
    let lanes = min(4u, dim_of(0u, axis) - c.c[axis]);
    {{LOADS}}
    for (var lane = 0u; lane < lanes; lane++) {
        var r: {{OUT}};
        {{LANE}}
        out[lane] = r;
    }
    return out;
}
