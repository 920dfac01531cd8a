// Cast of a float32 lane a to an integer type (int32 words; common/math.wgsl f32_to_i32: truncated, -2^31 outside).
r = f32_to_i32(a);
