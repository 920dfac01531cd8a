select(0.0, 1.0, a == b && c != 0)  /* OneHotEncoder: 1 where x (a) is category b and that category is usable (c). */
