// Where: b where the condition a (bool, i32 0/1) holds, else c.
r = select(c, b, a != 0);
