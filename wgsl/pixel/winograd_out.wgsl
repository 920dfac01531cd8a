// Winograd F(S x S, 3x3) output transform of a gpu-pixel convolution (ops/conv_pixel.py): each fragment draws one
// output row oy of one tile for four output channels, the S columns ox = tx * S + rx into S render targets (as the
// direct program's columns: target rx's texel ((n * MB + mb) * OH + oy) * TW + tx; matmul_assemble.wgsl then
// interleaves them into Y). Texture P<j> holds the products (i, j) as an (A, T, M) tensor with M blocked, texel
// (i * T + tile) * MB + mb. The substituted ROWS switches on ry = oy % S (it changes once per output row, so
// neighbouring fragments mostly take the same case) and sums q_j = A^T[ry] P[:, j]; COLUMNS gives column rx as
// A^T[rx] q, A^T's entries compiled in. Then the bias, the residual Z (FusedConv, Y's layout), the fused activation,
// and the padding lanes of the last channel block zeroed.
// Params: 0 texels of a target, 1-4 log2 of the widths of the targets, the P<j>, the bias and Z; 5 TW; 6 OH; 7 MB;
// 8 OW; 9 TH; 10 T; 11 M; 12-14 alpha beta gamma.
#include "common/params.wgsl"
#include "common/math.wgsl"
#include "pixel/fullscreen.wgsl"

{{DECLS}}

fn at(t: u32, shift: u32) -> vec2<i32> {
    return vec2<i32>(i32(t & ((1u << shift) - 1u)), i32(t >> shift));
}

fn act(v: f32) -> f32 {
    let alpha = pf(12u);
    let beta = pf(13u);
    let gamma = pf(14u);
    return {{ACT}};
}

// One finished output texel: bias added, the activation, the padding lanes zero.
fn finish(v: vec4<f32>, lanes: vec4<bool>) -> vec4<f32> {
    return select(vec4<f32>(0.0), vec4<f32>(act(v.x), act(v.y), act(v.z), act(v.w)), lanes);
}

{{OUT_STRUCT}}

@fragment
fn fs_main(@builtin(position) position: vec4<f32>) -> Out {
    let texel = vec2<u32>(position.xy);
    let t = (texel.y << pu(1u)) + texel.x;
    var out: Out;
    if (t >= pu(0u)) { return out; }
    let tw = pu(5u);
    let oh = pu(6u);
    let mb_all = pu(7u);
    let tx = t % tw;
    let prefix = t / tw;  // (n * MB + mb) * OH + oy
    let oy = prefix % oh;
    let r = prefix / oh;
    let mb = r % mb_all;
    let n = r / mb_all;
    let tiles = pu(10u);
    let tile = (n * pu(9u) + oy / {{S}}u) * tw + tx;
    let ps = pu(2u);
    // Texel of product (i, j) for this tile and channel block: p0 + i * step in texture P<j>.
    let p0 = tile * mb_all + mb;
    let step = tiles * mb_all;
    let zero = vec4<f32>(0.0);
    {{Q_INIT}}
    switch oy % {{S}}u {
        {{ROWS}}
    }
    let bias = textureLoad(Bias, at(mb, pu(3u)), 0);
    let lanes = vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(pu(11u) - 4u * mb);
    let ow = pu(8u);
    {{COLUMNS}}
    return out;
}
