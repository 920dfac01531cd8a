// OneHotEncoder zeros=0's value check: an element of x0 that is none of the pe(1) usable categories (x1 the
// categories, x2 their usable flags, along the last of the 6 frame axes) is a value fault at its flat index (the
// fault slot pe(0)).
let v = x0(c);
var known = false;
for (var k = 0u; k < pe(1u); k++) {
    var e: Coords;
    e.c[5] = k;
    if (x1(e) == v && x2(e) != 0) { known = true; }
}
if (!known) { value_fault(linear_of(0u, c), pe(0u)); }
r = 0;
