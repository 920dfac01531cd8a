select(0u, 1u, v != 0)  /* Cast int32 -> bool: any value but zero is true. */
