// Shared by the Winograd transforms (winograd*_in.wgsl, winograd*_out.wgsl): the tile grid, tw x th tiles per
// image of a block, in uniform words, not override constants, so one pipeline serves every image size. The
// including shader declares GRID_WORDS, where udiv's divisor words (common/udiv.wgsl) of tw and th start: tw, its
// f32 reciprocal, th, its reciprocal; the divisions go through udiv, not WGSL's, which lavapipe runs per lane.
#include "common/udiv.wgsl"

// (tx, ty, image) of tile t; tiles are numbered t = (n * th + ty) * tw + tx. Two udivs: once per invocation, the
// invocation's further tiles step with next_tile.
fn tile_position(t: u32) -> vec3<u32> {
    let tw = pu(GRID_WORDS);
    let th = pu(GRID_WORDS + 2u);
    let q = udiv(t, tw, pf(GRID_WORDS + 1u));
    let n = udiv(q, th, pf(GRID_WORDS + 3u));
    return vec3<u32>(t - q * tw, q - n * th, n);
}

// The position of the tile after the one at ``pos``: a column on, wrapping into the next row and image.
fn next_tile(pos: vec3<u32>) -> vec3<u32> {
    var p = vec3<u32>(pos.x + 1u, pos.y, pos.z);
    if (p.x == pu(GRID_WORDS)) {
        p.x = 0u;
        p.y += 1u;
        if (p.y == pu(GRID_WORDS + 2u)) {
            p.y = 0u;
            p.z += 1u;
        }
    }
    return p;
}
