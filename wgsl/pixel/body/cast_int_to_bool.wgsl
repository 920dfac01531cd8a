// Cast of an integer lane a to bool (0/1).
r = select(0, 1, a != 0);
