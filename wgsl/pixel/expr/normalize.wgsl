// (x - mean) * inv_std (o0 the mean, o1 the inverse standard deviation).
(x - o0) * o1
