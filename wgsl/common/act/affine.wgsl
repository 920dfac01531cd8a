// Affine(v): the activation's WGSL expression (alpha, beta, gamma: its parameters).
v * alpha + beta
