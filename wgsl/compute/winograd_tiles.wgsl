// Shared by the Winograd transforms (winograd*_in.wgsl, winograd*_out.wgsl): the tile grid, TW x TH
// tiles per image, as pipeline constants, so that finding a tile divides by constants only (runtime
// integer division is slow on lavapipe).
override TW: u32 = 1u;
override TH: u32 = 1u;

// (tx, ty, image) of tile t; tiles are numbered t = (n * TH + ty) * TW + tx.
fn tile_position(t: u32) -> vec3<u32> {
    return vec3<u32>(t % TW, (t / TW) % TH, t / (TW * TH));
}
