// y = f(a, b) with numpy broadcasting: each output lane finds its coordinates, then each input's element at
// them (its size-1 dims broadcast) wherever that input's blocked axis is. {{EXPR}} is f of `a` and `b` (f32).
// Params: 0-13 the output's addressing (pixel/addressing.wgsl), 14-27 a's, 28-41 b's, 42 the output's texels.
#include "common/params.wgsl"
#include "common/math.wgsl"
#include "pixel/fullscreen.wgsl"
#include "pixel/binary_inputs.wgsl"
#include "pixel/addressing.wgsl"

@fragment
fn fs_main(@builtin(position) position: vec4<f32>) -> @location(0) vec4<f32> {
    let texel = vec2<u32>(position.xy);
    let t = (texel.y << pu(13u)) + texel.x;
    var out = vec4<f32>(0.0);
    if (t >= pu(42u)) { return out; }
    for (var lane = 0u; lane < 4u; lane++) {
        var ok = false;
        let coords = coords_of(0u, t, lane, &ok);
        if (ok) {
            out[lane] = f(load_broadcast(A, 14u, coords), load_broadcast(B, 28u, coords));
        }
    }
    return out;
}
