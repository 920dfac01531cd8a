select(0u, 1u, v != 0.0)  /* Cast float32 -> bool: any value but zero is true (NaN included). */
