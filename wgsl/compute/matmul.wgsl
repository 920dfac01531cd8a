// Y = act(alpha * op(A) @ op(B) + beta * bias): each invocation computes an 8x16 output tile.
// Register-tiled without workgroup memory (barriers are costly on lavapipe); written out unrolled
// because lavapipe keeps unrolled scalars in registers (the same loops over arrays ran 4x slower).
// Substitutions pick how A and B are read: TA/TB are the storage types (vec4<f32> when rows are
// 16-byte aligned and contiguous, else f32), LOAD_A/LOAD_A1/LOAD_B are the loader bodies.
// Params: 0 M, 1 N, 2 K, 3 column tiles, 4 A row stride, 5 A k stride, 6 B k stride, 7 B column
// stride (strides in units of TA/TB), 8 Y row stride, 9 Y column offset, 10/11 bias row/column
// stride (bias columns count from Y column 0), 12 flags (1 bias, 2 accumulate into Y, 4 apply bias+activation), 13 alpha, 14 beta,
// 15..17 activation alpha/beta/gamma, 18 batch rank, 20..23 batch shape, 24..27 A batch strides,
// 28..31 B batch strides, 32..35 Y batch strides (elements or TA/TB units like the row strides).
#include "common/params.wgsl"
#include "common/math.wgsl"

@group(0) @binding(0) var<storage, read> A: array<{{TA}}>;
@group(0) @binding(1) var<storage, read> B: array<{{TB}}>;
@group(0) @binding(2) var<storage, read> BIAS: array<f32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;
@group(0) @binding(4) var<uniform> params: Params;

// Four consecutive k of row base `ra` (k4 counts groups of four).
fn load_a(ra: u32, k4: u32) -> vec4<f32> { {{LOAD_A}} }
// One k of row base `ra` (the K % 4 tail, scalar A only).
fn load_a1(ra: u32, k: u32) -> f32 { {{LOAD_A1}} }
// Four consecutive columns from column `cb` of the B row starting at `kb`; `nl` is the last column.
fn load_b(kb: u32, cb: u32, nl: u32) -> vec4<f32> { {{LOAD_B}} }

// Per-dispatch epilogue values, read from the uniform block once per invocation.
struct Ep { flags: u32, yrow: u32, ycol: u32, bm: u32, bn: u32, scale: f32, beta: f32, alpha_: f32, beta_: f32, gamma_: f32 }

