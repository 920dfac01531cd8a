select(a, c, a == b)  /* Imputer: the feature's imputed value (c) where x (a) is the replaced value (b). */
