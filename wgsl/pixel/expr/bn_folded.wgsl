// BatchNormalization folded on the host: act(x * a + b), a and b per (channel, position) (o0, o1).
act4(x * o0 + o1)
