// Columns of a 2-D convolution for one group: cols[n, kk, p] = x[n, c0 + c, oy*sh - ph + ky*dh,
// ox*sw - pw + kx*dw] with kk = (c, ky, kx) and p = (oy, ox); zero outside the input and in the
// padding rows kk >= K and columns p >= P (rows are padded to vec4 multiples for the matmul).
// One invocation writes one output row (n, kk, oy): integer division is slow on lavapipe, so the
// index arithmetic is done once per row rather than per element.
// A convolution whose columns would pass the binding limit runs in blocks of output rows and images:
// COLS then holds the block's columns, n and oy counting from image n0 (param 20) and output row oy0
// (param 19), with oh (param 18) and P the block's.
// Params: 0 rows (N*Kp*oh), 1 Kp, 2 Pp, 3 K, 4 P, 5 C (input channels), 6 H, 7 W, 8 kh, 9 kw, 10 sh,
// 11 sw, 12 ph, 13 pw, 14 dh, 15 dw, 16 ow, 17 c0 (first channel of the group), 18 oh, 19 oy0, 20 n0.
#include "common/params.wgsl"

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read_write> COLS: array<f32>;
@group(0) @binding(2) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let oh = pu(18u);
    let ow = pu(16u);
    let kp = pu(1u);
    let pp = pu(2u);
    let oy = i % oh;
    let kk = (i / oh) % kp;
    let n = i / (oh * kp);
    let out = (n * kp + kk) * pp + oy * ow;
    if (oy == oh - 1u) {
        // This row's invocation also zeroes the row's padding columns P..Pp-1.
        for (var p = pu(4u); p < pp; p++) { COLS[(n * kp + kk) * pp + p] = 0.0; }
    }
    let h = pi(6u);
    let w = pi(7u);
    let kw = pu(9u);
    let kh = pu(8u);
    let kx = kk % kw;
    let ky = (kk / kw) % kh;
    let c = kk / (kw * kh);
    let iy = i32((oy + pu(19u)) * pu(10u) + ky * pu(14u)) - pi(12u);
    if (kk >= pu(3u) || iy < 0 || iy >= h) {
        for (var ox = 0u; ox < ow; ox++) { COLS[out + ox] = 0.0; }
        return;
    }
    let row = (((n + pu(20u)) * pu(5u) + pu(17u) + c) * u32(h) + u32(iy)) * u32(w);
    let sw = pi(11u);
    var ix = i32(kx * pu(15u)) - pi(13u);
    for (var ox = 0u; ox < ow; ox++) {
        var v = 0.0;
        if (ix >= 0 && ix < w) { v = X[row + u32(ix)]; }
        COLS[out + ox] = v;
        ix += sw;
    }
}
