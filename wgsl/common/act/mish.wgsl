// Mish(v): the activation's WGSL expression (alpha, beta, gamma: its parameters).
v * tanh_safe(softplus(v))
