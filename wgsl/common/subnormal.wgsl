// Float arithmetic that keeps subnormal values where the shader runs with denormals flushed: a fragment shader on
// lavapipe runs on rasterizer threads that set the CPU's denormals-are-zero and flush-to-zero flags (D3D10's float
// rules), so 1e-40 * 1.0 gives 0 and 1.0 / 1.1754942e-38 gives inf there, where the cpu backend (numpy), ONNX
// Runtime and the compute shaders keep them. Moves (loads, stores, select, bitcast) are never flushed, so these
// functions read and write subnormals through their bits and compute on values scaled into the normal range:
// exact, because scaling by a power of two is, and the one rounding into the subnormal range is done here on the
// integer significand (to nearest, ties to even), as IEEE arithmetic would. Each takes the fast path, one plain
// operation, unless an operand is subnormal or the result is tiny (|r| < 2^-100, a flushed zero included).

fn sn_is_sub(x: f32) -> bool {
    let a = bitcast<u32>(x) & 0x7fffffffu;
    return a != 0u && a < 0x00800000u;
}

// |x| < 2^-100 (zeros included): where a result may have been flushed.
fn sn_tiny(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) < 0x0d800000u;
}

// |x| < 2^60: x * 2^64 stays finite and normal (NaN and infinities are not small).
fn sn_small(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) < 0x5d800000u;
}

fn sn_neg(x: f32) -> f32 {
    return bitcast<f32>(bitcast<u32>(x) ^ 0x80000000u);
}

// x * 2^64, exactly, for |x| < 2^60 (a subnormal x read from its bits: m * 2^-149 is f32(m) * 2^-85).
fn sn_up(x: f32) -> f32 {
    let b = bitcast<u32>(x);
    let a = b & 0x7fffffffu;
    if (a == 0u) { return x; }
    if (a < 0x00800000u) {
        let v = f32(a) * 2.5849394142282115e-26;  // 2^-85: a normal product
        return select(v, sn_neg(v), (b & 0x80000000u) != 0u);
    }
    return bitcast<f32>(b + (64u << 23u));
}

// r * 2^-k (1 <= k <= 128) rounded once, to nearest even, into the subnormal range where it falls there.
fn sn_down(r: f32, k: u32) -> f32 {
    return sn_down_dir(r, 0, k);
}

// The same for an r that is itself a rounded result: ``dir`` says where the exact value lies, beyond r in magnitude
// (1), short of it (-1) or at it (0), so that a value r rounded to a midpoint of the subnormal grid still rounds the
// way the exact one does (one rounding, not two).
fn sn_down_dir(r: f32, dir: i32, k: u32) -> f32 {
    let b = bitcast<u32>(r);
    let sign = b & 0x80000000u;
    let a = b & 0x7fffffffu;
    if (a == 0u || a >= 0x7f800000u) { return r; }
    let e = a >> 23u;
    if (e > k) { return bitcast<f32>(b - (k << 23u)); }
    // The result is below 2^-126: its count of 2^-149 steps is the 24-bit significand shifted right.
    let shift = k + 1u - e;
    if (shift > 24u) { return bitcast<f32>(sign); }
    let m = (a & 0x007fffffu) | 0x00800000u;
    var q = m >> shift;
    let rest = m & ((1u << shift) - 1u);
    let half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (dir > 0 || (dir == 0 && (q & 1u) == 1u)))) { q += 1u; }
    return bitcast<f32>(sign | q);  // (a carry into 2^23 is the smallest normal's bits)
}

fn sn_add(a: f32, b: f32) -> f32 {
    let r = a + b;
    if (!(sn_is_sub(a) || sn_is_sub(b) || sn_tiny(r)) || !(sn_small(a) && sn_small(b))) { return r; }
    // (An operand of 2^60 or more swamps a subnormal one: r is then the exact sum rounded.)
    return sn_down(sn_up(a) + sn_up(b), 64u);
}

fn sn_sub(a: f32, b: f32) -> f32 {
    return sn_add(a, sn_neg(b));
}

fn sn_mul(a: f32, b: f32) -> f32 {
    let r = a * b;
    if (!(sn_is_sub(a) || sn_is_sub(b) || sn_tiny(r))) { return r; }
    var x = a;
    var y = b;
    var k = 0u;
    if (sn_small(x)) { x = sn_up(x); k += 64u; }
    if (sn_small(y)) { y = sn_up(y); k += 64u; }
    if (k == 0u) { return r; }
    let z = x * y;
    return sn_down_dir(z, sn_direction(sn_product_error(x, y, z), z), k);
}

// x * y - z exactly, for z = x * y rounded (Dekker's product: halves of 12 bits multiply exactly). Not fma(), which
// drivers may compute as a multiply and an add (lavapipe's does).
fn sn_product_error(x: f32, y: f32, z: f32) -> f32 {
    let cx = 4097.0 * x;
    let xh = cx - (cx - x);
    let xl = x - xh;
    let cy = 4097.0 * y;
    let yh = cy - (cy - y);
    let yl = y - yh;
    return ((xh * yh - z) + xh * yl + xl * yh) + xl * yl;
}

// Where an exact value z + err lies relative to z in magnitude (z and the exact value share their sign).
fn sn_direction(err: f32, z: f32) -> i32 {
    if (err == 0.0) { return 0; }
    return select(-1, 1, (err > 0.0) == (z > 0.0));
}

// Whether a quotient a / b computed as q must be computed again on scaled operands (sn_div_scaled).
fn sn_div_needed(a: f32, b: f32, q: f32) -> bool {
    return sn_is_sub(a) || sn_is_sub(b) || (sn_tiny(q) && sn_small(a));
}

// (a', b', k): a / b = (a' / b') * 2^k, with a' and b' normal where a and b were subnormal or a small.
fn sn_div_scaled(a: f32, b: f32) -> vec3<f32> {
    var x = a;
    var y = b;
    var k = 0.0;
    if (sn_small(x)) { x = sn_up(x); k -= 64.0; }
    if (sn_is_sub(y)) { y = sn_up(y); k += 64.0; }
    return vec3<f32>(x, y, k);
}

// The scaled quotient q' = x' / y' brought back by 2^k (k in -64, 0, 64).
fn sn_div_finish(q: f32, s: vec3<f32>) -> f32 {
    let k = s.z;
    if (k < 0.0) {
        // x' - q' y' exactly: its sign and y's say whether the exact quotient is beyond q'.
        let rest = s.x - q * s.y - sn_product_error(q, s.y, q * s.y);
        return sn_down_dir(q, sn_direction(select(rest, -rest, s.y < 0.0), q), u32(-k));
    }
    if (k > 0.0) { return q * 18446744073709551616.0; }  // 2^64: a normal (or infinite) result
    return q;
}

// a / b given q, the device's quotient of them: computed again on scaled operands where subnormals are involved.
fn sn_quotient(a: f32, b: f32, q: f32) -> f32 {
    if (!sn_div_needed(a, b, q)) { return q; }
    let s = sn_div_scaled(a, b);
    return sn_div_finish(s.x / s.y, s);
}

// The order of two non-NaN floats read from their bits (-0 just below +0), for max and min of subnormals.
fn sn_key(x: f32) -> i32 {
    let i = bitcast<i32>(x);
    return select(i, i ^ 0x7fffffff, i < 0);
}
