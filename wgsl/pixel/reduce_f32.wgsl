// reduce.wgsl's float32 functions: per op (sum, prod, max, min; NaN wins max and min, as numpy has it) its
// identity, its combination of two accumulators and hz_ of an accumulator's four lanes; PRE of each element
// (0 v, 1 |v|, 2 v^2, 3 |v|^p, 4 exp(v)) and POST of the result (0 a, 1 a * scale, 2 sqrt(a), 3 log(a),
// 4 a^(1/p), 5 1 / sqrt(a * scale + eps)), chosen by override constants; the parameters are words 24-27.
override PRE: u32 = 0u;
override POST: u32 = 0u;

fn identity_sum() -> vec4<f32> { return vec4<f32>(0.0); }
fn identity_prod() -> vec4<f32> { return vec4<f32>(1.0); }
fn identity_max() -> vec4<f32> { return vec4<f32>(bitcast<f32>(0xff800000u)); }
fn identity_min() -> vec4<f32> { return vec4<f32>(bitcast<f32>(0x7f800000u)); }

fn cmb_sum(a: vec4<f32>, v: vec4<f32>) -> vec4<f32> { return a + v; }
fn cmb_prod(a: vec4<f32>, v: vec4<f32>) -> vec4<f32> { return a * v; }
fn cmb_max(a: vec4<f32>, v: vec4<f32>) -> vec4<f32> { return select(a, v, (v > a) | is_nan4(v)); }
fn cmb_min(a: vec4<f32>, v: vec4<f32>) -> vec4<f32> { return select(a, v, (v < a) | is_nan4(v)); }

fn hz_sum(a: vec4<f32>) -> f32 {
    return cmb_sum(cmb_sum(vec4<f32>(a.x), vec4<f32>(a.y)), cmb_sum(vec4<f32>(a.z), vec4<f32>(a.w))).x;
}
fn hz_prod(a: vec4<f32>) -> f32 {
    return cmb_prod(cmb_prod(vec4<f32>(a.x), vec4<f32>(a.y)), cmb_prod(vec4<f32>(a.z), vec4<f32>(a.w))).x;
}
fn hz_max(a: vec4<f32>) -> f32 {
    return cmb_max(cmb_max(vec4<f32>(a.x), vec4<f32>(a.y)), cmb_max(vec4<f32>(a.z), vec4<f32>(a.w))).x;
}
fn hz_min(a: vec4<f32>) -> f32 {
    return cmb_min(cmb_min(vec4<f32>(a.x), vec4<f32>(a.y)), cmb_min(vec4<f32>(a.z), vec4<f32>(a.w))).x;
}

fn pre(v: vec4<f32>) -> vec4<f32> {
    if (PRE == 1u) { return abs(v); }
    if (PRE == 2u) { return v * v; }
    if (PRE == 3u) { return pow(abs(v), vec4<f32>(pf(25u))); }
    if (PRE == 4u) { return exp4(v); }
    return v;
}

fn post(a: vec4<f32>) -> vec4<f32> {
    if (POST == 1u) { return a * pf(24u); }
    if (POST == 2u) { return sqrt(a); }
    if (POST == 3u) { return log(a); }
    if (POST == 4u) { return pow(a, vec4<f32>(pf(26u))); }
    if (POST == 5u) { return vec4<f32>(1.0) / sqrt(a * pf(24u) + pf(27u)); }
    return a;
}

// The log-sum-exp's peak: the max, or 0 where it is not finite (a row of -inf, inf or NaN).
fn finite_or_zero(a: vec4<f32>) -> vec4<f32> {
    return select(a, vec4<f32>(0.0), is_nan4(a) | (abs(a) == vec4<f32>(bitcast<f32>(0x7f800000u))));
}

fn splat(a: f32) -> vec4<f32> { return vec4<f32>(a); }
