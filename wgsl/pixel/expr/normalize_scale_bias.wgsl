// (x - mean) * inv_std * scale + bias (o0 the mean, o1 the inverse standard deviation, o2 the scale, o3 the bias).
(x - o0) * o1 * o2 + o3
