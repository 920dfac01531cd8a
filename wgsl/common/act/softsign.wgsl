// Softsign(v): the activation's WGSL expression (alpha, beta, gamma: its parameters).
v / (1.0 + abs(v))
