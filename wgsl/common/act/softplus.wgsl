// Softplus(v): the activation's WGSL expression (alpha, beta, gamma: its parameters).
softplus(v)
