// Shifted input copies for the implicit-GEMM convolution (conv_gpu.py): for copy j = (row phase a,
// kernel column kx) XS[n, j, c, r, x] = X[n, c0 + c, r * sh + a - ph, x * sw + kx * dw - pw], zero outside
// the input, for channels c >= Cg (padding to a multiple of 4) and columns x >= ow. Tap (ky, kx) of the
// convolution then reads its B row for channel c at one fixed offset from every output pixel
// p = oy * Wp + ox, so the matmul loads stay vec4 and contiguous.
// One invocation writes one row of Wp / 4 vec4s; the index arithmetic is done once per row
// (integer division is slow on lavapipe).
// A convolution whose copies would pass the binding limit runs in blocks of output rows and images: XS then
// holds the block's copies, r and n counting from row r0 (param 14) and image n0 (param 15).
// Params: 0 rows (N * copies * Cg4 * Hp), 1 Wp / 4, 2 Hp, 3 Cg4, 4 copies, 5 C, 6 c0, 7 Cg, 8 H, 9 W,
// 10 sh, 11 sw, 12 ow, 13 ph, 14 r0, 15 n0; 16 + 2j, 17 + 2j: copy j's row phase a and column offset
// kx * dw - pw.
#include "common/params.wgsl"

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read_write> XS: array<vec4<f32>>;
@group(0) @binding(2) var<uniform> params: Params;

fn tap_value(row: u32, ix: i32, w: i32, ok: bool) -> f32 {
    let inb = ok && ix >= 0 && ix < w;
    let v = X[row + u32(select(0, ix, inb))];
    return select(0.0, v, inb);
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let wp4 = pu(1u);
    let hp = pu(2u);
    let cg4 = pu(3u);
    let nc = pu(4u);
    let r = i % hp;
    let q = i / hp;
    let c = q % cg4;
    let q2 = q / cg4;
    let j = q2 % nc;
    let n = q2 / nc;
    let h = pi(8u);
    let w = pi(9u);
    let iy = i32((r + pu(14u)) * pu(10u)) + pi(16u + 2u * j) - pi(13u);
    let ok_row = c < pu(7u) && iy >= 0 && iy < h;
    let plane = (n + pu(15u)) * pu(5u) + pu(6u) + min(c, pu(7u) - 1u);
    let row = (plane * u32(h) + u32(clamp(iy, 0, h - 1))) * u32(w);
    let sw = pi(11u);
    let ow = pi(12u);
    let out = i * wp4;
    var ix = pi(17u + 2u * j);
    var x = 0;
    for (var x4 = 0u; x4 < wp4; x4++) {
        let v0 = tap_value(row, ix, w, ok_row && x < ow);
        let v1 = tap_value(row, ix + sw, w, ok_row && x + 1 < ow);
        let v2 = tap_value(row, ix + 2 * sw, w, ok_row && x + 2 < ow);
        let v3 = tap_value(row, ix + 3 * sw, w, ok_row && x + 3 < ow);
        XS[out + x4] = vec4<f32>(v0, v1, v2, v3);
        ix += 4 * sw;
        x += 4;
    }
}
