// LeakyRelu(v): the activation's WGSL expression (alpha, beta, gamma: its parameters).
select(alpha * v, v, v >= 0.0)
