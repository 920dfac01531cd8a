i32(clamp(round(a * b) + c, {{LO}}, {{HI}}))  /* requantization: the accumulator (a) times its multiplier (b) rounded half to even, plus the zero point (c), saturated into [LO, HI]. */
