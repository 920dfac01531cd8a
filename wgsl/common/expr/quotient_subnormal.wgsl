sn_quotient(f32(a), f32(b), div_f32(f32(a), f32(b)))  /* x (a) over its scale (b) where fragment shaders may flush subnormals (common/subnormal.wgsl). */
