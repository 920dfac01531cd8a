// Gelu(v) with none: the activation's WGSL expression.
0.5 * v * (1.0 + erf_approx(v * 0.7071067811865476))
