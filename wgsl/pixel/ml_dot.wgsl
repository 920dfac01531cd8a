// Linear and SVM models on gpu-pixel: Y[r, c] = kernel(X[r, :], W[:, c]) + B[c] in float32 (the gpu-compute
// program's, compute/ml_dot.wgsl, with W transposed); a fragment draws four columns of one row. X (rows,
// features) is blocked along its features, W (features, columns) and Y (rows, columns) along their columns, B
// (columns) along its one axis: one W texel holds a feature of four columns. Sums run in feature order.
// Params: 0 Y's texels, 1 columns, 2 features, 3 gamma (f32), 4 coef0 (f32), 5 degree, 6-9 the width shifts
// of Y, X, W and B.
// Override KERNEL: 0 linear, 1 poly, 2 rbf, 3 sigmoid (as compute/ml_dot.wgsl).
#include "common/params.wgsl"
#include "common/math.wgsl"
#include "pixel/fullscreen.wgsl"

override KERNEL: u32 = 0u;

@group(0) @binding(0) var X: texture_2d<f32>;
@group(0) @binding(1) var W: texture_2d<f32>;
@group(0) @binding(2) var B: texture_2d<f32>;
@group(0) @binding(3) var<uniform> params: Params;

fn at(t: u32, shift: u32) -> vec2<i32> { return vec2<i32>(i32(t & ((1u << shift) - 1u)), i32(t >> shift)); }

fn kernel_of(acc: vec4<f32>) -> vec4<f32> {
    if (KERNEL == 2u) {
        return vec4<f32>(exp_accurate(-pf(3u) * acc.x), exp_accurate(-pf(3u) * acc.y),
                         exp_accurate(-pf(3u) * acc.z), exp_accurate(-pf(3u) * acc.w));
    }
    let base = pf(3u) * acc + vec4<f32>(pf(4u));
    if (KERNEL == 3u) { return vec4<f32>(tanh_safe(base.x), tanh_safe(base.y), tanh_safe(base.z), tanh_safe(base.w)); }
    if (KERNEL == 1u) {
        var p = vec4<f32>(1.0);
        for (var k = 0u; k < pu(5u); k++) { p *= base; }
        return p;
    }
    return acc;
}

@fragment
fn fs_main(@builtin(position) position: vec4<f32>) -> @location(0) vec4<f32> {
    let texel = vec2<u32>(position.xy);
    let t = (texel.y << pu(6u)) + texel.x;
    if (t >= pu(0u)) { return vec4<f32>(0.0); }
    let cols = pu(1u);
    let features = pu(2u);
    let blocks = (cols + 3u) / 4u;
    let row = t / blocks;
    let block = t % blocks;
    let feature_blocks = (features + 3u) / 4u;
    var acc = vec4<f32>(0.0);
    for (var fb = 0u; fb < feature_blocks; fb++) {
        let x = textureLoad(X, at(row * feature_blocks + fb, pu(7u)), 0);
        for (var l = 0u; l < 4u; l++) {
            let f = fb * 4u + l;
            if (f < features) {
                let w = textureLoad(W, at(f * blocks + block, pu(8u)), 0);
                if (KERNEL == 2u) {
                    let d = vec4<f32>(x[l]) - w;
                    acc += d * d;
                } else {
                    acc += x[l] * w;
                }
            }
        }
    }
    let y = kernel_of(acc) + textureLoad(B, at(block, pu(9u)), 0);
    return select(vec4<f32>(0.0), y, vec4<u32>(0u, 1u, 2u, 3u) + block * 4u < vec4<u32>(cols));
}
