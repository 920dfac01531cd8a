// GatherElements: data (input 0) at c with its frame axis pe(2) the index (input 1) at c, checked against length
// pe(1) into fault slot pe(0); zero for a bad index.
var d = c;
let k = checked_index(i32(x1(c)), pei(1u), pe(0u));
if (k >= 0) { d.c[pe(2u)] = u32(k); r = x0(d); }
