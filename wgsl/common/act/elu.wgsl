// Elu(v): the activation's WGSL expression (alpha, beta, gamma: its parameters).
select(alpha * expm1_accurate(v), v, v >= 0.0)
