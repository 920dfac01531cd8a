// HardSwish(v): the activation's WGSL expression (alpha, beta, gamma: its parameters).
v * clamp(opaque(v * 0.16666667, opaque_zero()) + 0.5, 0.0, 1.0)
