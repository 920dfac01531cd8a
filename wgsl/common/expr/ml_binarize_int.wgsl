select(0, 1, a > b)  /* Binarizer of integers: 1 where x (a) passes the threshold (b). */
