// MaxPool with its Indices output on channels-blocked textures (pixel/pool_window.wgsl has the params): per
// channel lane, the first window tap holding the maximum (padding counts as the lowest value, as the CPU
// kernel pads), and its flat index into the unpadded (N, C, D...) input, the spatial dims row-major
// (storage_order 0) or column-major (1). Two render targets: the values and the indices (rgba32sint).
#include "common/params.wgsl"
#include "common/math.wgsl"
#include "pixel/fullscreen.wgsl"
#include "pixel/lanes.wgsl"

@group(0) @binding(0) var X: texture_2d<{{T}}>;
@group(0) @binding(1) var<uniform> params: Params;

{{KIND}}

#include "pixel/pool_window.wgsl"

struct Out {
    @location(0) y: vec4<{{T}}>,
    @location(1) i: vec4<i32>,
}

@fragment
fn fs_main(@builtin(position) position: vec4<f32>) -> Out {
    var out: Out;
    let site = pool_site(position);
    if (!site.ok) { return out; }
    let in_d = site.in_d;
    let start = site.start;
    let dil = site.dil;
    var best = pool_lowest();
    var at = vec4<i32>(0);
    var first = true;
    let by_columns = pu(28u) != 0u;
    let nd = pu(29u);
    for (var k0 = 0; k0 < KD0; k0++) {
        for (var k1 = 0; k1 < KD1; k1++) {
            for (var k2 = 0; k2 < KD2; k2++) {
                let p = start + vec3<i32>(k0, k1, k2) * dil;
                var v = pool_lowest();
                if (all(p >= vec3<i32>(0)) && all(p < in_d)) {
                    v = pool_load(site.plane, p, in_d);
                }
                var flat = (p.x * in_d.y + p.y) * in_d.z + p.z;
                if (by_columns) {
                    // column-major over the pool's own spatial dims (the leading ones of size 1 are padding)
                    if (nd == 1u) { flat = p.z; }
                    else if (nd == 2u) { flat = p.y + in_d.y * p.z; }
                    else { flat = p.x + in_d.x * (p.y + in_d.y * p.z); }
                }
                let better = (v > best) | vec4<bool>(first);
                best = select(best, v, better);
                at = select(at, vec4<i32>(flat), better);
                first = false;
            }
        }
    }
    // flat index: ((n * C + c) * spatial + position); plane = n * CB + cb
    let cb = site.plane % pu(25u);
    let n = site.plane / pu(25u);
    let spatial = in_d.x * in_d.y * in_d.z;
    let channel = vec4<i32>(vec4<u32>(n * pu(27u) + cb * 4u) + vec4<u32>(0u, 1u, 2u, 3u));
    let mask = lane_mask(site.lanes);
    out.y = select(vec4<{{T}}>(), best, mask);
    out.i = select(vec4<i32>(0), channel * spatial + at, mask);
    return out;
}
