// Resize with at most two interpolated axes (the usual NCHW / NHWC case), one invocation per output element.
// The input is viewed as (outer, A, mid, B, inner) with A and B the interpolated axes (A may be a dummy of
// size 1 with one tap of weight 1); the output is (outer, A', mid, B', inner). Per output coordinate on A and
// B the host computed T source taps (clamped), their weights, an "outside" flag (tf_crop_and_resize) and the
// divisor of that axis' pass (cubic with exclude_outside; else 1), stored in TB as
//   [taps (out * T) | weight bits (out * T) | outside (out) | divisor bits (out)]
// (image.resize_plan, the CPU kernel's own tables). Override KIND says how the taps combine, in ONNX
// Runtime's float order (image.py):
//   0 nearest: one tap copied as is (any dtype);
//   1 corners (linear): sum over (ta, tb), tb fastest, from the first term, of (wb * wa) * x;
//   2 passes (cubic): acc = 0; per ta: part = 0; part += x * wb / db over tb; acc += part * wa / da.
// Every product that is added goes through opaque() (math.wgsl), so no driver can contract it with the
// addition into an FMA (WGSL allows that; lavapipe does not do it, other drivers do), and division is
// {{DIV}}, the device's correctly rounded one, only where a divisor is not 1.
// HAS_A / HAS_MID / HAS_INNER skip the divisions of size-1 groups (lavapipe has no SIMD integer division).
// Params: 0 n, 1 inner, 2 B out, 3 mid, 4 A out, 5 B in, 6 A in, 7 A table, 8 A taps,
//         9 B table, 10 B taps, 11 extrapolation value bits, 12 crop flag.
#include "common/params.wgsl"
#include "common/math.wgsl"

override KIND: u32 = 0u;
override HAS_A: u32 = 1u;
override HAS_MID: u32 = 0u;
override HAS_INNER: u32 = 0u;

@group(0) @binding(0) var<storage, read> X: array<{{T}}>;
@group(0) @binding(1) var<storage, read> TB: array<i32>;
@group(0) @binding(2) var<storage, read_write> Y: array<{{T}}>;
@group(0) @binding(3) var<uniform> params: Params;

fn weight(at: u32) -> f32 { return bitcast<f32>(TB[at]); }

// x * w / d, the product rounded on its own and the division skipped where d is 1.
fn pass_term(x: f32, w: f32, d: f32) -> f32 {
    let product = opaque(x * w, opaque_zero());
    if (d == 1.0) { return product; }
    return {{DIV}}(opaque_zero(), product, d);
}

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
    if (KIND == 0u) {
        Y[i] = X[base + u32(TB[ra]) * sa + u32(TB[rb]) * sb];
        return;
    }
    let wa_off = a_out * ta_n;
    let wb_off = b_out * tb_n;
    var acc = 0.0;
    if (KIND == 1u) {
        for (var ta = 0u; ta < ta_n; ta++) {
            let row = base + u32(TB[ra + ta]) * sa;
            let wa = weight(ra + wa_off + ta);
            for (var tb = 0u; tb < tb_n; tb++) {
                let term = opaque((weight(rb + wb_off + tb) * wa) * f32(X[row + u32(TB[rb + tb]) * sb]), opaque_zero());
                acc = select(acc + term, term, ta == 0u && tb == 0u);
            }
        }
    } else {
        let da = weight(pu(7u) + 2u * a_out * ta_n + a_out + a);
        let db = weight(pu(9u) + 2u * b_out * tb_n + b_out + b);
        for (var ta = 0u; ta < ta_n; ta++) {
            let row = base + u32(TB[ra + ta]) * sa;
            var part = 0.0;
            for (var tb = 0u; tb < tb_n; tb++) {
                part = part + pass_term(f32(X[row + u32(TB[rb + tb]) * sb]), weight(rb + wb_off + tb), db);
            }
            acc = acc + pass_term(part, weight(ra + wa_off + ta), da);
        }
    }
    Y[i] = {{T}}(acc);
}
