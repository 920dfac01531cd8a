// Pad: element c reads the input at c - shift pe(0..5) (then + crop pe(6..11)) within each padded length
// pe(12..17), brought inside by MODE (0 constant: outside reads the fill value, bits pe(18); 1 edge; 2 reflect;
// 3 wrap).
var d: Coords;
var inside = true;
for (var j = 0u; j < 6u; j++) {
    let n = i32(pe(12u + j));
    var q = i32(c.c[j]) - pei(j);
    if (MODE == 0u) {
        if (q < 0 || q >= n) { inside = false; q = 0; }
    } else if (MODE == 1u) {
        q = clamp(q, 0, n - 1);
    } else if (MODE == 2u) {
        if (n == 1) { q = 0; } else {
            let period = 2 * (n - 1);
            q = ((q % period) + period) % period;
            if (q >= n) { q = period - q; }
        }
    } else {
        q = ((q % n) + n) % n;
    }
    d.c[j] = u32(q + pei(6u + j));
}
r = select(bitcast<{{T}}>(pe(18u)), x0(d), inside);
