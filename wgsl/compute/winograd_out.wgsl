// Winograd F(2x2, 3x3) output transform: for every output channel and tile, the 2x2 outputs
// A^T Mt A (A^T = [1 1 1 0; 0 1 -1 -1]) of the 16 batched matmul results Mt[(xi * M + m) * tp + t],
// plus bias and the fused activation; outputs past the (oh, ow) edge are not stored.
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

// One row (four xi) of the transformed tile.
fn row(o: u32, s: u32) -> vec4<f32> { return vec4<f32>(MT[o], MT[o + s], MT[o + 2u * s], MT[o + 3u * s]); }

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
    let e = epilogue(site.m);
    let corner = out_origin(site, 2u);
    let yb = corner.x;
    let oy = corner.y;
    let ox = corner.z;
    let oh = pu(5u);
    let ow = pu(6u);
    put(yb, a0.x + a0.y + a0.z, e);
    if (ox + 1u < ow) { put(yb + 1u, a0.y - a0.z - a0.w, e); }
    if (oy + 1u < oh) {
        put(yb + ow, a1.x + a1.y + a1.z, e);
        if (ox + 1u < ow) { put(yb + ow + 1u, a1.y - a1.z - a1.w, e); }
    }
}
