// HardSigmoid(v): the activation's WGSL expression (alpha, beta, gamma: its parameters).
select(clamp(opaque(alpha * v, opaque_zero()) + beta, 0.0, 1.0), v, is_nan_f32(v))
