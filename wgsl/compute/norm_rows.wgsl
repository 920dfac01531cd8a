// A statistic-based normalization fused into one dispatch for contiguous rows: one workgroup per row
// (row = workgroup index) sums strided parts of the row, the partial sums meet in workgroup memory
// (one barrier per reduction, every invocation adds them in the same order), then the workgroup
// writes its normalized row, y = (x - mean) * inv (* scale) (+ bias), and invocation 0 the row's
// MEAN and INV. STAT as norm_stats.wgsl.
// Params: 0 rows, 1 R, 2 epsilon (f32), 3 1/R (f32), 4 parameter rows (pmod), 5 A, 6 S.
// Override PMODE, where scale/bias come from: 0 none (bindings repeat X), 1 index k (position in the
// row), 2 index row % pmod (one value per row), 3 index (row % pmod) * A + k / S (the row is A runs
// of S elements, one value per run: GroupNormalization's channels). HAS_BIAS: a bias is added.
#include "common/params.wgsl"

override STAT: u32 = 0u;
const BLOCK: u32 = 64u;  // reduce_gpu.REDUCE_BLOCK: an invocation's strided part is summed in blocks of BLOCK
override PMODE: u32 = 0u;
override HAS_BIAS: bool = true;

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read> SCALE: array<f32>;
@group(0) @binding(2) var<storage, read> BIAS: array<f32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;
@group(0) @binding(4) var<storage, read_write> MEAN: array<f32>;
@group(0) @binding(5) var<storage, read_write> INV: array<f32>;
@group(0) @binding(6) var<uniform> params: Params;

#include "compute/norm_finish.wgsl"

var<workgroup> part_a: array<f32, WG>;
var<workgroup> part_b: array<f32, WG>;
var<workgroup> part_c: array<f32, WG>;

fn affine(v: f32, p: u32) -> f32 {
    var y = v * SCALE[p];
    if (HAS_BIAS) { y += BIAS[p]; }
    return y;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= pu(0u)) { return; }
    let r = pu(1u);
    let base = row * r;
    var s = 0.0;
    var s2 = 0.0;
    for (var b = t; b < r; b += WG * BLOCK) {  // each invocation's strided part, in blocks of BLOCK
        var ps = 0.0;
        var ps2 = 0.0;
        let e = min(r, b + WG * BLOCK);
        for (var k = b; k < e; k += WG) {
            let v = X[base + k];
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
    let mean0 = s * pf(3u);
    if (STAT == 0u) {
        var c = 0.0;
        for (var b = t; b < r; b += WG * BLOCK) {
            var pc = 0.0;
            let e = min(r, b + WG * BLOCK);
            for (var k = b; k < e; k += WG) {
                let d = X[base + k] - mean0;
                pc += d * d;
            }
            c += pc;
        }
        part_c[t] = c;
        workgroupBarrier();
        s2 = 0.0;
        for (var j = 0u; j < WG; j++) { s2 += part_c[j]; }
    }
    let st = finish_stats(mean0, s, s2);
    let mean = st.x;
    let inv = st.y;
    if (t == 0u) {
        MEAN[row] = mean;
        INV[row] = inv;
    }
    if (PMODE == 0u) {
        for (var k = t; k < r; k += WG) { Y[base + k] = (X[base + k] - mean) * inv; }
    } else if (PMODE == 1u) {
        for (var k = t; k < r; k += WG) { Y[base + k] = affine((X[base + k] - mean) * inv, k); }
    } else if (PMODE == 2u) {
        let p = row % pu(4u);
        for (var k = t; k < r; k += WG) { Y[base + k] = affine((X[base + k] - mean) * inv, p); }
    } else {
        let a = pu(5u);
        let sz = pu(6u);
        let p0 = (row % pu(4u)) * a;
        for (var j = 0u; j < a; j++) {
            let off = base + j * sz;
            for (var k = t; k < sz; k += WG) { Y[off + k] = affine((X[off + k] - mean) * inv, p0 + j); }
        }
    }
}
