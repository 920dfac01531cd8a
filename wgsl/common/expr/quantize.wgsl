i32(clamp(round({{QUOTIENT}}) + f32(c), {{LO}}, {{HI}}))  /* QuantizeLinear: the quotient rounded half to even, plus the zero point (c), saturated into [LO, HI]. */
