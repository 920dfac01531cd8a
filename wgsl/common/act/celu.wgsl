// Celu(v): the activation's WGSL expression (alpha, beta, gamma: its parameters).
select(max(0.0, v) + min(0.0, alpha * expm1_accurate(v / alpha)), v, is_nan_f32(v))
