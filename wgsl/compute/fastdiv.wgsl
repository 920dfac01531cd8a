// Included by the tensor-family kernels: integer division without the integer divider.
// lavapipe runs WGSL's u32 `/` and `%` one lane at a time (no SIMD integer division on x86), which
// made index decomposition cost 5-10x the memory traffic; an f32 estimate corrected to the exact
// quotient stays vectorized. Exact for every n < 2^31 and d >= 1.
fn divmod(n: u32, d: u32) -> vec2<u32> {
    var q = u32(f32(n) / f32(d));
    var r = i32(n) - i32(q * d);
    // The estimate is off by at most a few units (24-bit mantissa); step to the exact quotient.
    while (r < 0) { q -= 1u; r += i32(d); }
    while (r >= i32(d)) { q += 1u; r -= i32(d); }
    return vec2<u32>(q, u32(r));
}
