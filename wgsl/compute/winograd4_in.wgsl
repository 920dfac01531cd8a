// Winograd F(4x4, 3x3) input transform: for every channel and 6x6 input tile d (tiles step by 4, zero
// outside the image), V = B^T d B with
//   B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0; 0 4 0 -5 0 1]
// (Lavin & Gray). V is the B operand of 36 batched matmuls, (36 * Cp) rows of tp columns held in
// buffer order: row xi * Cp + c, column t = (n * th + ty) * tw + tx, where xi = 6 * row + column of
// the transformed tile. Each invocation transforms four consecutive tiles and stores one vec4 per xi
// at texel index row * tp / 4 + t4; channels C..Cp-1 and tiles T..tp-1 are zeros. V_BINDING declares V and
// its store (compute/gen/winograd_v_buffer.wgsl or gen/winograd_v_texture.wgsl, as in winograd_in.wgsl).
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

// A row of six values as (v0..v3, v4..v5).
struct Row6 { lo: vec4<f32>, hi: vec2<f32> }

// Six input columns of row dy of tile o, zero where outside the image.
fn row6(o: TileOrigin, dy: i32) -> Row6 {
    let y = o.y0 + dy;
    let x0 = o.x0;
    let h = o.h;
    let w = o.w;
    var out = Row6(vec4<f32>(0.0), vec2<f32>(0.0));
    if (y < 0 || y >= h) { return out; }
    let r = o.base + u32(y * w);
    if (x0 >= 0 && x0 + 5 < w) {  // the common case: the whole row inside
        let o = r + u32(x0);
        out.lo = vec4<f32>(X[o], X[o + 1u], X[o + 2u], X[o + 3u]);
        out.hi = vec2<f32>(X[o + 4u], X[o + 5u]);
        return out;
    }
    if (x0 >= 0 && x0 < w) { out.lo.x = X[r + u32(x0)]; }
    if (x0 + 1 >= 0 && x0 + 1 < w) { out.lo.y = X[r + u32(x0 + 1)]; }
    if (x0 + 2 >= 0 && x0 + 2 < w) { out.lo.z = X[r + u32(x0 + 2)]; }
    if (x0 + 3 >= 0 && x0 + 3 < w) { out.lo.w = X[r + u32(x0 + 3)]; }
    if (x0 + 4 >= 0 && x0 + 4 < w) { out.hi.x = X[r + u32(x0 + 4)]; }
    if (x0 + 5 >= 0 && x0 + 5 < w) { out.hi.y = X[r + u32(x0 + 5)]; }
    return out;
}

fn add(a: Row6, b: Row6) -> Row6 { return Row6(a.lo + b.lo, a.hi + b.hi); }
fn sub(a: Row6, b: Row6) -> Row6 { return Row6(a.lo - b.lo, a.hi - b.hi); }
fn scale(a: Row6, s: f32) -> Row6 { return Row6(a.lo * s, a.hi * s); }

// B^T applied to the six values of a row: the transformed row.
fn bt(v: Row6) -> Row6 {
    let v0 = v.lo.x; let v1 = v.lo.y; let v2 = v.lo.z; let v3 = v.lo.w; let v4 = v.hi.x; let v5 = v.hi.y;
    return Row6(vec4<f32>(4.0 * v0 - 5.0 * v2 + v4, v3 + v4 - 4.0 * (v1 + v2), 4.0 * (v1 - v2) - v3 + v4,
                          2.0 * (v3 - v1) + v4 - v2),
                vec2<f32>(2.0 * (v1 - v3) + v4 - v2, 4.0 * v1 - 5.0 * v3 + v5));
}

// A transformed tile, row by row (row xi / 6).
struct Tile { r0: Row6, r1: Row6, r2: Row6, r3: Row6, r4: Row6, r5: Row6 }

fn zero_tile() -> Tile {
    let z = Row6(vec4<f32>(0.0), vec2<f32>(0.0));
    return Tile(z, z, z, z, z, z);
}

// The transformed tile t (at pos) of channel c, zero past the edges.
fn tile(c: u32, t: u32, pos: vec3<u32>) -> Tile {
    if (!tile_exists(c, t)) { return zero_tile(); }
    let o = tile_origin(c, pos, 4u);
    let d0 = row6(o, 0);
    let d1 = row6(o, 1);
    let d2 = row6(o, 2);
    let d3 = row6(o, 3);
    let d4 = row6(o, 4);
    let d5 = row6(o, 5);
    // B^T over the rows (a column transform), then over each row.
    let s12 = add(d1, d2);
    let s34 = add(d3, d4);
    let e0 = add(sub(scale(d0, 4.0), scale(d2, 5.0)), d4);
    let e1 = sub(s34, scale(s12, 4.0));
    let e2 = add(scale(sub(d1, d2), 4.0), sub(d4, d3));
    let e3 = add(scale(sub(d3, d1), 2.0), sub(d4, d2));
    let e4 = add(scale(sub(d1, d3), 2.0), sub(d4, d2));
    let e5 = add(sub(scale(d1, 4.0), scale(d3, 5.0)), d5);
    return Tile(bt(e0), bt(e1), bt(e2), bt(e3), bt(e4), bt(e5));
}

fn row_of(q: Tile, r: u32) -> Row6 {
    switch r {
        case 0u: { return q.r0; }
        case 1u: { return q.r1; }
        case 2u: { return q.r2; }
        case 3u: { return q.r3; }
        case 4u: { return q.r4; }
        default: { return q.r5; }
    }
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
    for (var r = 0u; r < 6u; r++) {
        let a = row_of(q0, r);
        let b = row_of(q1, r);
        let d = row_of(q2, r);
        let e = row_of(q3, r);
        let xi = 6u * r;
        store(((xi) * cp + c) * t4s + t4, vec4<f32>(a.lo.x, b.lo.x, d.lo.x, e.lo.x));
        store(((xi + 1u) * cp + c) * t4s + t4, vec4<f32>(a.lo.y, b.lo.y, d.lo.y, e.lo.y));
        store(((xi + 2u) * cp + c) * t4s + t4, vec4<f32>(a.lo.z, b.lo.z, d.lo.z, e.lo.z));
        store(((xi + 3u) * cp + c) * t4s + t4, vec4<f32>(a.lo.w, b.lo.w, d.lo.w, e.lo.w));
        store(((xi + 4u) * cp + c) * t4s + t4, vec4<f32>(a.hi.x, b.hi.x, d.hi.x, e.hi.x));
        store(((xi + 5u) * cp + c) * t4s + t4, vec4<f32>(a.hi.y, b.hi.y, d.hi.y, e.hi.y));
    }
}
