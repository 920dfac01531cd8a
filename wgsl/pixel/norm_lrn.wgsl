// LRN across channels on a channels-blocked texture: y = x / (bias + alpha/size * the sum of x^2 over the
// channel window)^beta. A fragment's four lanes are four neighbouring channels; it loads the texels of the
// channel blocks their windows reach (the same position in the neighbouring blocks) and adds each lane's
// squares where a channel lies in that lane's window. Padding lanes are zero, so they add nothing.
// Params: 0 texels, 1 log2 of the width, 2 texels after each channel block, 3 channel blocks, 4 channels C,
// 5 window below, 6 window above, 7 alpha / size (f32), 8 bias (f32), 9 beta (f32), 10 lanes of the last block
// (0: four). Override B075: beta is 0.75, computed as sqrt(d) * sqrt(sqrt(d)) like the CPU kernel.
#include "common/params.wgsl"
#include "common/math.wgsl"
#include "pixel/fullscreen.wgsl"
#include "pixel/lanes.wgsl"

override B075: bool = true;

@group(0) @binding(0) var X: texture_2d<f32>;
@group(0) @binding(1) var<uniform> params: Params;

fn load(t: u32) -> vec4<f32> {
    let shift = pu(1u);
    return textureLoad(X, vec2<i32>(i32(t & ((1u << shift) - 1u)), i32(t >> shift)), 0);
}

fn window_sum(sq: vec4<f32>, ch: vec4<i32>, c: i32) -> f32 {
    let d = ch - vec4<i32>(c);
    return dot(sq, select(vec4<f32>(0.0), vec4<f32>(1.0), d >= vec4<i32>(-pi(5u)) & d <= vec4<i32>(pi(6u))));
}

@fragment
fn fs_main(@builtin(position) position: vec4<f32>) -> @location(0) vec4<f32> {
    let texel = vec2<u32>(position.xy);
    let t = (texel.y << pu(1u)) + texel.x;
    if (t >= pu(0u)) { return vec4<f32>(0.0); }
    let inner = pu(2u);
    let cb = i32((t / inner) % pu(3u));
    let c0 = cb * 4;
    let kb0 = max(c0 - pi(5u), 0) / 4;
    let kb1 = min(c0 + 3 + pi(6u), pi(4u) - 1) / 4;
    var sums = vec4<f32>(0.0);
    for (var kb = kb0; kb <= kb1; kb++) {
        let v = load(u32(i32(t) + (kb - cb) * i32(inner)));
        let sq = v * v;
        let ch = vec4<i32>(kb * 4) + vec4<i32>(0, 1, 2, 3);
        sums += vec4<f32>(window_sum(sq, ch, c0), window_sum(sq, ch, c0 + 1), window_sum(sq, ch, c0 + 2),
                          window_sum(sq, ch, c0 + 3));
    }
    let d = sums * pf(7u) + vec4<f32>(pf(8u));
    var den: vec4<f32>;
    if (B075) {
        let root = sqrt(d);
        den = root * sqrt(root);
    } else {
        den = pow(d, vec4<f32>(pf(9u)));
    }
    let x = load(t);
    let y = vec4<f32>({{DIV}}(opaque_zero(), x.x, den.x), {{DIV}}(opaque_zero(), x.y, den.y),
                      {{DIV}}(opaque_zero(), x.z, den.z), {{DIV}}(opaque_zero(), x.w, den.w));
    return select(vec4<f32>(0.0), y, lane_mask(lanes_in(t, inner, pu(3u), pu(10u))));
}
