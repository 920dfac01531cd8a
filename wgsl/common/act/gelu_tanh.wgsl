// Gelu(v) with tanh: the activation's WGSL expression.
0.5 * v * (1.0 + tanh_safe(0.7978845608028654 * (v + 0.044715 * v * v * v)))
