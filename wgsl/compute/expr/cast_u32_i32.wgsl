i32(v)  /* Cast bool -> int32: 0 or 1. */
