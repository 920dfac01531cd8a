// affine_source(c): the input coordinates an affine copy (Transpose, Slice, Split, Expand, Tile, DepthToSpace,
// SpaceToDepth) reads for output coordinates c: d[j] = (start pe(j) + c[src pe(6 + j)] * step pe(12 + j)) mod the
// input's dim j (a no-op but for Tile and Expand).
fn affine_source(c: Coords) -> Coords {
    var s = c;
    var d: Coords;
    for (var j = 0u; j < 6u; j++) {
        d.c[j] = u32(pei(j) + i32(s.c[pe(6u + j)]) * pei(12u + j)) % max(dim_of(14u, j), 1u);
    }
    return d;
}
