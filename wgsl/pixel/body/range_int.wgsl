// Range of integers: start pe(0) plus the index times delta pe(1).
r = pei(0u) + i32(c.c[5]) * pei(1u);
