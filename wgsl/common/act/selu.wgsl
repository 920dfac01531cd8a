// Selu(v): the activation's WGSL expression (alpha, beta, gamma: its parameters).
gamma * select(alpha * expm1_accurate(v), v, v > 0.0)
