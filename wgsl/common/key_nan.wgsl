// key_nan(x): whether a key of type {{T}} is a NaN (never for integer keys: FLOAT_KEYS false), by its bits, so
// that no compiler may assume NaNs away.
override FLOAT_KEYS: bool = true;

fn key_nan(x: {{T}}) -> bool { return FLOAT_KEYS && (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
