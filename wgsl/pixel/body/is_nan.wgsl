// IsNaN: 1 where a's bits are NaN's (exponent all ones, mantissa non-zero), else 0.
r = select(0, 1, (bitcast<u32>(a) & 0x7fffffffu) > 0x7f800000u);
