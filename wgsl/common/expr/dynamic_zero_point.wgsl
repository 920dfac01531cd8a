i32(round(clamp(0.0 - div_f32(min(a, 0.0), b), 0.0, 255.0)))  /* DynamicQuantizeLinear's zero point from the range's min (a) and the scale (b). */
