// CumSum: element c sums the {{T}} elements along frame axis pe(0) (of pe(1)) before it, itself included unless
// EXCLUSIVE, those after it where REVERSE (cum_sum_flags.wgsl), in ascending order.
let a = pe(0u);
let p = c.c[a];
let lo = select(0u, p + select(0u, 1u, EXCLUSIVE), REVERSE);
let hi = select(p + select(1u, 0u, EXCLUSIVE), pe(1u), REVERSE);
var acc = {{T}}(0);
var d = c;
for (var q = lo; q < hi; q++) {
    d.c[a] = q;
    acc += x0(d);
}
r = acc;
