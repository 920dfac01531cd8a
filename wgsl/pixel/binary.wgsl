// y = f(a, b) texel by texel for two tensors of one shape and layout (backends/pixel_layout.py), f given as the
// expression {{EXPR}} of `a` and `b` (f32), applied to each lane; texels past the tensor's end and padding lanes
// (pixel/lanes.wgsl) are zero.
// Params: 0 texels, 1 log2 of the texture width, 2-4 the layout's lane parameters.
#include "common/params.wgsl"
#include "common/math.wgsl"
#include "pixel/fullscreen.wgsl"
#include "pixel/lanes.wgsl"
#include "pixel/binary_inputs.wgsl"

@fragment
fn fs_main(@builtin(position) position: vec4<f32>) -> @location(0) vec4<f32> {
    let texel = vec2<i32>(position.xy);
    let index = (u32(texel.y) << pu(1u)) + u32(texel.x);
    if (index >= pu(0u)) { return vec4<f32>(0.0); }
    let x = textureLoad(A, texel, 0);
    let y = textureLoad(B, texel, 0);
    let z = vec4<f32>(f(x.x, y.x), f(x.y, y.y), f(x.z, y.z), f(x.w, y.w));
    return select(vec4<f32>(0.0), z, lane_mask(lanes_in(index, pu(2u), pu(3u), pu(4u))));
}
