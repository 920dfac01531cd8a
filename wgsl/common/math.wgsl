// Math helpers WGSL lacks or drivers approximate coarsely: an accurate exp, erf (Abramowitz-Stegun
// 7.1.26, |error| < 1.5e-7), expm1, log1p, tanh, softplus.

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

// tanh keeping relative precision near 0 (drivers' builtins lose it there) and never overflowing.
fn tanh_safe(x: f32) -> f32 {
    let t = expm1_accurate(-2.0 * min(abs(x), 20.0));
    return sign(x) * (-t / (t + 2.0));
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

// pow() with a negative base and an integral exponent, as numpy computes it (WGSL's pow is NaN there).
fn pow_signed(a: f32, b: f32) -> f32 {
    let m = pow(abs(a), b);
    if (a >= 0.0) { return m; }
    if (floor(b) != b) { return bitcast<f32>(0x7fc00000u); }
    let odd = (abs(b) % 2.0) == 1.0;
    return select(m, -m, odd);
}
