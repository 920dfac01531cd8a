// norm_stats.wgsl with one workgroup per row, for few long rows: each invocation sums a strided part
// of the row, the partial sums meet in workgroup memory (one barrier per reduction) and every
// invocation adds them up in the same order. Params and STAT as norm_stats.wgsl.
#include "common/params.wgsl"

override STAT: u32 = 0u;
const BLOCK: u32 = 64u;  // reduce_gpu.REDUCE_BLOCK: an invocation's strided part is summed in blocks of BLOCK

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read_write> MEAN: array<f32>;
@group(0) @binding(2) var<storage, read_write> INV: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;

#include "compute/reduce_rows.wgsl"
#include "compute/norm_finish.wgsl"

var<workgroup> part_a: array<f32, WG>;
var<workgroup> part_b: array<f32, WG>;
var<workgroup> part_c: array<f32, WG>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= pu(0u)) { return; }
    let r = pu(1u);
    let base = row_base(row);
    var s = 0.0;
    var s2 = 0.0;
    for (var b = t; b < r; b += WG * BLOCK) {  // each invocation's strided part, in blocks of BLOCK
        var ps = 0.0;
        var ps2 = 0.0;
        let e = min(r, b + WG * BLOCK);
        for (var k = b; k < e; k += WG) {
            let v = X[base + row_offset(k)];
            ps += select(v, abs(v), STAT == 3u);
            ps2 += v * v;
        }
        s += ps;
        s2 += ps2;
    }
    part_a[t] = s;
    part_b[t] = s2;
    workgroupBarrier();
    s = 0.0;
    s2 = 0.0;
    for (var j = 0u; j < WG; j++) {
        s += part_a[j];
        s2 += part_b[j];
    }
    let mean = s * pf(3u);
    if (STAT == 0u) {
        var c = 0.0;
        for (var b = t; b < r; b += WG * BLOCK) {
            var pc = 0.0;
            let e = min(r, b + WG * BLOCK);
            for (var k = b; k < e; k += WG) {
                let d = X[base + row_offset(k)] - mean;
                pc += d * d;
            }
            c += pc;
        }
        part_c[t] = c;
        workgroupBarrier();
        s2 = 0.0;
        for (var j = 0u; j < WG; j++) { s2 += part_c[j]; }
    }
    if (t == 0u) {
        let st = finish_stats(mean, s, s2);
        MEAN[row] = st.x;
        INV[row] = st.y;
    }
}
