i32(round(a))  /* an integral float32 accumulator as int32. */
