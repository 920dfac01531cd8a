// A recurrent op's XW bias (1, N) from a device B (dirs, 2 * gates * hidden): Wb of unit j of gate-row dg, plus
// Rb where gate g folds it in (bit g of pe(3)); zero past hidden (pe(0) = hp, pe(1) = hidden, pe(2) = gates).
let dg = c.c[5] / pe(0u); let j = c.c[5] % pe(0u); let g = dg % pe(2u); r = 0.0;
if (j < pe(1u)) { var q = c; q.c[4] = dg / pe(2u); q.c[5] = g * pe(1u) + j; r = x0(q);
if (((pe(3u) >> g) & 1u) == 1u) { q.c[5] += pe(2u) * pe(1u); r += x0(q); } }
