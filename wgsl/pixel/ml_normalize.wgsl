// Normalizer on gpu-pixel: each row (X's last axis, blocked) divided by its max (NaN wins), L1 or L2 norm in
// float32, kept where that is 0, as compute/ml_normalize.wgsl; a fragment draws one texel and reduces its row
// first, lane by lane in order.
// Params: 0 texels, 1 row length, 2 the width shift (X and Y share the layout). Override NORM: 0 max, 1 L1,
// 2 L2. DIV: the device's exact float division.
#include "common/params.wgsl"
#include "common/math.wgsl"
#include "pixel/fullscreen.wgsl"

override NORM: u32 = 0u;

@group(0) @binding(0) var X: texture_2d<f32>;
@group(0) @binding(1) var<uniform> params: Params;

fn at(t: u32) -> vec2<i32> { return vec2<i32>(i32(t & ((1u << pu(2u)) - 1u)), i32(t >> pu(2u))); }

@fragment
fn fs_main(@builtin(position) position: vec4<f32>) -> @location(0) vec4<f32> {
    let texel = vec2<u32>(position.xy);
    let t = (texel.y << pu(2u)) + texel.x;
    if (t >= pu(0u)) { return vec4<f32>(0.0); }
    let length = pu(1u);
    let blocks = (length + 3u) / 4u;
    let first = (t / blocks) * blocks;
    var div = select(0.0, textureLoad(X, at(first), 0).x, NORM == 0u);
    for (var b = 0u; b < blocks; b++) {
        let v4 = textureLoad(X, at(first + b), 0);
        for (var l = 0u; l < 4u; l++) {
            let v = v4[l];
            if (b * 4u + l < length) {
                if (NORM == 0u) {
                    div = select(div, v, v > div || is_nan_f32(v));
                } else if (NORM == 1u) {
                    div += abs(v);
                } else {
                    div += v * v;
                }
            }
        }
    }
    if (NORM == 2u) { div = sqrt(div); }
    let x = textureLoad(X, vec2<i32>(texel), 0);
    var out = vec4<f32>(0.0);
    for (var l = 0u; l < 4u; l++) {
        if ((t % blocks) * 4u + l < length) {
            out[l] = select({{DIV}}(opaque_zero(), x[l], div), x[l], div == 0.0);
        }
    }
    return out;
}
