f32_to_i32(v)  /* Cast float32 -> int32: truncates toward zero; NaN, Inf and values past int32 give -2^31 (math.wgsl). */
