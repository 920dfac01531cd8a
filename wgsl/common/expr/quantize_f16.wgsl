i32(clamp(round(round_to_f16({{QUOTIENT}})) + f32(c), {{LO}}, {{HI}}))  /* QuantizeLinear of float16: the quotient rounded to float16 (as numpy divides), then as quantize.wgsl. */
