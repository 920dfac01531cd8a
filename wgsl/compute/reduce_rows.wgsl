// Shared by the reduction programs: where the elements of one reduced "row" live.
// A reduction is described by up to 3 kept groups and up to 3 reduced groups of input dims (adjacent
// dims of the same kind merged, size-1 dims dropped). Params layout (words 8..23):
//   8 nk, 9 nr, 10..12 kept sizes, 13..15 kept strides, 16..18 reduced sizes, 19..21 reduced strides.
// Kept groups are listed outermost first; the output is row-major over them.

// Input offset of the first element of output row `o`.
fn row_base(o: u32) -> u32 {
    let nk = pu(8u);
    var rem = o;
    var base = 0u;
    for (var g = 0u; g < nk; g++) {
        let axis = nk - 1u - g;
        let size = pu(10u + axis);
        base += (rem % size) * pu(13u + axis);
        rem = rem / size;
    }
    return base;
}

// Input offset (relative to the row base) of the row's k-th reduced element (row-major over groups).
fn row_offset(k: u32) -> u32 {
    let nr = pu(9u);
    if (nr == 1u) { return k * pu(19u); }
    var rem = k;
    var off = 0u;
    for (var g = 0u; g < nr; g++) {
        let axis = nr - 1u - g;
        let size = pu(16u + axis);
        off += (rem % size) * pu(19u + axis);
        rem = rem / size;
    }
    return off;
}
