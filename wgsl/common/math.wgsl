// Math helpers WGSL lacks: erf (Abramowitz-Stegun 7.1.26, |error| < 1.5e-7) and a safe tanh.
fn erf_approx(x: f32) -> f32 {
    let s = sign(x);
    let a = abs(x);
    let t = 1.0 / (1.0 + 0.3275911 * a);
    let y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * exp(-a * a);
    return s * y;
}

fn tanh_safe(x: f32) -> f32 {
    // tanh of large |x| overflows exp() in some drivers' builtin; clamp first.
    return tanh(clamp(x, -20.0, 20.0));
}

// log(1 + y) without the cancellation of forming 1 + y for small y (Goldberg's correction).
fn log1p_accurate(y: f32) -> f32 {
    let u = 1.0 + y;
    return select(log(u) * y / (u - 1.0), y, u == 1.0);
}

fn softplus(x: f32) -> f32 {
    // max(x, 0) + log1p(exp(-|x|)) never overflows and keeps precision for large negative x.
    return max(x, 0.0) + log1p_accurate(exp(-abs(x)));
}

// pow() with a negative base and an integral exponent, as numpy computes it (WGSL's pow is NaN there).
fn pow_signed(a: f32, b: f32) -> f32 {
    let m = pow(abs(a), b);
    if (a >= 0.0) { return m; }
    if (floor(b) != b) { return bitcast<f32>(0x7fc00000u); }
    let odd = (abs(b) % 2.0) == 1.0;
    return select(m, -m, odd);
}
