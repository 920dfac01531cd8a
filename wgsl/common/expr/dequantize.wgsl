(f32(a) - f32(c)) * f32(b)  /* DequantizeLinear: (x - zero point) * scale in float32. */
