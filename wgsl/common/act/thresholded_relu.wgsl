// ThresholdedRelu(v): the activation's WGSL expression (alpha, beta, gamma: its parameters).
select(0.0, v, v > alpha)
