select(a, b, is_nan_f32(a))  /* Imputer replacing NaN: the feature's imputed value (b) where x (a) is NaN. */
