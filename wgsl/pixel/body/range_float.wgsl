// Range of floats: start pef(0) plus the index times delta pef(1), rounded once by fma (as the CPU kernel's float64
// sum rounded to float32).
r = fma(f32(c.c[5]), pef(1u), pef(0u));
