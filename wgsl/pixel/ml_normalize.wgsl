// Normalizer on gpu-pixel: each row (X's last axis, blocked) divided by its max (NaN skipped, from float32's
// lowest value), L1 or L2 norm (summed element after element) in float32, L2 as sqrt(x * x / sum) negated
// where x < 0, kept where the divisor is 0, as compute/ml_normalize.wgsl and ONNX Runtime compute it; a
// fragment draws one texel and reduces its row first, lane by lane in order. Fragments run with denormals
// flushed on lavapipe, so the sums, squares, quotients and the square root go through common/subnormal.wgsl
// (and the max compares sn_key orders), keeping subnormal values as the cpu and ORT keep them.
// Params: 0 texels, 1 row length, 2 the width shift (X and Y share the layout). Override NORM: 0 max, 1 L1,
// 2 L2. DIV: the device's exact float division.
#include "common/params.wgsl"
#include "common/math.wgsl"
#include "common/subnormal.wgsl"
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
    var div = select(0.0, -3.40282347e+38, NORM == 0u);
    for (var b = 0u; b < blocks; b++) {
        let v4 = textureLoad(X, at(first + b), 0);
        for (var l = 0u; l < 4u; l++) {
            let v = v4[l];
            if (b * 4u + l < length) {
                if (NORM == 0u) {
                    if (!is_nan_f32(v) && sn_key(v) > sn_key(div)) { div = v; }
                } else if (NORM == 1u) {
                    div = sn_add(div, bitcast<f32>(bitcast<u32>(v) & 0x7fffffffu));
                } else {
                    div = sn_add(div, opaque(sn_mul(v, v), opaque_zero()));
                }
            }
        }
    }
    let x = textureLoad(X, vec2<i32>(texel), 0);
    var out = vec4<f32>(0.0);
    for (var l = 0u; l < 4u; l++) {
        if ((t % blocks) * 4u + l < length) {
            let v = x[l];
            var y = v;
            if ((bitcast<u32>(div) & 0x7fffffffu) != 0u) {  // a bit test: drivers may fold a NaN compare
                if (NORM == 2u) {
                    let square = opaque(sn_mul(v, v), opaque_zero());
                    let q = sn_quotient(square, div, {{DIV}}(opaque_zero(), square, div));
                    // sqrt(q * 2^64) * 2^-32 for a subnormal q (exact scalings; the root is normal)
                    let root = select(sqrt(q), sqrt(sn_up(q)) * 2.3283064365386963e-10, sn_is_sub(q));
                    y = select(root, -root, v < 0.0);
                } else {
                    y = sn_quotient(v, div, {{DIV}}(opaque_zero(), v, div));
                }
            }
            out[l] = y;
        }
    }
    return out;
}
