// A layout switch: the same tensor with another axis blocked (backends/pixel_layout.py). The four lanes of an
// output texel lie along the output's blocked axis, which the input does not block, so they are four input
// texels one input stride apart, all at the lane of the input's blocked coordinate: one address worked out per
// output texel, then three additions (where the generic map.wgsl works out every lane's address from scratch).
// Params: 0-13 the output's addressing, 14-27 the input's (pixel/addressing.wgsl).
#include "common/params.wgsl"
#include "pixel/fullscreen.wgsl"
#include "pixel/addressing.wgsl"

@group(0) @binding(0) var X: texture_2d<{{T}}>;
@group(0) @binding(1) var<uniform> params: Params;

@fragment
fn fs_main(@builtin(position) position: vec4<f32>) -> @location(0) vec4<{{T}}> {
    let texel = vec2<u32>(position.xy);
    let t = (texel.y << pu(13u)) + texel.x;
    var out = vec4<{{T}}>();
    var inside = false;
    let c = coords_of(0u, t, 0u, &inside);
    if (!inside) { return out; }
    let axis = pu(12u);
    let in_axis = pu(14u + 12u);
    var first = 0u;
    for (var i = 0u; i < 6u; i++) {
        var k = c.c[i];
        if (i == in_axis) { k = k / 4u; }
        first += k * pu(14u + 6u + i);
    }
    let lane = c.c[in_axis] % 4u;
    let stride = pu(14u + 6u + axis);
    let shift = pu(14u + 13u);
    let mask = (1u << shift) - 1u;
    let lanes = min(4u, dim_of(0u, axis) - c.c[axis]);
    for (var k = 0u; k < lanes; k++) {
        let at = first + k * stride;
        out[k] = textureLoad(X, vec2<i32>(i32(at & mask), i32(at >> shift)), 0)[lane];
    }
    return out;
}
