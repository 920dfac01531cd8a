// Transposed 2-D convolution, the gather after the product: COLS holds, per image, one row per
// (output channel m, tap ky, kx) and one column per input pixel (iy, ix) -- the product of the weight
// (M * kh * kw, C) with the image (C, H * W). Each output pixel sums the columns whose scatter lands
// on it, oy = iy*sh - ph + ky*dh (iy = (oy + ph - ky*dh) / sh where that divides exactly), then adds
// the bias and applies the fused activation.
// Each invocation gathers four horizontally adjacent outputs of one row, sharing the row's tap tests and the
// index arithmetic. The kernel size and strides are pipeline constants (KH, KW, SH, SW: the layer's
// structure): the tap loops unroll and the divisions in them are by constants (runtime integer division is
// slow on lavapipe: it runs per lane). The sizes are uniforms, so one pipeline serves every input size; the
// two divisions per invocation, by ceil(ow / 4) and by M, go through udiv (common/udiv.wgsl).
// The grid is (ceil(oh * ceil(ow / 4) / WG), planes) with planes = images * M, those past 65535 folded into z:
// a plane per workgroup row. Where the products of all images would pass the binding limit, they are made
// and gathered a block of images at a time: COLS then holds the block's, and its outputs start at element 18
// of Y.
// Params: 0 planes (of the block), 1 M, 2 oh, 3 ow, 4 H, 5 W, 6 kh, 7 kw, 8 sh, 9 sw, 10 ph, 11 pw, 12 dh,
// 13 dw, 14 has bias, 15..17 activation alpha/beta/gamma, 18 the block's first output; udiv's divisor
// words (the divisor, its f32 reciprocal): 19, 20 ow4 = ceil(ow / 4); 21, 22 M.
#include "common/params.wgsl"
#include "common/math.wgsl"
#include "common/udiv.wgsl"

override KH: u32 = 1u;
override KW: u32 = 1u;
override SH: i32 = 1;
override SW: i32 = 1;

@group(0) @binding(0) var<storage, read> COLS: array<f32>;
@group(0) @binding(1) var<storage, read> BIAS: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;

// The product in `row` at output column offset tx = ox + pw - kx*dw (ix = tx / sw), zero where none lands there.
fn tap(row: u32, tx: i32, w: i32) -> f32 {
    if (tx < 0 || srem(tx, SW) != 0 || tx / SW >= w) { return 0.0; }
    return COLS[row + u32(tx / SW)];
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let oh = pu(2u);
    let ow = pu(3u);
    let ow4 = pu(19u);
    let s = gid.x;
    let nm = gid.y + gid.z * nwg.y;  // n * M + m
    if (s >= oh * ow4 || nm >= pu(0u)) { return; }
    let oy = udiv(s, ow4, pf(20u));
    let ox = (s - oy * ow4) * 4u;
    let h = pi(4u);
    let w = pi(5u);
    let plane = u32(h * w);
    var acc = vec4<f32>(0.0);
    for (var ky = 0u; ky < KH; ky++) {
        let ty = i32(oy) + pi(10u) - i32(ky) * pi(12u);
        if (ty < 0 || srem(ty, SH) != 0 || ty / SH >= h) { continue; }
        let iy = ty / SH;
        for (var kx = 0u; kx < KW; kx++) {
            let row = ((nm * KH + ky) * KW + kx) * plane + u32(iy * w);
            let tx = i32(ox) + pi(11u) - i32(kx) * pi(13u);
            acc += vec4<f32>(tap(row, tx, w), tap(row, tx + 1, w), tap(row, tx + 2, w), tap(row, tx + 3, w));
        }
    }
    if (pu(14u) != 0u) {
        let channels = pu(21u);
        acc += vec4<f32>(BIAS[nm - udiv(nm, channels, pf(22u)) * channels]);
    }
    let alpha = pf(15u);
    let beta = pf(16u);
    let gamma = pf(17u);
    let yi = (nm * oh + oy) * ow + ox + pu(18u);
    for (var j = 0u; j < 4u; j++) {
        if (ox + j >= ow) { break; }
        let v = acc[j];
        Y[yi + j] = {{ACT}};
    }
}
