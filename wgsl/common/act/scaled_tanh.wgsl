// ScaledTanh(v): the activation's WGSL expression (alpha, beta, gamma: its parameters).
tanh_safe(v * beta) * alpha
