f32(v)  /* Cast bool -> float32: 0.0 or 1.0. */
