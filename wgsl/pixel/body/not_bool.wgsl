// Not of a bool lane (i32 0/1).
r = 1 - a;
