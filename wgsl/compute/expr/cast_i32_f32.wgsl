f32(v)  /* Cast int32 -> float32 (rounded to nearest even past 2^24). */
