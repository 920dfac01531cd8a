div_f32(f32(a), f32(b))  /* x (a) over its scale (b), correctly rounded. */
