// Cast of an integer or bool lane a to float32.
r = f32(a);
