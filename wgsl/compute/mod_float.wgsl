// Float Mod with numpy broadcasting: C fmod (FMOD = 1, the dividend's sign) or numpy's mod
// (FMOD = 0, the divisor's sign), both exact. WGSL's % is x - y * trunc(x / y), which loses
// precision for large quotients and gives NaN for an infinite divisor.
// Params: as binary.wgsl (0 n, 1 rank, 2..7 out shape, 8..13 a strides, 14..19 b strides, 20 same-shape).
#include "common/params.wgsl"
#include "common/broadcast.wgsl"

override FMOD: u32 = 1u;

@group(0) @binding(0) var<storage, read> A: array<f32>;
@group(0) @binding(1) var<storage, read> B: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;

fn is_nan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn is_inf(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u; }
fn with_sign_of(x: f32, s: f32) -> f32 {
    return bitcast<f32>((bitcast<u32>(x) & 0x7fffffffu) | (bitcast<u32>(s) & 0x80000000u));
}

// fmod by long division on the exponents: each step subtracts the largest d * 2^k not above r,
// which is exact (Sterbenz), and lowers r's exponent, so it ends within ~280 steps.
fn fmod_exact(a: f32, b: f32) -> f32 {
    if (is_nan(a) || is_nan(b) || is_inf(a) || b == 0.0) { return bitcast<f32>(0x7fc00000u); }
    if (is_inf(b)) { return a; }
    var r = abs(a);
    let d = abs(b);
    let ed = frexp(d).exp;
    for (var step = 0; step < 300 && r >= d; step++) {
        var t = ldexp(d, max(frexp(r).exp - ed, 0));
        if (t > r) { t = t * 0.5; }
        r = r - t;
    }
    return with_sign_of(r, a);
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let o = broadcast_offsets(i);
    let b = B[o.y];
    var r = fmod_exact(A[o.x], b);
    if (FMOD == 0u && !is_nan(r)) {
        // numpy: a non-zero remainder takes the divisor's sign; zero becomes +-0 like the divisor.
        if (r == 0.0) {
            r = with_sign_of(0.0, b);
        } else if ((r < 0.0) != (b < 0.0)) {
            r = r + b;
        }
    }
    Y[i] = r;
}
