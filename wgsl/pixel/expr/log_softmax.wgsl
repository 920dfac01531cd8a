// LogSoftmax: (x - max) - log(sum) (o0 the row's max, o1 the sum of exp(x - max)).
(x - o0) - log(o1)
