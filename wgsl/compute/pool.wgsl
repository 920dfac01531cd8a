// MaxPool / AveragePool / LpPool over 1-3 spatial dims (fewer dims are padded to 3 with size-1
// dims); one invocation per ROW_OUTPUTS consecutive outputs of a row (pool_window.wgsl), looping over each
// one's window; the dispatch grid is (ceil(plane invocations / WG), planes) with planes above 65535 folded into z.
// Params: 0 n outputs, 1..3 input spatial, 4..6 output spatial, 7..9 kernel, 10..12 strides,
//         13..15 dilations, 16..18 begin pads (i32), 19..21 / 22..24 the range of positions an
//         average counts (i32, [lo, hi) per dim), 25 p (f32), 26 1/p (f32), 29 planes (N * C), 30..33 udiv's
//         divisor words of the row's invocations and od1 (pool_window.wgsl).
// Override MODE: 0 max, 1 average, 2 Lp with p = 2, 3 Lp with any p. An average sums in ONNX Runtime's order
// (pool.average_order): one running sum in row-major order, or with COLUMNS each window column's sum down its
// rows and planes first, then the columns'; then a division (average: correctly rounded, see math.wgsl).
// Override P_ONE: an Lp pool with p = 1. KIND: the element type's functions (compute/kind/pool_<T>.wgsl).
#include "common/params.wgsl"
#include "common/math.wgsl"
#include "compute/pool_window.wgsl"

override MODE: u32 = 0u;
override COLUMNS: bool = false;
override P_ONE: bool = false;

@group(0) @binding(0) var<storage, read> X: array<{{T}}>;
@group(0) @binding(1) var<storage, read_write> Y: array<{{T}}>;
@group(0) @binding(2) var<uniform> params: Params;

{{KIND}}

fn pool_value(base: u32, p: vec3<i32>, in_d: vec3<i32>) -> {{T}} {
    return X[base + u32((p.x * in_d.y + p.y) * in_d.z + p.z)];
}

#include "common/pool_columns.wgsl"

// Output i, whose window starts at ``start`` in the plane at ``base``.
fn pool_one(i: u32, base: u32, start: vec3<i32>, dil: vec3<i32>, in_d: vec3<i32>) {
    let lo = vec3<i32>(pi(19u), pi(20u), pi(21u));
    let hi = vec3<i32>(pi(22u), pi(23u), pi(24u));
    var acc = {{T}}(0);
    if (MODE == 0u) { acc = lowest(); }
    var count = 0;
    if (MODE == 1u && COLUMNS) {
        acc = columns_sum(base, start, dil, in_d, lo, hi, &count);
        Y[i] = average(acc, count);
        return;
    }
    for (var k0 = 0; k0 < KD0; k0++) {
        let p0 = start.x + k0 * dil.x;
        let in0 = p0 >= 0 && p0 < in_d.x;
        for (var k1 = 0; k1 < KD1; k1++) {
            let p1 = start.y + k1 * dil.y;
            let in1 = in0 && p1 >= 0 && p1 < in_d.y;
            for (var k2 = 0; k2 < KD2; k2++) {
                let p2 = start.z + k2 * dil.z;
                if (MODE == 1u && p0 >= lo.x && p0 < hi.x && p1 >= lo.y && p1 < hi.y && p2 >= lo.z && p2 < hi.z) {
                    count += 1;
                }
                if (!in1 || p2 < 0 || p2 >= in_d.z) { continue; }
                let v = X[base + u32((p0 * in_d.y + p1) * in_d.z + p2)];
                if (MODE == 0u) {
                    if (v > acc || (is_nan(v) && !is_nan(acc))) { acc = v; }
                } else if (MODE == 1u) {
                    acc += v;
                } else if (MODE == 2u) {
                    acc += v * v;
                } else {
                    acc += lp_term(v);
                }
            }
        }
    }
    if (MODE == 1u) { acc = average(acc, count); }
    if (MODE == 2u) { acc = l2_root(acc); }
    if (MODE == 3u) { acc = lp_root(acc); }
    Y[i] = acc;
}
