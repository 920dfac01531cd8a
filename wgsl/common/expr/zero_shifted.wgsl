f32(a) - f32(c)  /* integer codes less their zero point (c), as float32. */
