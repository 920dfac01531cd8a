// Winograd F(2x2, 3x3) input transform: for every channel and 4x4 input tile d (tiles step by 2,
// zero outside the image), V = B^T d B with B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1].
// V is the B operand of 16 batched matmuls, (16 * Cp) rows of tp columns: row xi * Cp + c, column
// t = (n * th + ty) * tw + tx, where xi = 4 * row + column of the transformed tile. Each invocation
// transforms four consecutive tiles and stores one vec4 per xi; channels C..Cp-1 and tiles T..tp-1
// are zeros, at texel index row * tp / 4 + t4. V_BINDING declares V and its store: a storage buffer of vec4
// (compute/gen/winograd_v_buffer.wgsl) or a linear write-only storage texture (gen/winograd_v_texture.wgsl).
// Params: 0 total (Cp * tp / 4), 1 T (tiles in this block), 2 tw, 3 th, 4 C, 5 H, 6 W, 7 pad top,
// 8 pad left, 9 Cp, 10 tp, 11 first image, 12 first tile row (the block of tiles this dispatch
// transforms: columns t count from its first tile, see winograd_read.wgsl); udiv's divisor words (a divisor and
// its f32 reciprocal): 13, 14 tw and 15, 16 th (GRID_WORDS, winograd_tiles.wgsl), 17, 18 tp / 4. Sizes, not
// override constants: one pipeline serves every image size, at three udivs per invocation (its c and t4 and the
// first tile's position; the other three tiles step from it).
#include "common/params.wgsl"
#include "common/linear_texture.wgsl"

#include "compute/winograd_tiles.wgsl"
#include "compute/winograd_read.wgsl"

const GRID_WORDS: u32 = 13u;

@group(0) @binding(0) var<storage, read> X: array<f32>;
{{V_BINDING}}

// Four input columns of row dy of tile o, zero where outside the image.
fn row4(o: TileOrigin, dy: i32) -> vec4<f32> {
    let y = o.y0 + dy;
    let x0 = o.x0;
    let h = o.h;
    let w = o.w;
    if (y < 0 || y >= h) { return vec4<f32>(0.0); }
    let r = o.base + u32(y * w);
    var out = vec4<f32>(0.0);
    if (x0 >= 0 && x0 < w) { out.x = X[r + u32(x0)]; }
    if (x0 + 1 >= 0 && x0 + 1 < w) { out.y = X[r + u32(x0 + 1)]; }
    if (x0 + 2 >= 0 && x0 + 2 < w) { out.z = X[r + u32(x0 + 2)]; }
    if (x0 + 3 >= 0 && x0 + 3 < w) { out.w = X[r + u32(x0 + 3)]; }
    return out;
}

// (a, b, c, d) B: the column transform of one row.
fn bt(v: vec4<f32>) -> vec4<f32> { return vec4<f32>(v.x - v.z, v.y + v.z, v.z - v.y, v.y - v.w); }

// The transformed tile t (at pos) of channel c as four rows (columns of the matrix), zero past the edges.
fn tile(c: u32, t: u32, pos: vec3<u32>) -> mat4x4<f32> {
    if (!tile_exists(c, t)) { return mat4x4<f32>(); }
    let o = tile_origin(c, pos, 2u);
    let d0 = row4(o, 0);
    let d1 = row4(o, 1);
    let d2 = row4(o, 2);
    let d3 = row4(o, 3);
    return mat4x4<f32>(bt(d0 - d2), bt(d1 + d2), bt(d2 - d1), bt(d1 - d3));
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let t4s = pu(17u);
    let c = udiv(i, t4s, pf(18u));
    let t4 = i - c * t4s;
    let cp = pu(9u);
    let t = 4u * t4;
    let p0 = tile_position(t);
    let p1 = next_tile(p0);
    let p2 = next_tile(p1);
    let q0 = tile(c, t, p0);
    let q1 = tile(c, t + 1u, p1);
    let q2 = tile(c, t + 2u, p2);
    let q3 = tile(c, t + 3u, next_tile(p2));
    for (var r = 0u; r < 4u; r++) {
        let a = q0[r];
        let b = q1[r];
        let d = q2[r];
        let e = q3[r];
        store(((4u * r) * cp + c) * t4s + t4, vec4<f32>(a.x, b.x, d.x, e.x));
        store(((4u * r + 1u) * cp + c) * t4s + t4, vec4<f32>(a.y, b.y, d.y, e.y));
        store(((4u * r + 2u) * cp + c) * t4s + t4, vec4<f32>(a.z, b.z, d.z, e.z));
        store(((4u * r + 3u) * cp + c) * t4s + t4, vec4<f32>(a.w, b.w, d.w, e.w));
    }
}
