// Math helpers WGSL lacks or drivers approximate coarsely: an accurate exp, erf (Abramowitz-Stegun
// 7.1.26, |error| < 1.5e-7), expm1, log1p, tanh, softplus, and a signed remainder.

// Float division. Vulkan lets a driver's a / b be off by 2.5 ulp. NVIDIA's is a * (1 / b): off by an
// ulp in three quotients of ten (5 / 255 among them, which moves a quantized value across a rounding
// tie). div_rounded corrects the quotient by its residual a - q * b, computed exactly without fma
// (not fused there either): q and b are split into 12-bit halves by masking their mantissas, so
// every partial product is exact, and the first difference is exact by Sterbenz's lemma. NVIDIA's
// compiler re-associates that algebra away (the residual then came out as plain fma's: 680 of 4096
// quotients still off), so every step goes through opaque(), an XOR with a zero it cannot see is
// zero; with it, 0 of 4096 were off. Kernels write div_f32(a, b); the recorder turns that into
// div_plain or div_rounded, whichever a probe found exact on the device
// (GPUContext.division_function), with the shader's opaque_zero() as first argument. Infinite,
// NaN and zero quotients are kept as they are.
fn opaque(x: f32, zero: u32) -> f32 {
    return bitcast<f32>(bitcast<u32>(x) ^ zero);
}
fn split_high(x: f32) -> f32 {
    return bitcast<f32>(bitcast<u32>(x) & 0xfffff000u);
}
fn div_plain(zero: u32, a: f32, b: f32) -> f32 {
    return a / b;
}
fn div_rounded(zero: u32, a: f32, b: f32) -> f32 {
    let q = opaque(a / b, zero);
    let qh = opaque(split_high(q), zero);
    let ql = opaque(q - qh, zero);
    let bh = opaque(split_high(b), zero);
    let bl = opaque(b - bh, zero);
    let r1 = opaque(a - opaque(qh * bh, zero), zero);
    let r2 = opaque(r1 - opaque(qh * bl, zero), zero);
    let r3 = opaque(r2 - opaque(ql * bh, zero), zero);
    let r = opaque(r3 - opaque(ql * bl, zero), zero);
    return select(q, q + r / b, abs(q) <= 3.4028235e38 && q != 0.0);
}

// WGSL's signed a % b (truncated, the dividend's sign) for every a and b != 0. naga lowers i32 % to
// SPIR-V OpSRem, which Vulkan leaves undefined for a negative operand: NVIDIA's driver returns the
// unsigned remainder there (-1 % 3 gives 0; gfx-rs/wgpu#8191), lavapipe the WGSL one. Division
// truncates on every driver, so the remainder is rebuilt from it. Use this, never %, on i32.
fn srem(a: i32, b: i32) -> i32 {
    return a - b * (a / b);
}

// exp with ~1 ulp accuracy: some drivers' builtin (lavapipe's) is off by up to ~2e-3 relative, which
// activations like Mish and Sigmoid carry into their tails. x = n ln2 + r with ln2 split in two
// (Cody-Waite), |r| <= ln2 / 2, exp(r) by its degree-6 Taylor polynomial, then scaled by 2^n.
fn exp_accurate(x: f32) -> f32 {
    if (x > 88.72283) { return bitcast<f32>(0x7f800000u); }
    if (x < -103.97208) { return 0.0; }
    let n = round(x * 1.4426950408889634);
    let r = (x - n * 0.693145751953125) - n * 1.428606765330187e-06;
    let p = 1.0 + r * (1.0 + r * (0.5 + r * (0.16666667 + r * (0.041666668 + r * (0.008333334 + r * 0.0013888889)))));
    return ldexp(p, i32(n));
}
fn erf_approx(x: f32) -> f32 {
    let s = sign(x);
    let a = abs(x);
    let t = 1.0 / (1.0 + 0.3275911 * a);
    let y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * exp_accurate(-a * a);
    return s * y;
}

// exp(x) - 1 without cancellation near 0 (Kahan's trick).
fn expm1_accurate(x: f32) -> f32 {
    let u = exp_accurate(x);
    if (u == 1.0) { return x; }
    let um1 = u - 1.0;
    if (um1 == -1.0) { return -1.0; }
    return um1 * x / log(u);
}

