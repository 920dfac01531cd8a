// MeanVarianceNormalization as the CPU kernel: (x - mean) / (sqrt(max(E[x^2] - mean^2, 0)) + 1e-9) (o0 the mean,
// o1 the mean of squares).
div4(x - o0, sqrt(max(o1 - o0 * o0, vec4<f32>(0.0))) + vec4<f32>(1e-9))
