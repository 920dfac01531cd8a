// GatherND: data (input 0) at c's coordinates moved by pe(7..12), frame entries pe(14) + j set to component j < pe(13)
// of the index tuple (input 1 at c's coordinates moved by pe(1..6), its last coordinate j), each checked against
// length pe(15 + j) into fault slot pe(0) + 2j; zero for a tuple with a bad component.
var d = coords_from(c, 7u);
var e = coords_from(c, 1u);
var bad = false;
for (var j = 0u; j < pe(13u); j++) {
    e.c[5] = j;
    let v = checked_index(i32(x1(e)), pei(15u + j), pe(0u) + 2u * j);
    if (v < 0) { bad = true; } else { d.c[pe(14u) + j] = u32(v); }
}
r = select(x0(d), {{T}}(0), bad);
