// OneHot: the on value (bits pe(1)) where c's coordinate on frame axis pe(3) is the index (input 0 at c's
// coordinates moved by pe(4..9); a negative one counts from depth pe(2), a float one truncated), else the off value
// (bits pe(0)).
let e = coords_from(c, 4u);
var k = i32(x0(e));
if (k < 0) { k += pei(2u); }
r = select(bitcast<{{T}}>(pe(0u)), bitcast<{{T}}>(pe(1u)), k == i32(c.c[pe(3u)]));
