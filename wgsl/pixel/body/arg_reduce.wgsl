// ArgMax / ArgMin: the index of the first (pe(1) != 0: the last) best of the pe(0) elements along frame axis pe(2)
// from c's first one, stepping texel by texel (NaN wins, as in numpy).
let a = pe(2u);
var q = c;
q.c[a] = 0u;
let at = locate(14u, q);
let sh = pu(27u);
let t0 = (u32(at.y) << sh) + u32(at.x);
let st = pu(20u + a);
let last = pe(1u) != 0u;
var best = textureLoad(X0, at.xy, 0)[at.z];
var idx = 0u;
for (var k = 1u; k < pe(0u); k++) {
    let tk = t0 + select(k * st, (k / 4u) * st, ALONG_BLOCK);
    let lane = select(u32(at.z), k % 4u, ALONG_BLOCK);
    let v = textureLoad(X0, vec2<i32>(i32(tk & ((1u << sh) - 1u)), i32(tk >> sh)), 0)[lane];
    var better = select(arg_better(v, best), arg_better_or_equal(v, best), last);
    if (key_nan(best)) {
        better = last && key_nan(v);
    } else if (key_nan(v)) {
        better = true;
    }
    if (better) {
        best = v;
        idx = k;
    }
}
r = i32(idx);
