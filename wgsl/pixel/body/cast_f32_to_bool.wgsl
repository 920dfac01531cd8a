// Cast of a float32 lane a to bool (0/1).
r = select(0, 1, a != 0.0);
