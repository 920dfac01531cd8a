// MaxPool / AveragePool / LpPool over 1-3 spatial dims on channels-blocked (N, C, D0, D1, D2) textures: one
// fragment per output texel, four channels at once with vec4 loads, looping over its window
// (pixel/pool_window.wgsl has the params). Override MODE: 0 max, 1 average, 2 Lp with p = 2, 3 Lp with p = 1,
// 4 Lp with any p. Padding lanes (channels past C) and texels past the end are zero. An average sums in ONNX
// Runtime's order (pool.average_order): one running sum in row-major order, or with COLUMNS each window column's
// sum down its rows and planes first, then the columns'; then a division (correctly rounded). KIND: the texel kind's
// functions (pixel/pool_f32.wgsl or pool_i32.wgsl).
#include "common/params.wgsl"
#include "common/math.wgsl"
#include "pixel/fullscreen.wgsl"
#include "pixel/lanes.wgsl"

override MODE: u32 = 0u;
override COLUMNS: bool = false;

@group(0) @binding(0) var X: texture_2d<{{T}}>;
@group(0) @binding(1) var<uniform> params: Params;

#include "pixel/pool_window.wgsl"

{{KIND}}

fn pool_value(plane: u32, p: vec3<i32>, in_d: vec3<i32>) -> vec4<{{T}}> { return pool_load(plane, p, in_d); }

#include "common/pool_columns.wgsl"

@fragment
fn fs_main(@builtin(position) position: vec4<f32>) -> @location(0) vec4<{{T}}> {
    let site = pool_site(position);
    if (!site.ok) { return vec4<{{T}}>(); }
    let in_d = site.in_d;
    let start = site.start;
    let dil = site.dil;
    let lo = vec3<i32>(pi(17u), pi(18u), pi(19u));
    let hi = vec3<i32>(pi(20u), pi(21u), pi(22u));
    var acc = vec4<{{T}}>();
    if (MODE == 0u) { acc = pool_lowest(); }
    var count = 0;
    if (MODE == 1u && COLUMNS) {
        acc = columns_sum(site.plane, start, dil, in_d, lo, hi, &count);
        return select(vec4<{{T}}>(), pool_average(acc, count), lane_mask(site.lanes));
    }
    for (var k0 = 0; k0 < KD0; k0++) {
        let p0 = start.x + k0 * dil.x;
        let in0 = p0 >= 0 && p0 < in_d.x;
        let c0 = p0 >= lo.x && p0 < hi.x;
        for (var k1 = 0; k1 < KD1; k1++) {
            let p1 = start.y + k1 * dil.y;
            let in1 = in0 && p1 >= 0 && p1 < in_d.y;
            let c1 = c0 && p1 >= lo.y && p1 < hi.y;
            for (var k2 = 0; k2 < KD2; k2++) {
                let p2 = start.z + k2 * dil.z;
                if (MODE == 1u && c1 && p2 >= lo.z && p2 < hi.z) { count += 1; }
                if (!in1 || p2 < 0 || p2 >= in_d.z) { continue; }
                let v = pool_load(site.plane, vec3<i32>(p0, p1, p2), in_d);
                if (MODE == 0u) {
                    acc = select(acc, v, (v > acc) | (is_nan4(v) & !is_nan4(acc)));
                } else if (MODE == 1u) {
                    acc += v;
                } else {
                    acc += pool_power(v, MODE);
                }
            }
        }
    }
    var y = acc;
    if (MODE == 1u) { y = pool_average(acc, count); }
    if (MODE == 2u || MODE == 4u) { y = pool_root(acc, MODE); }
    return select(vec4<{{T}}>(), y, lane_mask(site.lanes));
}
