// Per-row statistics for the normalizations; one invocation per row (rows as in reduce_rows.wgsl).
// Writes MEAN[row] and INV[row], the factor the centred row is multiplied by.
// Params: 0 rows, 1 R, 2 epsilon (f32), 3 1/R (f32), 8..21 the row layout.
// Override STAT: 0 mean and 1/sqrt(var + eps) (two passes), 1 mean and 1/(sqrt(E[x^2] - mean^2) + 1e-9)
// (MeanVarianceNormalization), 2 zero mean and 1/sqrt(E[x^2] + eps) (RMS), 3 zero mean and
// 1/sum|x|, 4 zero mean and 1/sqrt(sum x^2) (Lp norms; a zero norm gives a zero factor).
// Sums run in blocks of BLOCK elements (reduce_gpu.sum_passes): their error grows as BLOCK + R / BLOCK, not as R.
#include "common/params.wgsl"

override STAT: u32 = 0u;
const BLOCK: u32 = 64u;  // reduce_gpu.REDUCE_BLOCK

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read_write> MEAN: array<f32>;
@group(0) @binding(2) var<storage, read_write> INV: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;

#include "compute/reduce_rows.wgsl"
#include "compute/norm_finish.wgsl"

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = flat_index(gid, nwg);
    if (row >= pu(0u)) { return; }
    let r = pu(1u);
    let base = row_base(row);
    var s = 0.0;
    var s2 = 0.0;
    for (var b = 0u; b < r; b += BLOCK) {
        var ps = 0.0;
        var ps2 = 0.0;
        let e = min(r, b + BLOCK);
        for (var k = b; k < e; k++) {
            let v = X[base + row_offset(k)];
            ps += select(v, abs(v), STAT == 3u);
            ps2 += v * v;
        }
        s += ps;
        s2 += ps2;
    }
    var mean = s * pf(3u);
    if (STAT == 0u) {
        s2 = 0.0;
        for (var b = 0u; b < r; b += BLOCK) {
            var ps2 = 0.0;
            let e = min(r, b + BLOCK);
            for (var k = b; k < e; k++) {
                let d = X[base + row_offset(k)] - mean;
                ps2 += d * d;
            }
            s2 += ps2;
        }
    }
    let st = finish_stats(mean, s, s2);
    MEAN[row] = st.x;
    INV[row] = st.y;
}