fn epilogue(acc: f32, m: u32, n: u32, yb: u32, e: Ep) {
    let yi = yb + m * e.yrow + e.ycol + n;
    var v = e.scale * acc;
    if ((e.flags & 2u) != 0u) { v += Y[yi]; }
    if ((e.flags & 4u) != 0u) {
        if ((e.flags & 1u) != 0u) { v += e.beta * BIAS[m * e.bm + (n + e.ycol) * e.bn]; }
        let alpha = e.alpha_;
        let beta = e.beta_;
        let gamma = e.gamma_;
        v = {{ACT}};
    }
    Y[yi] = v;
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let M = pu(0u);
    let N = pu(1u);
    let K = pu(2u);
    let tiles_n = pu(3u);
    let t = flat_index(gid, nwg);
    let tm = t / tiles_n;
    let r0 = tm * 8u;
    let n0 = (t - tm * tiles_n) * 16u;
    if (r0 >= M) { return; }
    // Batch offsets (broadcast batch dims have stride 0).
    var ab = 0u;
    var bb = 0u;
    var yb = 0u;
    var rem = gid.z;
    for (var d = 0u; d < pu(18u); d++) {
        let axis = pu(18u) - 1u - d;
        let dim = pu(20u + axis);
        let idx = rem % dim;
        rem = rem / dim;
        ab += idx * pu(24u + axis);
        bb += idx * pu(28u + axis);
        yb += idx * pu(32u + axis);
    }
    // Rows and columns past the edge are clamped (their results are never stored), which keeps
    // bounds checks out of the inner loop.
    let ml = M - 1u;
    let nl = N - 1u;
    let ars = pu(4u);
    let ra0 = ab + min(r0 + 0u, ml) * ars;
    let ra1 = ab + min(r0 + 1u, ml) * ars;
    let ra2 = ab + min(r0 + 2u, ml) * ars;
    let ra3 = ab + min(r0 + 3u, ml) * ars;
    let ra4 = ab + min(r0 + 4u, ml) * ars;
    let ra5 = ab + min(r0 + 5u, ml) * ars;
    let ra6 = ab + min(r0 + 6u, ml) * ars;
    let ra7 = ab + min(r0 + 7u, ml) * ars;
    let bvec = {{BVEC}};
    let cb0 = select(min(n0 + 0u, nl), min((n0 + 0u) / 4u, nl / 4u), bvec);
    let cb1 = select(min(n0 + 4u, nl), min((n0 + 4u) / 4u, nl / 4u), bvec);
    let cb2 = select(min(n0 + 8u, nl), min((n0 + 8u) / 4u, nl / 4u), bvec);
    let cb3 = select(min(n0 + 12u, nl), min((n0 + 12u) / 4u, nl / 4u), bvec);
    var c0_0 = vec4<f32>(0.0); var c0_1 = vec4<f32>(0.0); var c0_2 = vec4<f32>(0.0); var c0_3 = vec4<f32>(0.0);
    var c1_0 = vec4<f32>(0.0); var c1_1 = vec4<f32>(0.0); var c1_2 = vec4<f32>(0.0); var c1_3 = vec4<f32>(0.0);
    var c2_0 = vec4<f32>(0.0); var c2_1 = vec4<f32>(0.0); var c2_2 = vec4<f32>(0.0); var c2_3 = vec4<f32>(0.0);
    var c3_0 = vec4<f32>(0.0); var c3_1 = vec4<f32>(0.0); var c3_2 = vec4<f32>(0.0); var c3_3 = vec4<f32>(0.0);
    var c4_0 = vec4<f32>(0.0); var c4_1 = vec4<f32>(0.0); var c4_2 = vec4<f32>(0.0); var c4_3 = vec4<f32>(0.0);
    var c5_0 = vec4<f32>(0.0); var c5_1 = vec4<f32>(0.0); var c5_2 = vec4<f32>(0.0); var c5_3 = vec4<f32>(0.0);
    var c6_0 = vec4<f32>(0.0); var c6_1 = vec4<f32>(0.0); var c6_2 = vec4<f32>(0.0); var c6_3 = vec4<f32>(0.0);
    var c7_0 = vec4<f32>(0.0); var c7_1 = vec4<f32>(0.0); var c7_2 = vec4<f32>(0.0); var c7_3 = vec4<f32>(0.0);
    let bks = pu(6u);
    let K4 = K / 4u;
    for (var k4 = 0u; k4 < K4; k4++) {
        let a0 = load_a(ra0, k4);
        let a1 = load_a(ra1, k4);
        let a2 = load_a(ra2, k4);
        let a3 = load_a(ra3, k4);
        let a4 = load_a(ra4, k4);
        let a5 = load_a(ra5, k4);
        let a6 = load_a(ra6, k4);
        let a7 = load_a(ra7, k4);
        let kb = bb + k4 * 4u * bks;
        let kb0 = kb;
        let b0_0 = load_b(kb0, cb0, nl);
        let b0_1 = load_b(kb0, cb1, nl);
        let b0_2 = load_b(kb0, cb2, nl);
        let b0_3 = load_b(kb0, cb3, nl);
        let kb1 = kb + 1u * bks;
        let b1_0 = load_b(kb1, cb0, nl);
        let b1_1 = load_b(kb1, cb1, nl);
        let b1_2 = load_b(kb1, cb2, nl);
        let b1_3 = load_b(kb1, cb3, nl);
        let kb2 = kb + 2u * bks;
        let b2_0 = load_b(kb2, cb0, nl);
        let b2_1 = load_b(kb2, cb1, nl);
        let b2_2 = load_b(kb2, cb2, nl);
        let b2_3 = load_b(kb2, cb3, nl);
        let kb3 = kb + 3u * bks;
        let b3_0 = load_b(kb3, cb0, nl);
        let b3_1 = load_b(kb3, cb1, nl);
        let b3_2 = load_b(kb3, cb2, nl);
        let b3_3 = load_b(kb3, cb3, nl);
        c0_0 = fma(vec4<f32>(a0.x), b0_0, c0_0); c0_1 = fma(vec4<f32>(a0.x), b0_1, c0_1); c0_2 = fma(vec4<f32>(a0.x), b0_2, c0_2); c0_3 = fma(vec4<f32>(a0.x), b0_3, c0_3);
        c1_0 = fma(vec4<f32>(a1.x), b0_0, c1_0); c1_1 = fma(vec4<f32>(a1.x), b0_1, c1_1); c1_2 = fma(vec4<f32>(a1.x), b0_2, c1_2); c1_3 = fma(vec4<f32>(a1.x), b0_3, c1_3);
        c2_0 = fma(vec4<f32>(a2.x), b0_0, c2_0); c2_1 = fma(vec4<f32>(a2.x), b0_1, c2_1); c2_2 = fma(vec4<f32>(a2.x), b0_2, c2_2); c2_3 = fma(vec4<f32>(a2.x), b0_3, c2_3);
        c3_0 = fma(vec4<f32>(a3.x), b0_0, c3_0); c3_1 = fma(vec4<f32>(a3.x), b0_1, c3_1); c3_2 = fma(vec4<f32>(a3.x), b0_2, c3_2); c3_3 = fma(vec4<f32>(a3.x), b0_3, c3_3);
        c4_0 = fma(vec4<f32>(a4.x), b0_0, c4_0); c4_1 = fma(vec4<f32>(a4.x), b0_1, c4_1); c4_2 = fma(vec4<f32>(a4.x), b0_2, c4_2); c4_3 = fma(vec4<f32>(a4.x), b0_3, c4_3);
        c5_0 = fma(vec4<f32>(a5.x), b0_0, c5_0); c5_1 = fma(vec4<f32>(a5.x), b0_1, c5_1); c5_2 = fma(vec4<f32>(a5.x), b0_2, c5_2); c5_3 = fma(vec4<f32>(a5.x), b0_3, c5_3);
        c6_0 = fma(vec4<f32>(a6.x), b0_0, c6_0); c6_1 = fma(vec4<f32>(a6.x), b0_1, c6_1); c6_2 = fma(vec4<f32>(a6.x), b0_2, c6_2); c6_3 = fma(vec4<f32>(a6.x), b0_3, c6_3);
        c7_0 = fma(vec4<f32>(a7.x), b0_0, c7_0); c7_1 = fma(vec4<f32>(a7.x), b0_1, c7_1); c7_2 = fma(vec4<f32>(a7.x), b0_2, c7_2); c7_3 = fma(vec4<f32>(a7.x), b0_3, c7_3);
        c0_0 = fma(vec4<f32>(a0.y), b1_0, c0_0); c0_1 = fma(vec4<f32>(a0.y), b1_1, c0_1); c0_2 = fma(vec4<f32>(a0.y), b1_2, c0_2); c0_3 = fma(vec4<f32>(a0.y), b1_3, c0_3);
        c1_0 = fma(vec4<f32>(a1.y), b1_0, c1_0); c1_1 = fma(vec4<f32>(a1.y), b1_1, c1_1); c1_2 = fma(vec4<f32>(a1.y), b1_2, c1_2); c1_3 = fma(vec4<f32>(a1.y), b1_3, c1_3);
        c2_0 = fma(vec4<f32>(a2.y), b1_0, c2_0); c2_1 = fma(vec4<f32>(a2.y), b1_1, c2_1); c2_2 = fma(vec4<f32>(a2.y), b1_2, c2_2); c2_3 = fma(vec4<f32>(a2.y), b1_3, c2_3);
        c3_0 = fma(vec4<f32>(a3.y), b1_0, c3_0); c3_1 = fma(vec4<f32>(a3.y), b1_1, c3_1); c3_2 = fma(vec4<f32>(a3.y), b1_2, c3_2); c3_3 = fma(vec4<f32>(a3.y), b1_3, c3_3);
        c4_0 = fma(vec4<f32>(a4.y), b1_0, c4_0); c4_1 = fma(vec4<f32>(a4.y), b1_1, c4_1); c4_2 = fma(vec4<f32>(a4.y), b1_2, c4_2); c4_3 = fma(vec4<f32>(a4.y), b1_3, c4_3);
        c5_0 = fma(vec4<f32>(a5.y), b1_0, c5_0); c5_1 = fma(vec4<f32>(a5.y), b1_1, c5_1); c5_2 = fma(vec4<f32>(a5.y), b1_2, c5_2); c5_3 = fma(vec4<f32>(a5.y), b1_3, c5_3);
        c6_0 = fma(vec4<f32>(a6.y), b1_0, c6_0); c6_1 = fma(vec4<f32>(a6.y), b1_1, c6_1); c6_2 = fma(vec4<f32>(a6.y), b1_2, c6_2); c6_3 = fma(vec4<f32>(a6.y), b1_3, c6_3);
        c7_0 = fma(vec4<f32>(a7.y), b1_0, c7_0); c7_1 = fma(vec4<f32>(a7.y), b1_1, c7_1); c7_2 = fma(vec4<f32>(a7.y), b1_2, c7_2); c7_3 = fma(vec4<f32>(a7.y), b1_3, c7_3);
        c0_0 = fma(vec4<f32>(a0.z), b2_0, c0_0); c0_1 = fma(vec4<f32>(a0.z), b2_1, c0_1); c0_2 = fma(vec4<f32>(a0.z), b2_2, c0_2); c0_3 = fma(vec4<f32>(a0.z), b2_3, c0_3);
        c1_0 = fma(vec4<f32>(a1.z), b2_0, c1_0); c1_1 = fma(vec4<f32>(a1.z), b2_1, c1_1); c1_2 = fma(vec4<f32>(a1.z), b2_2, c1_2); c1_3 = fma(vec4<f32>(a1.z), b2_3, c1_3);
        c2_0 = fma(vec4<f32>(a2.z), b2_0, c2_0); c2_1 = fma(vec4<f32>(a2.z), b2_1, c2_1); c2_2 = fma(vec4<f32>(a2.z), b2_2, c2_2); c2_3 = fma(vec4<f32>(a2.z), b2_3, c2_3);
        c3_0 = fma(vec4<f32>(a3.z), b2_0, c3_0); c3_1 = fma(vec4<f32>(a3.z), b2_1, c3_1); c3_2 = fma(vec4<f32>(a3.z), b2_2, c3_2); c3_3 = fma(vec4<f32>(a3.z), b2_3, c3_3);
        c4_0 = fma(vec4<f32>(a4.z), b2_0, c4_0); c4_1 = fma(vec4<f32>(a4.z), b2_1, c4_1); c4_2 = fma(vec4<f32>(a4.z), b2_2, c4_2); c4_3 = fma(vec4<f32>(a4.z), b2_3, c4_3);
        c5_0 = fma(vec4<f32>(a5.z), b2_0, c5_0); c5_1 = fma(vec4<f32>(a5.z), b2_1, c5_1); c5_2 = fma(vec4<f32>(a5.z), b2_2, c5_2); c5_3 = fma(vec4<f32>(a5.z), b2_3, c5_3);
        c6_0 = fma(vec4<f32>(a6.z), b2_0, c6_0); c6_1 = fma(vec4<f32>(a6.z), b2_1, c6_1); c6_2 = fma(vec4<f32>(a6.z), b2_2, c6_2); c6_3 = fma(vec4<f32>(a6.z), b2_3, c6_3);
        c7_0 = fma(vec4<f32>(a7.z), b2_0, c7_0); c7_1 = fma(vec4<f32>(a7.z), b2_1, c7_1); c7_2 = fma(vec4<f32>(a7.z), b2_2, c7_2); c7_3 = fma(vec4<f32>(a7.z), b2_3, c7_3);
        c0_0 = fma(vec4<f32>(a0.w), b3_0, c0_0); c0_1 = fma(vec4<f32>(a0.w), b3_1, c0_1); c0_2 = fma(vec4<f32>(a0.w), b3_2, c0_2); c0_3 = fma(vec4<f32>(a0.w), b3_3, c0_3);
        c1_0 = fma(vec4<f32>(a1.w), b3_0, c1_0); c1_1 = fma(vec4<f32>(a1.w), b3_1, c1_1); c1_2 = fma(vec4<f32>(a1.w), b3_2, c1_2); c1_3 = fma(vec4<f32>(a1.w), b3_3, c1_3);
        c2_0 = fma(vec4<f32>(a2.w), b3_0, c2_0); c2_1 = fma(vec4<f32>(a2.w), b3_1, c2_1); c2_2 = fma(vec4<f32>(a2.w), b3_2, c2_2); c2_3 = fma(vec4<f32>(a2.w), b3_3, c2_3);
        c3_0 = fma(vec4<f32>(a3.w), b3_0, c3_0); c3_1 = fma(vec4<f32>(a3.w), b3_1, c3_1); c3_2 = fma(vec4<f32>(a3.w), b3_2, c3_2); c3_3 = fma(vec4<f32>(a3.w), b3_3, c3_3);
        c4_0 = fma(vec4<f32>(a4.w), b3_0, c4_0); c4_1 = fma(vec4<f32>(a4.w), b3_1, c4_1); c4_2 = fma(vec4<f32>(a4.w), b3_2, c4_2); c4_3 = fma(vec4<f32>(a4.w), b3_3, c4_3);
        c5_0 = fma(vec4<f32>(a5.w), b3_0, c5_0); c5_1 = fma(vec4<f32>(a5.w), b3_1, c5_1); c5_2 = fma(vec4<f32>(a5.w), b3_2, c5_2); c5_3 = fma(vec4<f32>(a5.w), b3_3, c5_3);
        c6_0 = fma(vec4<f32>(a6.w), b3_0, c6_0); c6_1 = fma(vec4<f32>(a6.w), b3_1, c6_1); c6_2 = fma(vec4<f32>(a6.w), b3_2, c6_2); c6_3 = fma(vec4<f32>(a6.w), b3_3, c6_3);
        c7_0 = fma(vec4<f32>(a7.w), b3_0, c7_0); c7_1 = fma(vec4<f32>(a7.w), b3_1, c7_1); c7_2 = fma(vec4<f32>(a7.w), b3_2, c7_2); c7_3 = fma(vec4<f32>(a7.w), b3_3, c7_3);
    }
    for (var k = K4 * 4u; k < K; k++) {
        let kb = bb + k * bks;
        let b0 = load_b(kb, cb0, nl);
        let b1 = load_b(kb, cb1, nl);
        let b2 = load_b(kb, cb2, nl);
        let b3 = load_b(kb, cb3, nl);
        let a0 = load_a1(ra0, k);
        c0_0 = fma(vec4<f32>(a0), b0, c0_0); c0_1 = fma(vec4<f32>(a0), b1, c0_1); c0_2 = fma(vec4<f32>(a0), b2, c0_2); c0_3 = fma(vec4<f32>(a0), b3, c0_3);
        let a1 = load_a1(ra1, k);
        c1_0 = fma(vec4<f32>(a1), b0, c1_0); c1_1 = fma(vec4<f32>(a1), b1, c1_1); c1_2 = fma(vec4<f32>(a1), b2, c1_2); c1_3 = fma(vec4<f32>(a1), b3, c1_3);
        let a2 = load_a1(ra2, k);
        c2_0 = fma(vec4<f32>(a2), b0, c2_0); c2_1 = fma(vec4<f32>(a2), b1, c2_1); c2_2 = fma(vec4<f32>(a2), b2, c2_2); c2_3 = fma(vec4<f32>(a2), b3, c2_3);
        let a3 = load_a1(ra3, k);
        c3_0 = fma(vec4<f32>(a3), b0, c3_0); c3_1 = fma(vec4<f32>(a3), b1, c3_1); c3_2 = fma(vec4<f32>(a3), b2, c3_2); c3_3 = fma(vec4<f32>(a3), b3, c3_3);
        let a4 = load_a1(ra4, k);
        c4_0 = fma(vec4<f32>(a4), b0, c4_0); c4_1 = fma(vec4<f32>(a4), b1, c4_1); c4_2 = fma(vec4<f32>(a4), b2, c4_2); c4_3 = fma(vec4<f32>(a4), b3, c4_3);
        let a5 = load_a1(ra5, k);
        c5_0 = fma(vec4<f32>(a5), b0, c5_0); c5_1 = fma(vec4<f32>(a5), b1, c5_1); c5_2 = fma(vec4<f32>(a5), b2, c5_2); c5_3 = fma(vec4<f32>(a5), b3, c5_3);
        let a6 = load_a1(ra6, k);
        c6_0 = fma(vec4<f32>(a6), b0, c6_0); c6_1 = fma(vec4<f32>(a6), b1, c6_1); c6_2 = fma(vec4<f32>(a6), b2, c6_2); c6_3 = fma(vec4<f32>(a6), b3, c6_3);
        let a7 = load_a1(ra7, k);
        c7_0 = fma(vec4<f32>(a7), b0, c7_0); c7_1 = fma(vec4<f32>(a7), b1, c7_1); c7_2 = fma(vec4<f32>(a7), b2, c7_2); c7_3 = fma(vec4<f32>(a7), b3, c7_3);
    }
    let e = Ep(pu(12u), pu(8u), pu(9u), pu(10u), pu(11u), pf(13u), pf(14u), pf(15u), pf(16u), pf(17u));
    if (r0 + 0u <= ml) {
        if (n0 + 0u <= nl) { epilogue(c0_0.x, r0 + 0u, n0 + 0u, yb, e); }
        if (n0 + 1u <= nl) { epilogue(c0_0.y, r0 + 0u, n0 + 1u, yb, e); }
        if (n0 + 2u <= nl) { epilogue(c0_0.z, r0 + 0u, n0 + 2u, yb, e); }
        if (n0 + 3u <= nl) { epilogue(c0_0.w, r0 + 0u, n0 + 3u, yb, e); }
        if (n0 + 4u <= nl) { epilogue(c0_1.x, r0 + 0u, n0 + 4u, yb, e); }
        if (n0 + 5u <= nl) { epilogue(c0_1.y, r0 + 0u, n0 + 5u, yb, e); }
        if (n0 + 6u <= nl) { epilogue(c0_1.z, r0 + 0u, n0 + 6u, yb, e); }
        if (n0 + 7u <= nl) { epilogue(c0_1.w, r0 + 0u, n0 + 7u, yb, e); }
        if (n0 + 8u <= nl) { epilogue(c0_2.x, r0 + 0u, n0 + 8u, yb, e); }
        if (n0 + 9u <= nl) { epilogue(c0_2.y, r0 + 0u, n0 + 9u, yb, e); }
        if (n0 + 10u <= nl) { epilogue(c0_2.z, r0 + 0u, n0 + 10u, yb, e); }
        if (n0 + 11u <= nl) { epilogue(c0_2.w, r0 + 0u, n0 + 11u, yb, e); }
        if (n0 + 12u <= nl) { epilogue(c0_3.x, r0 + 0u, n0 + 12u, yb, e); }
        if (n0 + 13u <= nl) { epilogue(c0_3.y, r0 + 0u, n0 + 13u, yb, e); }
        if (n0 + 14u <= nl) { epilogue(c0_3.z, r0 + 0u, n0 + 14u, yb, e); }
        if (n0 + 15u <= nl) { epilogue(c0_3.w, r0 + 0u, n0 + 15u, yb, e); }
    }
    if (r0 + 1u <= ml) {
        if (n0 + 0u <= nl) { epilogue(c1_0.x, r0 + 1u, n0 + 0u, yb, e); }
        if (n0 + 1u <= nl) { epilogue(c1_0.y, r0 + 1u, n0 + 1u, yb, e); }
        if (n0 + 2u <= nl) { epilogue(c1_0.z, r0 + 1u, n0 + 2u, yb, e); }
        if (n0 + 3u <= nl) { epilogue(c1_0.w, r0 + 1u, n0 + 3u, yb, e); }
        if (n0 + 4u <= nl) { epilogue(c1_1.x, r0 + 1u, n0 + 4u, yb, e); }
        if (n0 + 5u <= nl) { epilogue(c1_1.y, r0 + 1u, n0 + 5u, yb, e); }
        if (n0 + 6u <= nl) { epilogue(c1_1.z, r0 + 1u, n0 + 6u, yb, e); }
        if (n0 + 7u <= nl) { epilogue(c1_1.w, r0 + 1u, n0 + 7u, yb, e); }
        if (n0 + 8u <= nl) { epilogue(c1_2.x, r0 + 1u, n0 + 8u, yb, e); }
        if (n0 + 9u <= nl) { epilogue(c1_2.y, r0 + 1u, n0 + 9u, yb, e); }
        if (n0 + 10u <= nl) { epilogue(c1_2.z, r0 + 1u, n0 + 10u, yb, e); }
        if (n0 + 11u <= nl) { epilogue(c1_2.w, r0 + 1u, n0 + 11u, yb, e); }
        if (n0 + 12u <= nl) { epilogue(c1_3.x, r0 + 1u, n0 + 12u, yb, e); }
        if (n0 + 13u <= nl) { epilogue(c1_3.y, r0 + 1u, n0 + 13u, yb, e); }
        if (n0 + 14u <= nl) { epilogue(c1_3.z, r0 + 1u, n0 + 14u, yb, e); }
        if (n0 + 15u <= nl) { epilogue(c1_3.w, r0 + 1u, n0 + 15u, yb, e); }
    }
    if (r0 + 2u <= ml) {
        if (n0 + 0u <= nl) { epilogue(c2_0.x, r0 + 2u, n0 + 0u, yb, e); }
        if (n0 + 1u <= nl) { epilogue(c2_0.y, r0 + 2u, n0 + 1u, yb, e); }
        if (n0 + 2u <= nl) { epilogue(c2_0.z, r0 + 2u, n0 + 2u, yb, e); }
        if (n0 + 3u <= nl) { epilogue(c2_0.w, r0 + 2u, n0 + 3u, yb, e); }
        if (n0 + 4u <= nl) { epilogue(c2_1.x, r0 + 2u, n0 + 4u, yb, e); }
        if (n0 + 5u <= nl) { epilogue(c2_1.y, r0 + 2u, n0 + 5u, yb, e); }
        if (n0 + 6u <= nl) { epilogue(c2_1.z, r0 + 2u, n0 + 6u, yb, e); }
        if (n0 + 7u <= nl) { epilogue(c2_1.w, r0 + 2u, n0 + 7u, yb, e); }
        if (n0 + 8u <= nl) { epilogue(c2_2.x, r0 + 2u, n0 + 8u, yb, e); }
        if (n0 + 9u <= nl) { epilogue(c2_2.y, r0 + 2u, n0 + 9u, yb, e); }
        if (n0 + 10u <= nl) { epilogue(c2_2.z, r0 + 2u, n0 + 10u, yb, e); }
        if (n0 + 11u <= nl) { epilogue(c2_2.w, r0 + 2u, n0 + 11u, yb, e); }
        if (n0 + 12u <= nl) { epilogue(c2_3.x, r0 + 2u, n0 + 12u, yb, e); }
        if (n0 + 13u <= nl) { epilogue(c2_3.y, r0 + 2u, n0 + 13u, yb, e); }
        if (n0 + 14u <= nl) { epilogue(c2_3.z, r0 + 2u, n0 + 14u, yb, e); }
        if (n0 + 15u <= nl) { epilogue(c2_3.w, r0 + 2u, n0 + 15u, yb, e); }
    }
    if (r0 + 3u <= ml) {
        if (n0 + 0u <= nl) { epilogue(c3_0.x, r0 + 3u, n0 + 0u, yb, e); }
        if (n0 + 1u <= nl) { epilogue(c3_0.y, r0 + 3u, n0 + 1u, yb, e); }
        if (n0 + 2u <= nl) { epilogue(c3_0.z, r0 + 3u, n0 + 2u, yb, e); }
        if (n0 + 3u <= nl) { epilogue(c3_0.w, r0 + 3u, n0 + 3u, yb, e); }
        if (n0 + 4u <= nl) { epilogue(c3_1.x, r0 + 3u, n0 + 4u, yb, e); }
        if (n0 + 5u <= nl) { epilogue(c3_1.y, r0 + 3u, n0 + 5u, yb, e); }
        if (n0 + 6u <= nl) { epilogue(c3_1.z, r0 + 3u, n0 + 6u, yb, e); }
        if (n0 + 7u <= nl) { epilogue(c3_1.w, r0 + 3u, n0 + 7u, yb, e); }
        if (n0 + 8u <= nl) { epilogue(c3_2.x, r0 + 3u, n0 + 8u, yb, e); }
        if (n0 + 9u <= nl) { epilogue(c3_2.y, r0 + 3u, n0 + 9u, yb, e); }
        if (n0 + 10u <= nl) { epilogue(c3_2.z, r0 + 3u, n0 + 10u, yb, e); }
        if (n0 + 11u <= nl) { epilogue(c3_2.w, r0 + 3u, n0 + 11u, yb, e); }
        if (n0 + 12u <= nl) { epilogue(c3_3.x, r0 + 3u, n0 + 12u, yb, e); }
        if (n0 + 13u <= nl) { epilogue(c3_3.y, r0 + 3u, n0 + 13u, yb, e); }
        if (n0 + 14u <= nl) { epilogue(c3_3.z, r0 + 3u, n0 + 14u, yb, e); }
        if (n0 + 15u <= nl) { epilogue(c3_3.w, r0 + 3u, n0 + 15u, yb, e); }
    }
    if (r0 + 4u <= ml) {
        if (n0 + 0u <= nl) { epilogue(c4_0.x, r0 + 4u, n0 + 0u, yb, e); }
        if (n0 + 1u <= nl) { epilogue(c4_0.y, r0 + 4u, n0 + 1u, yb, e); }
        if (n0 + 2u <= nl) { epilogue(c4_0.z, r0 + 4u, n0 + 2u, yb, e); }
        if (n0 + 3u <= nl) { epilogue(c4_0.w, r0 + 4u, n0 + 3u, yb, e); }
        if (n0 + 4u <= nl) { epilogue(c4_1.x, r0 + 4u, n0 + 4u, yb, e); }
        if (n0 + 5u <= nl) { epilogue(c4_1.y, r0 + 4u, n0 + 5u, yb, e); }
        if (n0 + 6u <= nl) { epilogue(c4_1.z, r0 + 4u, n0 + 6u, yb, e); }
        if (n0 + 7u <= nl) { epilogue(c4_1.w, r0 + 4u, n0 + 7u, yb, e); }
        if (n0 + 8u <= nl) { epilogue(c4_2.x, r0 + 4u, n0 + 8u, yb, e); }
        if (n0 + 9u <= nl) { epilogue(c4_2.y, r0 + 4u, n0 + 9u, yb, e); }
        if (n0 + 10u <= nl) { epilogue(c4_2.z, r0 + 4u, n0 + 10u, yb, e); }
        if (n0 + 11u <= nl) { epilogue(c4_2.w, r0 + 4u, n0 + 11u, yb, e); }
        if (n0 + 12u <= nl) { epilogue(c4_3.x, r0 + 4u, n0 + 12u, yb, e); }
        if (n0 + 13u <= nl) { epilogue(c4_3.y, r0 + 4u, n0 + 13u, yb, e); }
        if (n0 + 14u <= nl) { epilogue(c4_3.z, r0 + 4u, n0 + 14u, yb, e); }
        if (n0 + 15u <= nl) { epilogue(c4_3.w, r0 + 4u, n0 + 15u, yb, e); }
    }
    if (r0 + 5u <= ml) {
        if (n0 + 0u <= nl) { epilogue(c5_0.x, r0 + 5u, n0 + 0u, yb, e); }
        if (n0 + 1u <= nl) { epilogue(c5_0.y, r0 + 5u, n0 + 1u, yb, e); }
        if (n0 + 2u <= nl) { epilogue(c5_0.z, r0 + 5u, n0 + 2u, yb, e); }
        if (n0 + 3u <= nl) { epilogue(c5_0.w, r0 + 5u, n0 + 3u, yb, e); }
        if (n0 + 4u <= nl) { epilogue(c5_1.x, r0 + 5u, n0 + 4u, yb, e); }
        if (n0 + 5u <= nl) { epilogue(c5_1.y, r0 + 5u, n0 + 5u, yb, e); }
        if (n0 + 6u <= nl) { epilogue(c5_1.z, r0 + 5u, n0 + 6u, yb, e); }
        if (n0 + 7u <= nl) { epilogue(c5_1.w, r0 + 5u, n0 + 7u, yb, e); }
        if (n0 + 8u <= nl) { epilogue(c5_2.x, r0 + 5u, n0 + 8u, yb, e); }
        if (n0 + 9u <= nl) { epilogue(c5_2.y, r0 + 5u, n0 + 9u, yb, e); }
        if (n0 + 10u <= nl) { epilogue(c5_2.z, r0 + 5u, n0 + 10u, yb, e); }
        if (n0 + 11u <= nl) { epilogue(c5_2.w, r0 + 5u, n0 + 11u, yb, e); }
        if (n0 + 12u <= nl) { epilogue(c5_3.x, r0 + 5u, n0 + 12u, yb, e); }
        if (n0 + 13u <= nl) { epilogue(c5_3.y, r0 + 5u, n0 + 13u, yb, e); }
        if (n0 + 14u <= nl) { epilogue(c5_3.z, r0 + 5u, n0 + 14u, yb, e); }
        if (n0 + 15u <= nl) { epilogue(c5_3.w, r0 + 5u, n0 + 15u, yb, e); }
    }
    if (r0 + 6u <= ml) {
        if (n0 + 0u <= nl) { epilogue(c6_0.x, r0 + 6u, n0 + 0u, yb, e); }
        if (n0 + 1u <= nl) { epilogue(c6_0.y, r0 + 6u, n0 + 1u, yb, e); }
        if (n0 + 2u <= nl) { epilogue(c6_0.z, r0 + 6u, n0 + 2u, yb, e); }
        if (n0 + 3u <= nl) { epilogue(c6_0.w, r0 + 6u, n0 + 3u, yb, e); }
        if (n0 + 4u <= nl) { epilogue(c6_1.x, r0 + 6u, n0 + 4u, yb, e); }
        if (n0 + 5u <= nl) { epilogue(c6_1.y, r0 + 6u, n0 + 5u, yb, e); }
        if (n0 + 6u <= nl) { epilogue(c6_1.z, r0 + 6u, n0 + 6u, yb, e); }
        if (n0 + 7u <= nl) { epilogue(c6_1.w, r0 + 6u, n0 + 7u, yb, e); }
        if (n0 + 8u <= nl) { epilogue(c6_2.x, r0 + 6u, n0 + 8u, yb, e); }
        if (n0 + 9u <= nl) { epilogue(c6_2.y, r0 + 6u, n0 + 9u, yb, e); }
        if (n0 + 10u <= nl) { epilogue(c6_2.z, r0 + 6u, n0 + 10u, yb, e); }
        if (n0 + 11u <= nl) { epilogue(c6_2.w, r0 + 6u, n0 + 11u, yb, e); }
        if (n0 + 12u <= nl) { epilogue(c6_3.x, r0 + 6u, n0 + 12u, yb, e); }
        if (n0 + 13u <= nl) { epilogue(c6_3.y, r0 + 6u, n0 + 13u, yb, e); }
        if (n0 + 14u <= nl) { epilogue(c6_3.z, r0 + 6u, n0 + 14u, yb, e); }
        if (n0 + 15u <= nl) { epilogue(c6_3.w, r0 + 6u, n0 + 15u, yb, e); }
    }
    if (r0 + 7u <= ml) {
        if (n0 + 0u <= nl) { epilogue(c7_0.x, r0 + 7u, n0 + 0u, yb, e); }
        if (n0 + 1u <= nl) { epilogue(c7_0.y, r0 + 7u, n0 + 1u, yb, e); }
        if (n0 + 2u <= nl) { epilogue(c7_0.z, r0 + 7u, n0 + 2u, yb, e); }
        if (n0 + 3u <= nl) { epilogue(c7_0.w, r0 + 7u, n0 + 3u, yb, e); }
        if (n0 + 4u <= nl) { epilogue(c7_1.x, r0 + 7u, n0 + 4u, yb, e); }
        if (n0 + 5u <= nl) { epilogue(c7_1.y, r0 + 7u, n0 + 5u, yb, e); }
        if (n0 + 6u <= nl) { epilogue(c7_1.z, r0 + 7u, n0 + 6u, yb, e); }
        if (n0 + 7u <= nl) { epilogue(c7_1.w, r0 + 7u, n0 + 7u, yb, e); }
        if (n0 + 8u <= nl) { epilogue(c7_2.x, r0 + 7u, n0 + 8u, yb, e); }
        if (n0 + 9u <= nl) { epilogue(c7_2.y, r0 + 7u, n0 + 9u, yb, e); }
        if (n0 + 10u <= nl) { epilogue(c7_2.z, r0 + 7u, n0 + 10u, yb, e); }
        if (n0 + 11u <= nl) { epilogue(c7_2.w, r0 + 7u, n0 + 11u, yb, e); }
        if (n0 + 12u <= nl) { epilogue(c7_3.x, r0 + 7u, n0 + 12u, yb, e); }
        if (n0 + 13u <= nl) { epilogue(c7_3.y, r0 + 7u, n0 + 13u, yb, e); }
        if (n0 + 14u <= nl) { epilogue(c7_3.z, r0 + 7u, n0 + 14u, yb, e); }
        if (n0 + 15u <= nl) { epilogue(c7_3.w, r0 + 7u, n0 + 15u, yb, e); }
    }
}
