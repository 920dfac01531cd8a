// Winograd F(2x2, 3x3) output transform: for every output channel and tile, the 2x2 outputs
// A^T Mt A (A^T = [1 1 1 0; 0 1 -1 -1]) of the 16 batched matmul results Mt[(xi * M + m) * tp + t],
// plus bias and the fused activation; outputs past the (oh, ow) edge are not stored.
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

// One row (four xi) of the transformed tiles: column j is xi = 4 * row + j, a vec4 over the four tiles.
fn row(o: u32, s: u32) -> mat4x4<f32> { return mat4x4<f32>(MT[o], MT[o + s], MT[o + 2u * s], MT[o + 3u * s]); }

// The 2x2 outputs of tile k (a component of the vec4s) at pos.
fn finish(m: u32, pos: vec3<u32>, y00: f32, y01: f32, y10: f32, y11: f32, e: Epilogue) {
    let corner = out_origin(m, pos, 2u);
    let yb = corner.x;
    let oy = corner.y;
    let ox = corner.z;
    let oh = pu(5u);
    let ow = pu(6u);
    put(yb, y00, e);
    if (ox + 1u < ow) { put(yb + 1u, y01, e); }
    if (oy + 1u < oh) {
        put(yb + ow, y10, e);
        if (ox + 1u < ow) { put(yb + ow + 1u, y11, e); }
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
    let m1 = row(o + 4u * s, s);
    let m2 = row(o + 8u * s, s);
    let m3 = row(o + 12u * s, s);
    let a0 = m0 + m1 + m2;
    let a1 = m1 - m2 - m3;
    let y00 = a0[0] + a0[1] + a0[2];
    let y01 = a0[1] - a0[2] - a0[3];
    let y10 = a1[0] + a1[1] + a1[2];
    let y11 = a1[1] - a1[2] - a1[3];
    let e = epilogue(site.m);
    let tiles = pu(1u);
    let p0 = site.pos;
    finish(site.m, p0, y00.x, y01.x, y10.x, y11.x, e);
    let p1 = next_tile(p0);
    if (site.t + 1u < tiles) { finish(site.m, p1, y00.y, y01.y, y10.y, y11.y, e); }
    let p2 = next_tile(p1);
    if (site.t + 2u < tiles) { finish(site.m, p2, y00.z, y01.z, y10.z, y11.z, e); }
    if (site.t + 3u < tiles) { finish(site.m, next_tile(p2), y00.w, y01.w, y10.w, y11.w, e); }
}
