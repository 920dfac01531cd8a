// Exact float remainder (C fmod, the dividend's sign) and the helpers it needs, shared by gpu-compute's
// compute/mod_float.wgsl and gpu-pixel's Mod. WGSL's % is x - y * trunc(x / y), which loses precision for large
// quotients and gives NaN for an infinite divisor.
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
