// Clip(v): the activation's WGSL expression (alpha, beta, gamma: its parameters).
select(clamp(v, alpha, beta), v, is_nan_f32(v))
