// Softmax: exp(x - max) / sum (o0 the row's max, o1 the sum of exp(x - max)).
div4(exp4(x - o0), o1)
