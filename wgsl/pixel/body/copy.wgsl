// A copy: the output element at c is the input's at c (a scalar broadcast).
r = x0(c);
