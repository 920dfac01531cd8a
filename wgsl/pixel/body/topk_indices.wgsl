// TopK indices: output element c is the position along the row of the element whose rank (input 0) is c's.
let a = pe(1u);
var d = c;
var hit = 0u;
for (var j = 0u; j < pe(0u); j++) {
    d.c[a] = j;
    if (x0(d) == i32(c.c[a])) { hit = j; }
}
d.c[a] = hit;
r = i32(hit);
