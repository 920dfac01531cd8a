// coords_from(c, base): coordinates whose entry j is c's entry pe(base + j) (a word past 5: entry j left 0), for
// bodies that move a tensor's axes into another's 6-dim frame (the mapping is words, not source).
fn coords_from(c: Coords, base: u32) -> Coords {
    var src = c;
    var out: Coords;
    for (var j = 0u; j < 6u; j++) {
        let w = pe(base + j);
        if (w < 6u) { out.c[j] = src.c[w]; }
    }
    return out;
}
