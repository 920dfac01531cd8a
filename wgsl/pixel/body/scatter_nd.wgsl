// ScatterND in gather form: data element c (input 0) walks the pe(1) update rows, row-major over the indices' pe(3)
// leading dims pe(8 + i) (frame entries from pe(4) in the indices, input 1, and pe(5) in the updates, input 2), and
// folds (scatter_step) each row whose index tuple of pe(2) components (each checked against length pe(14 + j) into
// fault slot pe(0) + 2j) is c's coordinates from frame entry pe(6); the updates' pe(7) trailing entries follow c's.
var acc = x0(c);
var e: Coords;
var f: Coords;
for (var row = 0u; row < pe(1u); row++) {
    var rest = row;
    var hit = true;
    for (var i = 0u; i < pe(3u); i++) {
        let j = pe(3u) - 1u - i;
        let n = pe(8u + j);
        e.c[pe(4u) + j] = rest % n;
        f.c[pe(5u) + j] = rest % n;
        rest = rest / n;
    }
    for (var j = 0u; j < pe(2u); j++) {
        e.c[5] = j;
        let v = checked_index(i32(x1(e)), pei(14u + j), pe(0u) + 2u * j);
        if (v != i32(c.c[pe(6u) + j])) { hit = false; }
    }
    for (var j = 0u; j < pe(7u); j++) { f.c[pe(5u) + pe(3u) + j] = c.c[pe(6u) + pe(2u) + j]; }
    if (hit) { let v = x2(f); acc = scatter_step(acc, v); }
}
r = acc;
