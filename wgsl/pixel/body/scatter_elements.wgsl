// ScatterElements in gather form: data element c (input 0) takes each update (input 2) whose index (input 1) along
// frame axis pe(4) names it, walking positions pe(2) to pe(3) of the indices (of 6-dim shape pe(5..10)), each index
// checked against length pe(1) into fault slot pe(0); scatter_step folds them in the CPU kernel's order.
var acc = x0(c);
let a = pe(4u);
var inside = true;
for (var j = 0u; j < 6u; j++) {
    if (j != a && c.c[j] >= pe(5u + j)) { inside = false; }
}
if (inside) {
    var e = c;
    for (var p = pe(2u); p < pe(3u); p++) {
        e.c[a] = p;
        let k = checked_index(i32(x1(e)), pei(1u), pe(0u));
        if (k == i32(c.c[a])) { let v = x2(e); acc = scatter_step(acc, v); }
    }
}
r = acc;
