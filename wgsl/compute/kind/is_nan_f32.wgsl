// is_nan(v) of a float32 element: NaN is the only value whose exponent is all ones with a non-zero mantissa.
fn is_nan(v: f32) -> bool { return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u; }
