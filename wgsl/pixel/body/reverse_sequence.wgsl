// ReverseSequence: element c reads time L - 1 - t of its batch (L: the lengths, input 1, at c's batch coordinate,
// frame axis pe(0); t: c's time coordinate, frame axis pe(1)) where t < L, else its own.
var e: Coords;
e.c[5] = c.c[pe(0u)];
let n = u32(x1(e));
let t = pe(1u);
var d = c;
if (c.c[t] < n) { d.c[t] = n - 1u - c.c[t]; }
r = x0(d);
