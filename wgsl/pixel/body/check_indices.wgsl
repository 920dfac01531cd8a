// The bounds check of a gather whose output is empty: index c (input 0) checked against length pe(1) into fault
// slot pe(0) (TUPLES: c's last coordinate j is the component of an index tuple, checked against pe(1 + j) into
// slot pe(0) + 2j; check_helpers.wgsl); the output is thrown away.
let j = select(0u, c.c[5], TUPLES);
_ = checked(i32(x0(c)), pei(1u + j), pe(0u) + 2u * j);
r = 0;
