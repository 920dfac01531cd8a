// (x - mean) * inv_std * scale (o0 the mean, o1 the inverse standard deviation, o2 the scale).
(x - o0) * o1 * o2
