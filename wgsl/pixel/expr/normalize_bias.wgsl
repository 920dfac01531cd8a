// (x - mean) * inv_std + bias (o0 the mean, o1 the inverse standard deviation, o2 the bias).
(x - o0) * o1 + o2
