// RMSNormalization: x * inv_rms * scale (o0 the inverse root mean square, o1 the scale).
x * o0 * o1
