a + f32(b)  /* a float32 accumulator (a) plus an int32 bias (b), exact below 2^24. */
