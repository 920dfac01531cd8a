// Winograd F(4x4, 3x3) output transform: for every output channel and tile, the 4x4 outputs
// A^T Mt A (A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1]) of the 36 batched
// matmul results Mt[(xi * M + m) * tp + t], plus bias and the fused activation; outputs past the
// (oh, ow) edge are not stored.
// Params: 0 total (M * T), 1 T (tiles in the block), 2 tw, 3 th, 4 M, 5 oh, 6 ow, 7 tp, 8 flags (1: bias, 2: add the residual
// that Y holds already (FusedConv)),
// 9..11 activation alpha/beta/gamma, 12 first image, 13 first tile row (of the block of tiles whose
// products MT holds; see winograd_put.wgsl).
#include "common/params.wgsl"
#include "common/math.wgsl"

#include "compute/winograd_tiles.wgsl"

// The tile count, a pipeline constant like the tile grid (winograd_tiles.wgsl).
override TILES: u32 = 1u;

@group(0) @binding(0) var<storage, read> MT: array<f32>;
@group(0) @binding(1) var<storage, read> BIAS: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;

#include "compute/winograd_put.wgsl"

struct Row6 { lo: vec4<f32>, hi: vec2<f32> }

// Row r (six xi) of the transformed tile.
fn row(o: u32, s: u32) -> Row6 {
    return Row6(vec4<f32>(MT[o], MT[o + s], MT[o + 2u * s], MT[o + 3u * s]), vec2<f32>(MT[o + 4u * s], MT[o + 5u * s]));
}

// A^T applied to six values: four.
fn at(v: Row6) -> vec4<f32> {
    let p12 = v.lo.y + v.lo.z;
    let m12 = v.lo.y - v.lo.z;
    let p34 = v.lo.w + v.hi.x;
    let m34 = v.lo.w - v.hi.x;
    return vec4<f32>(v.lo.x + p12 + p34, m12 + 2.0 * m34, p12 + 4.0 * p34, m12 + 8.0 * m34 + v.hi.y);
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
    // A^T over the rows, then over each resulting row.
    let p12 = Row6(m1.lo + m2.lo, m1.hi + m2.hi);
    let d12 = Row6(m1.lo - m2.lo, m1.hi - m2.hi);
    let p34 = Row6(m3.lo + m4.lo, m3.hi + m4.hi);
    let d34 = Row6(m3.lo - m4.lo, m3.hi - m4.hi);
    let y0 = at(Row6(m0.lo + p12.lo + p34.lo, m0.hi + p12.hi + p34.hi));
    let y1 = at(Row6(d12.lo + 2.0 * d34.lo, d12.hi + 2.0 * d34.hi));
    let y2 = at(Row6(p12.lo + 4.0 * p34.lo, p12.hi + 4.0 * p34.hi));
    let y3 = at(Row6(d12.lo + 8.0 * d34.lo + m5.lo, d12.hi + 8.0 * d34.hi + m5.hi));
    let e = epilogue(site.m);
    let corner = out_origin(site, 4u);
    let oy = corner.y;
    let ox = corner.z;
    let oh = pu(5u);
    let ow = pu(6u);
    let rows = array<vec4<f32>, 4>(y0, y1, y2, y3);
    for (var r = 0u; r < 4u; r++) {
        if (oy + r >= oh) { break; }
        let yb = corner.x + r * ow;
        let v = rows[r];
        put(yb, v.x, e);
        if (ox + 1u < ow) { put(yb + 1u, v.y, e); }
        if (ox + 2u < ow) { put(yb + 2u, v.z, e); }
        if (ox + 3u < ow) { put(yb + 3u, v.w, e); }
    }
}
