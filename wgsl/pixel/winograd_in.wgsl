// Winograd F(S x S, 3x3) input transform of a gpu-pixel convolution (ops/conv_pixel.py): V = B^T d B for every
// A x A input tile d (A = S + 2, tiles stepping by S, zero outside the image) and block of four input channels.
// X is channels blocked (texel ((n * CB + cb) * H + y) * W + x). V goes to A render targets, target j holding
// the elements (i, j) of the transformed tiles as an (A, T, C) tensor with C blocked: texel (i * T + tile) * CB +
// cb, tile = (n * TH + ty) * TW + tx. Each fragment draws row i of one tile's transform for four channels: the
// substituted ROWS switches on i (outermost in V, so neighbouring fragments take the same case) and sums the input
// rows that B^T's row i weighs, E = B^T[i] d (A columns), and COLUMNS then writes out.r<j> = E B[:, j], B^T's
// entries compiled in. X's padding lanes are zero, so V's are too.
// Params: 0 texels of a target, 1-2 log2 of the widths of the targets and X; 3 CB; 4 T; 5 TW; 6 TH; 7 W; 8 H;
// 9-10 pads (i32) top, left.
#include "common/params.wgsl"
#include "pixel/fullscreen.wgsl"

@group(0) @binding(0) var X: texture_2d<f32>;
@group(0) @binding(1) var<uniform> params: Params;

fn at(t: u32, shift: u32) -> vec2<i32> {
    return vec2<i32>(i32(t & ((1u << shift) - 1u)), i32(t >> shift));
}

{{OUT_STRUCT}}

@fragment
fn fs_main(@builtin(position) position: vec4<f32>) -> Out {
    let texel = vec2<u32>(position.xy);
    let t = (texel.y << pu(1u)) + texel.x;
    var out: Out;
    if (t >= pu(0u)) { return out; }
    let cb_all = pu(3u);
    let cb = t % cb_all;
    var r = t / cb_all;
    let tile = r % pu(4u);
    let i = r / pu(4u);
    let tx = tile % pu(5u);
    r = tile / pu(5u);
    let ty = r % pu(6u);
    let n = r / pu(6u);
    let w = i32(pu(7u));
    let h = i32(pu(8u));
    let y0 = i32(ty * {{S}}u) - pi(9u);
    let xb = i32(tx * {{S}}u) - pi(10u);
    let plane = (n * cb_all + cb) * u32(h);
    let xs = pu(2u);
    // The A columns xb + v and whether each is inside the image (outside ones read as zero).
    {{COLS}}
    let zero = vec4<f32>(0.0);
    {{E_INIT}}
    switch i {
        {{ROWS}}
    }
    {{COLUMNS}}
    return out;
}
