// Relu(v): the activation's WGSL expression (alpha, beta, gamma: its parameters).
select(v, 0.0, bitcast<i32>(v) < 0 && bitcast<u32>(v) != 0x80000000u && !is_nan_f32(v))
