// Gather: data (input 0) at c's coordinates moved by words pe(3..8), its frame axis pe(2) set to the index
// (input 1) at c's coordinates moved by pe(9..14), checked (gather_helpers.wgsl) against length pe(1) into fault
// slot pe(0); zero for a bad index.
var d = coords_from(c, 3u);
let e = coords_from(c, 9u);
let k = checked(i32(x1(e)), pei(1u), pe(0u));
if (k >= 0) { d.c[pe(2u)] = u32(k); r = x0(d); }
