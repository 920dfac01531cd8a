// Shared by the Winograd input transforms (winograd*_in.wgsl): where a tile's input starts. Params
// 1 T (tiles in this block), 4 C, 5 H, 6 W, 7 pad top, 8 pad left, 11 first image and 12 first tile row
// of the block (a convolution whose scratch would pass the binding limit runs in blocks of tiles,
// th tile rows of tw tiles per image; otherwise both are 0 and th is the whole grid).

// The tile at ``pos`` (tile_position, winograd_tiles.wgsl) of channel c: the base index of its image plane in X,
// its top-left (y0, x0) in image coordinates (negative inside the padding), and the image size (h, w).
struct TileOrigin { base: u32, y0: i32, x0: i32, h: i32, w: i32 }

fn tile_origin(c: u32, pos: vec3<u32>, step: u32) -> TileOrigin {
    let h = pi(5u);
    let w = pi(6u);
    let base = ((pos.z + pu(11u)) * pu(4u) + c) * u32(h * w);
    return TileOrigin(base, i32((pos.y + pu(12u)) * step) - pi(7u), i32(pos.x * step) - pi(8u), h, w);
}

// False for the padding channels (c >= C) and tiles (t >= T), whose transform is zero.
fn tile_exists(c: u32, t: u32) -> bool { return c < pu(4u) && t < pu(1u); }
