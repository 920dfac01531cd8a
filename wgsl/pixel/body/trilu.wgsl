// Trilu: the element where its column less its row is at least (UPPER; trilu_upper.wgsl) or at most pe(0), else 0.
let i = i32(c.c[4]);
let j = i32(c.c[5]);
r = select({{T}}(0), x0(c), select(j - i <= pei(0u), j - i >= pei(0u), UPPER));
