f32(a)  /* integer codes as float32 (exact below 2^24). */
