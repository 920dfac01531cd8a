// Exact u32 division by a divisor known only at run time (a uniform word), without WGSL's integer division,
// which lavapipe runs per lane (x86 has no vector integer divide): a plan keeps sizes in uniforms, so one
// pipeline serves every size, at little more than the cost of a divisor baked in as an override constant.
// `rcp` is the divisor's f32 reciprocal, written by the host beside it (backends/gpu/tensors.py udiv_words). Exact for
// n < 2^31 and 1 <= d <= 2^24 (tests/ops/test_udiv.py checks edges and random pairs):
// - q0 = trunc(f32(n) * rcp) is off by at most 3n / 2^24 / d + 1 (three f32 roundings);
// - e = n - q0 * d then lies within 2d + 384 of 0 (an i32), and a second float step brings q within 1;
// - one remainder check ends it.
fn udiv(n: u32, d: u32, rcp: f32) -> u32 {
    var q = u32(f32(n) * rcp);
    let e = i32(n - q * d);
    q = u32(i32(q) + i32(floor(f32(e) * rcp)));
    let r = i32(n - q * d);
    if (r < 0) {
        q = q - 1u;
    } else if (u32(r) >= d) {
        q = q + 1u;
    }
    return q;
}
