// A (dirs, batch, hidden) state as (batch, dirs, hidden) (layout=1's Y_h / Y_c): the two leading axes swapped.
var q = c; q.c[3] = c.c[4]; q.c[4] = c.c[3]; out = x0(q);
