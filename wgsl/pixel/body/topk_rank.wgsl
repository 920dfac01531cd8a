// TopK: the rank of element c in its row (pe(0) elements along frame axis pe(1)): how many come ahead of it.
let v = x0(c);
let a = pe(1u);
var d = c;
var n = 0;
for (var j = 0u; j < pe(0u); j++) {
    d.c[a] = j;
    if (ahead(x0(d), v, j, c.c[a])) { n++; }
}
r = n;
