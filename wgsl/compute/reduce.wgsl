// out[o] = reduction of the input elements of row o (or of a chunk of it when split in stages).
// Params: 0 n (rows x chunks), 1 R (row length), 2 L (chunk length), 3 P (chunks per row),
//         4 scale (f32, the mean's 1/R), 8..21 the row layout (see reduce_rows.wgsl).
// Override constants: OP 0 sum, 1 prod, 2 max, 3 min, 4 log-sum-exp; PRE 0 x, 1 |x|, 2 x*x;
//                     POST 0 none, 1 * scale, 2 sqrt, 3 log, 4 / R (ONNX Runtime's mean);
//                     ORDER 1: a sum of a contiguous row of the input in ONNX Runtime's order (ort_sum).
// Sums (and log-sum-exp's sum of exp) run in blocks of BLOCK elements, each block's sum added to the total:
// the rounding error grows as BLOCK + L / BLOCK, not as L (reduce_gpu._reduce_passes counts the loops).
#include "common/params.wgsl"
#include "common/math.wgsl"

override OP: u32 = 0u;
override PRE: u32 = 0u;
override POST: u32 = 0u;
override ORDER: u32 = 0u;
const BLOCK: u32 = 64u;  // reduce_gpu.REDUCE_BLOCK

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
@group(0) @binding(2) var<uniform> params: Params;

#include "compute/reduce_rows.wgsl"

fn is_nan(v: f32) -> bool { return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u; }

fn load(base: u32, k: u32) -> f32 {
    let v = X[base + row_offset(k)];
    if (PRE == 1u) { return abs(v); }
    if (PRE == 2u) { return v * v; }
    return v;
}

fn packet(base: u32, k: u32) -> vec4<f32> {
    return vec4<f32>(X[base + k], X[base + k + 1u], X[base + k + 2u], X[base + k + 3u]);
}

// The sum of the n contiguous elements from X[base] as ONNX Runtime's CPU kernels add them (Eigen's SSE redux; the
// cpu backend's ops/numeric.py ort_row_sums, bit for bit): the elements before the first 16-byte boundary set aside,
// packets of 4 into two accumulators in turn, an odd last packet into the first, the lanes reduced as
// (x + z) + (y + w), then the set-aside head and the tail past the last packet added one by one.
fn ort_sum(base: u32, n: u32) -> f32 {
    let start = min((4u - base % 4u) % 4u, n);
    let packets = (n - start) / 4u;
    if (packets == 0u) {
        var t = X[base];
        for (var k = 1u; k < n; k++) { t += X[base + k]; }
        return t;
    }
    var p0 = packet(base, start);
    if (packets > 1u) {
        var p1 = packet(base, start + 4u);
        let pairs = packets / 2u * 2u;
        for (var j = 2u; j < pairs; j += 2u) {
            p0 += packet(base, start + 4u * j);
            p1 += packet(base, start + 4u * j + 4u);
        }
        p0 += p1;
        if (packets > pairs) { p0 += packet(base, start + 4u * pairs); }
    }
    var t = (p0.x + p0.z) + (p0.y + p0.w);
    for (var k = 0u; k < start; k++) { t += X[base + k]; }
    for (var k = start + 4u * packets; k < n; k++) { t += X[base + k]; }
    return t;
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let chunks = pu(3u);
    let base = row_base(i / chunks);
    let k0 = (i % chunks) * pu(2u);
    let k1 = min(pu(1u), k0 + pu(2u));
    var acc: f32;
    if (ORDER == 1u) {
        acc = ort_sum(base, pu(1u));
    } else if (OP == 0u) {
        acc = 0.0;
        for (var b = k0; b < k1; b += BLOCK) {
            var part = 0.0;
            let e = min(k1, b + BLOCK);
            for (var k = b; k < e; k++) { part += load(base, k); }
            acc += part;
        }
    } else if (OP == 1u) {
        acc = 1.0;
        for (var k = k0; k < k1; k++) { acc *= load(base, k); }
    } else if (OP == 2u) {
        acc = bitcast<f32>(0xff800000u);
        for (var k = k0; k < k1; k++) {
            let v = load(base, k);
            if (v > acc || is_nan(v)) { acc = v; }
            if (is_nan(acc)) { break; }
        }
    } else if (OP == 3u) {
        acc = bitcast<f32>(0x7f800000u);
        for (var k = k0; k < k1; k++) {
            let v = load(base, k);
            if (v < acc || is_nan(v)) { acc = v; }
            if (is_nan(acc)) { break; }
        }
    } else {
        // log(sum(exp(x - peak))) + peak, the peak taken as 0 when it is not finite (as the CPU kernel).
        var peak = bitcast<f32>(0xff800000u);
        for (var k = k0; k < k1; k++) {
            let v = load(base, k);
            if (v > peak || is_nan(v)) { peak = v; }
        }
        if (is_nan(peak) || abs(peak) == bitcast<f32>(0x7f800000u)) { peak = 0.0; }
        var total = 0.0;
        for (var b = k0; b < k1; b += BLOCK) {
            var part = 0.0;
            let e = min(k1, b + BLOCK);
            for (var k = b; k < e; k++) { part += exp_accurate(load(base, k) - peak); }
            total += part;
        }
        acc = log(total) + peak;
    }
    if (POST == 1u) { acc = acc * pf(4u); }
    if (POST == 2u) { acc = sqrt(acc); }
    if (POST == 3u) { acc = log(acc); }
    if (POST == 4u) { acc = div_rounded(opaque_zero(), acc, f32(pu(1u))); }  // a correctly rounded quotient
    Y[i] = acc;
}
