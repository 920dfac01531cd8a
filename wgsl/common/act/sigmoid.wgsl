// Sigmoid(v): the activation's WGSL expression (alpha, beta, gamma: its parameters).
1.0 / (1.0 + exp_accurate(-v))
