// GRU's Rb_h (dirs, hidden) from a device B: the elements pe(0) = (gates + 2) * hidden along each row on.
var q = c; q.c[5] += pe(0u); r = x0(q);
