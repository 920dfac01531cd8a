// Winograd F(4x4, 3x3) output transform: for every output channel and tile, the 4x4 outputs
// A^T Mt A (A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1]) of the 36 batched
// matmul results Mt[(xi * M + m) * tp + t], plus bias and the fused activation; outputs past the
// (oh, ow) edge are not stored.
// An invocation finishes four consecutive tiles of one channel, their products read as vec4s (winograd_put.wgsl).
// Params: 0 total (M * tp / 4), 1 T (tiles in the block), 2 tw, 3 th, 4 M, 5 oh, 6 ow, 7 tp, 8 flags (1: bias,
// 2: add the residual that Y holds already (FusedConv)), 9..11 activation alpha/beta/gamma, 12 first image,
// 13 first tile row (of the block of tiles whose products MT holds; see winograd_put.wgsl); udiv's divisor words
// (a divisor and its f32 reciprocal): 14, 15 tw and 16, 17 th (GRID_WORDS, winograd_tiles.wgsl), 18, 19 tp / 4.
// Sizes, not override constants: one pipeline serves every image size, at three udivs per invocation (its
// channel and first tile, the tile's position; the other three tiles step from it).
#include "common/params.wgsl"
#include "common/math.wgsl"

#include "compute/winograd_tiles.wgsl"

const GRID_WORDS: u32 = 14u;

@group(0) @binding(0) var<storage, read> MT: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> BIAS: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;

#include "compute/winograd_put.wgsl"

// Row r (six xi, 6 * r + j) of the transformed tiles, each a vec4 over the four tiles.
struct Row6 { v0: vec4<f32>, v1: vec4<f32>, v2: vec4<f32>, v3: vec4<f32>, v4: vec4<f32>, v5: vec4<f32> }

fn row(o: u32, s: u32) -> Row6 {
    return Row6(MT[o], MT[o + s], MT[o + 2u * s], MT[o + 3u * s], MT[o + 4u * s], MT[o + 5u * s]);
}

fn add(a: Row6, b: Row6) -> Row6 { return Row6(a.v0 + b.v0, a.v1 + b.v1, a.v2 + b.v2, a.v3 + b.v3, a.v4 + b.v4, a.v5 + b.v5); }
fn sub(a: Row6, b: Row6) -> Row6 { return Row6(a.v0 - b.v0, a.v1 - b.v1, a.v2 - b.v2, a.v3 - b.v3, a.v4 - b.v4, a.v5 - b.v5); }
fn scale(a: Row6, k: f32) -> Row6 { return Row6(k * a.v0, k * a.v1, k * a.v2, k * a.v3, k * a.v4, k * a.v5); }

// A^T applied to six values: four, the output columns (each over the four tiles) of one output row.
fn at(v: Row6) -> mat4x4<f32> {
    let p12 = v.v1 + v.v2;
    let m12 = v.v1 - v.v2;
    let p34 = v.v3 + v.v4;
    let m34 = v.v3 - v.v4;
    return mat4x4<f32>(v.v0 + p12 + p34, m12 + 2.0 * m34, p12 + 4.0 * p34, m12 + 8.0 * m34 + v.v5);
}

// The 4x4 outputs of one tile at pos, row by row.
fn finish(m: u32, pos: vec3<u32>, rows: array<vec4<f32>, 4>, e: Epilogue) {
    let corner = out_origin(m, pos, 4u);
    let oy = corner.y;
    let ox = corner.z;
    let oh = pu(5u);
    let ow = pu(6u);
    for (var r = 0u; r < 4u; r++) {
        if (oy + r < oh) {
            let yb = corner.x + r * ow;
            let v = rows[r];
            put(yb, v.x, e);
            if (ox + 1u < ow) { put(yb + 1u, v.y, e); }
            if (ox + 2u < ow) { put(yb + 2u, v.z, e); }
            if (ox + 3u < ow) { put(yb + 3u, v.w, e); }
        }
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let site = out_site(i);
    let o = site.o;
    let s = site.s;
    let m0 = row(o, s);
    let m1 = row(o + 6u * s, s);
    let m2 = row(o + 12u * s, s);
    let m3 = row(o + 18u * s, s);
    let m4 = row(o + 24u * s, s);
    let m5 = row(o + 30u * s, s);
    // A^T over the rows, then over each resulting row; transposed, output row r of tile k is y_r[k].
    let p12 = add(m1, m2);
    let d12 = sub(m1, m2);
    let p34 = add(m3, m4);
    let d34 = sub(m3, m4);
    let y0 = transpose(at(add(add(m0, p12), p34)));
    let y1 = transpose(at(add(d12, scale(d34, 2.0))));
    let y2 = transpose(at(add(p12, scale(p34, 4.0))));
    let y3 = transpose(at(add(add(d12, scale(d34, 8.0)), m5)));
    let e = epilogue(site.m);
    let tiles = pu(1u);
    let p0 = site.pos;
    finish(site.m, p0, array<vec4<f32>, 4>(y0[0], y1[0], y2[0], y3[0]), e);
    let p1 = next_tile(p0);
    if (site.t + 1u < tiles) { finish(site.m, p1, array<vec4<f32>, 4>(y0[1], y1[1], y2[1], y3[1]), e); }
    let p2 = next_tile(p1);
    if (site.t + 2u < tiles) { finish(site.m, p2, array<vec4<f32>, 4>(y0[2], y1[2], y2[2], y3[2]), e); }
    if (site.t + 3u < tiles) {
        finish(site.m, next_tile(p2), array<vec4<f32>, 4>(y0[3], y1[3], y2[3], y3[3]), e);
    }
}