// NaN test on the bits: drivers compile x != x as false (lavapipe does), and min, max, clamp and sign
// of a NaN give a number. Activations keep a NaN input as NaN with it, as numpy does.
fn is_nan_f32(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

// tanh keeping relative precision near 0 (drivers' builtins lose it there) and never overflowing.
fn tanh_safe(x: f32) -> f32 {
    let t = expm1_accurate(-2.0 * min(abs(x), 20.0));
    return select(sign(x) * (-t / (t + 2.0)), x, is_nan_f32(x));
}

// log(1 + y) accurate for small y without trusting the builtin log near 1 (coarse on some drivers):
// log1p(y) = 2 atanh(s), s = y / (2 + y), by its series while |y| < 0.1 (|s| < 0.05, error < 1e-12).
fn log1p_accurate(y: f32) -> f32 {
    if (abs(y) >= 0.1) { return log(1.0 + y); }
    let s = y / (2.0 + y);
    let s2 = s * s;
    return 2.0 * s * (1.0 + s2 * (0.33333334 + s2 * (0.2 + s2 * 0.14285715)));
}

fn softplus(x: f32) -> f32 {
    // max(x, 0) + log1p(exp(-|x|)) never overflows and keeps precision for large negative x.
    return max(x, 0.0) + log1p_accurate(exp_accurate(-abs(x)));
}

// pow() as numpy (C99) computes it: WGSL's pow is exp2(b * log2(a)), NaN for a negative base and
// undefined at the edges (lavapipe gives 0 for 0^0, 0^-1 and NaN^1). x^0 and 1^y are 1 even for a NaN
// operand, any other NaN gives NaN; a negative base takes an integral exponent (the sign from its
// parity) and gives NaN for any other; zeros and infinities follow C99's table.
fn pow_signed(a: f32, b: f32) -> f32 {
    let inf = bitcast<f32>(0x7f800000u);
    if (b == 0.0 || a == 1.0) { return 1.0; }
    if (is_nan_f32(a) || is_nan_f32(b)) { return bitcast<f32>(0x7fc00000u); }
    if (abs(b) == inf) {
        if (abs(a) == 1.0) { return 1.0; }
        return select(0.0, inf, (abs(a) > 1.0) == (b > 0.0));
    }
    let integral = floor(b) == b;
    let odd = integral && (abs(b) % 2.0) == 1.0;
    let negative = (bitcast<u32>(a) & 0x80000000u) != 0u;  // -0.0 too
    if (a == 0.0 || abs(a) == inf) {
        let big = (a == 0.0) == (b < 0.0);  // 0^-y and inf^y are infinite, 0^y and inf^-y zero
        let m = select(0.0, inf, big);
        return select(m, -m, negative && odd);
    }
    if (negative && !integral) { return bitcast<f32>(0x7fc00000u); }
    let m = pow(abs(a), b);
    return select(m, -m, negative && odd);
}

// x rounded to the nearest float16 value (ties to even; float16 subnormals kept; past 65504 to infinity), held
// in an f32: how float16 tensors are stored (widened). Done on the bits: pack2x16float leaves values outside the
// float16 range indeterminate, and its rounding mode is the implementation's.
fn round_to_f16(x: f32) -> f32 {
    let bits = bitcast<u32>(x);
    let sign = bits & 0x80000000u;
    let a = bits & 0x7fffffffu;
    if (a >= 0x7f800000u) { return x; }  // inf, NaN
    if (a >= 0x477ff000u) { return bitcast<f32>(sign | 0x7f800000u); }  // rounds past 65504
    if (a < 0x38800000u) {
        // Below float16's smallest normal (2^-14) its grid step is 2^-24: scale, round to even, scale back (exact).
        let r = round(bitcast<f32>(a) * 16777216.0) * (1.0 / 16777216.0);
        return bitcast<f32>(sign | bitcast<u32>(r));
    }
    let odd = (a >> 13u) & 1u;  // keep 10 mantissa bits, ties to even
    return bitcast<f32>(sign | ((a + 0xfffu + odd) & 0xffffe000u));
}

// x wrapped to a narrow integer type held in an i32 (two's complement, as numpy's and C's conversions wrap):
// `bits` 8 or 16, `signed_` 1 for int8/int16.
// A float cast to a 32-bit (or narrower) integer, as on every backend (ops/cast.py float_to_int): truncated toward
// zero inside int32's range; NaN, infinities and values past the range give -2^31 (x86's "integer indefinite",
// which numpy and ONNX Runtime give there), never the saturated 2147483520 of WGSL's i32().
fn f32_to_i32(x: f32) -> i32 {
    if (x >= -2147483648.0 && x < 2147483648.0) { return i32(x); }
    return bitcast<i32>(0x80000000u);
}

fn wrap_int(x: i32, bits: u32, signed_: u32) -> i32 {
    let shift = 32u - bits;
    if (signed_ == 1u) { return (x << shift) >> shift; }
    return bitcast<i32>(bitcast<u32>(x << shift) >> shift);
}
