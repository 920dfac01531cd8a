// A recurrent op's W^T (inp, N) from a device W (dirs, gates * hidden, inp): column n is unit j = n % hp of
// gate-row dg = n // hp (pe(0) = hp, pe(1) = hidden, pe(2) = gates), zero past hidden.
let dg = c.c[5] / pe(0u); let j = c.c[5] % pe(0u); r = 0.0;
if (j < pe(1u)) { var q = c; q.c[3] = dg / pe(2u); q.c[4] = (dg % pe(2u)) * pe(1u) + j; q.c[5] = c.c[4]; r = x0(q); }
