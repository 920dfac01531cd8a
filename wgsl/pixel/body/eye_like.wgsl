// EyeLike: the {{T}} of bits pe(1) on diagonal pe(0) (column less row), else that of bits pe(2).
r = select(bitcast<{{T}}>(pe(2u)), bitcast<{{T}}>(pe(1u)), i32(c.c[5]) - i32(c.c[4]) == pei(0u));
