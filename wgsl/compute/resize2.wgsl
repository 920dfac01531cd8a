// Resize with at most two resized axes (the usual NCHW case), one invocation per output element.
// The input is viewed as (outer, A, mid, B, inner) with A and B the resized axes (A may be a
// dummy of size 1); the output is (outer, A', mid, B', inner). Per output coordinate on A and B
// the host precomputed T source taps (clamped), their weights and, for tf_crop_and_resize,
// an "outside" flag, stored in TB as [taps (out * T) | weight bits (out * T) | outside (out)].
// Overrides: NEAREST (one tap copied as is, any dtype), HAS_A / HAS_MID / HAS_INNER (skip the
// divisions of size-1 groups: lavapipe has no SIMD integer division).
// Params: 0 n, 1 inner, 2 B out, 3 mid, 4 A out, 5 B in, 6 A in, 7 A table, 8 A taps,
//         9 B table, 10 B taps, 11 extrapolation value bits, 12 crop flag.
#include "common/params.wgsl"

override NEAREST: u32 = 1u;
override HAS_A: u32 = 1u;
override HAS_MID: u32 = 0u;
override HAS_INNER: u32 = 0u;

@group(0) @binding(0) var<storage, read> X: array<{{T}}>;
@group(0) @binding(1) var<storage, read> TB: array<i32>;
@group(0) @binding(2) var<storage, read_write> Y: array<{{T}}>;
@group(0) @binding(3) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let inner = pu(1u);
    let b_out = pu(2u);
    let mid = pu(3u);
    let a_out = pu(4u);
    var r = i;
    var k = 0u;
    if (HAS_INNER == 1u) { let q = r / inner; k = r - q * inner; r = q; }
    let qb = r / b_out;
    let b = r - qb * b_out;
    r = qb;
    var m = 0u;
    if (HAS_MID == 1u) { let q = r / mid; m = r - q * mid; r = q; }
    var a = 0u;
    if (HAS_A == 1u) { let q = r / a_out; a = r - q * a_out; r = q; }
    let b_in = pu(5u);
    let a_in = pu(6u);
    // r is now the outer index; element strides of A and B in the input:
    let sb = inner;
    let sa = mid * b_in * inner;
    let base = r * a_in * sa + m * b_in * inner + k;
    let ta_n = pu(8u);
    let tb_n = pu(10u);
    let ra = pu(7u) + a * ta_n;
    let rb = pu(9u) + b * tb_n;
    if (pu(12u) != 0u) {
        if (TB[pu(7u) + 2u * a_out * ta_n + a] != 0 || TB[pu(9u) + 2u * b_out * tb_n + b] != 0) {
            Y[i] = bitcast<{{T}}>(pu(11u));
            return;
        }
    }
    if (NEAREST == 1u) {
        Y[i] = X[base + u32(TB[ra]) * sa + u32(TB[rb]) * sb];
        return;
    }
    let wa_off = a_out * ta_n;
    let wb_off = b_out * tb_n;
    var acc = 0.0;
    for (var ta = 0u; ta < ta_n; ta++) {
        let row = base + u32(TB[ra + ta]) * sa;
        var part = 0.0;
        for (var tb = 0u; tb < tb_n; tb++) {
            part += bitcast<f32>(TB[rb + wb_off + tb]) * f32(X[row + u32(TB[rb + tb]) * sb]);
        }
        acc += bitcast<f32>(TB[ra + wa_off + ta]) * part;
    }
    Y[i] = {{T}}(acc);
}
