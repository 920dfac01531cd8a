// Conv, ConvTranspose and FusedConv as one gpu-pixel program (ops/conv_pixel.py): each fragment draws output
// texels of four output channels at ROWS columns (n, od, oh, ow = owi * ROWS + p), in a 3-D spatial frame (1-D and
// 2-D convolutions have D = H = 1). Input X and output Y have the channel axis blocked (pixel_layout.TextureLayout), so X's texel
// ((n * CB + cb) * D + id) * H + ih) * W + iw holds input channels 4cb..4cb+3 and Y's likewise.
// The weights come packed on the host into one texture Wt of vec4 texels, each four consecutive output channels:
// general form, texel ((mb * K + k) * NB + i) * 4 + j holds W[4mb..4mb+3, input channel 4 * (cb0 + i) + j, tap k],
// zero where that channel is outside an output channel's group, so a tap is acc += mat4x4(w0, w1, w2, w3) * x;
// cb0 = first input block of the groups of output block mb. DEPTHWISE (one input and one output channel per
// group): texel mb * K + k holds the four channels' tap k and a tap is a vec4 multiply-add. The bias follows,
// texel pu(16) + mb. TRANSPOSED gathers instead: an output position takes the input positions i with
// i * stride + k * dilation - pad = o. Then the residual Z (FusedConv, Y's layout) is added, then the fused
// activation, and the padding lanes of the last channel block are zeroed (pixel/lanes.wgsl).
// The ROWS columns go to as many render targets (their weight loads shared); matmul_assemble.wgsl interleaves the
// targets into Y when ROWS > 1.
// Params: 0 texels of a target, 1-3 log2 of the widths of the targets, X, Wt; 4 OW / ROWS rounded up, 5-6 OH OD;
// 7 MB (output channel blocks); 8-10 W H D of X; 11 CB (input channel blocks); 12 NB; 13 output channels per
// group; 14 input channels per group; 15 M (output channels); 16 the bias' first texel; 17-19 pads (i32) d h w;
// 20-22 alpha beta gamma; 23 OW; 24 log2 of Z's width; 25 the first prefix (n, mb, od, oh) the targets hold (an
// output drawn in chunks of prefixes, the targets reused by each).
#include "common/params.wgsl"
#include "common/math.wgsl"
#include "pixel/fullscreen.wgsl"

@group(0) @binding(0) var X: texture_2d<f32>;
@group(0) @binding(1) var Wt: texture_2d<f32>;
{{DECLS}}

override KD: u32 = 1u;
override KH: u32 = 1u;
override KW: u32 = 1u;
override SD: u32 = 1u;
override SH: u32 = 1u;
override SW: u32 = 1u;
override DD: u32 = 1u;
override DH: u32 = 1u;
override DW: u32 = 1u;
override TRANSPOSED: bool = false;
override DEPTHWISE: bool = false;
// False where the attributes leave no W padding (no W pads, no SAME padding of a window wider than one; not
// transposed), for every input size alike: then no output column reads padding; columns past OW may read any
// texel, their results are never assembled into Y.
override CHECK_W: bool = true;

fn at(t: u32, shift: u32) -> vec2<i32> {
    return vec2<i32>(i32(t & ((1u << shift) - 1u)), i32(t >> shift));
}

fn act(v: f32) -> f32 {
    let alpha = pf(20u);
    let beta = pf(21u);
    let gamma = pf(22u);
    return {{ACT}};
}

// The input coordinate tap k of output coordinate o reads along one axis (stride s, dilation d, begin pad pad,
// input extent size); `ok` is false where there is none (padding, or a transposed gather between strides).
fn source(o: u32, k: u32, s: u32, d: u32, pad: i32, size: u32, ok: ptr<function, bool>) -> u32 {
    if (TRANSPOSED) {
        let p = i32(o) + pad - i32(k * d);
        *ok = p >= 0 && u32(p) % s == 0u && u32(p) / s < size;
        return u32(max(p, 0)) / s;
    }
    let p = i32(o * s + k * d) - pad;
    *ok = p >= 0 && p < i32(size);
    return u32(max(p, 0));
}

{{OUT_STRUCT}}

@fragment
fn fs_main(@builtin(position) position: vec4<f32>) -> Out {
    let texel = vec2<u32>(position.xy);
    let t = (texel.y << pu(1u)) + texel.x;
    var out: Out;
    if (t >= pu(0u)) { return out; }
    let xs = pu(2u);
    let ws = pu(3u);
    let owi = t % pu(4u);
    let prefix = t / pu(4u) + pu(25u);  // ((n * MB + mb) * OD + od) * OH + oh
    let oh = prefix % pu(5u);
    var r = prefix / pu(5u);
    let od = r % pu(6u);
    r = r / pu(6u);
    let mb = r % pu(7u);
    let n = r / pu(7u);
    let w_in = pu(8u);
    let h_in = pu(9u);
    let d_in = pu(10u);
    let cb_all = pu(11u);
    let nb_all = pu(12u);
    let plane = d_in * h_in * w_in;
    // The first input block of the groups of this output block's channels, and how many blocks they span.
    let cb0 = ((4u * mb) / pu(13u)) * pu(14u) / 4u;
    let nb = min(nb_all, cb_all - cb0);
    let xn = (n * cb_all + cb0) * plane;
    let taps = KD * KH * KW;
    let zero = vec4<f32>(0.0);
    // This fragment's output columns ow = owi * ROWS + p, one per render target.
    {{POS_INIT}}
    for (var kd = 0u; kd < KD; kd++) {
        var okd = false;
        let id = source(od, kd, SD, DD, pi(17u), d_in, &okd);
        if (!okd) { continue; }
        for (var kh = 0u; kh < KH; kh++) {
            var okh = false;
            let ih = source(oh, kh, SH, DH, pi(18u), h_in, &okh);
            if (!okh) { continue; }
            let xrow = xn + (id * h_in + ih) * w_in;
            for (var kw = 0u; kw < KW; kw++) {
                let k = (kd * KH + kh) * KW + kw;
                {{POS_TAP}}
                if (DEPTHWISE) {
                    let w = textureLoad(Wt, at(mb * taps + k, ws), 0);
                    {{POS_DEPTHWISE}}
                } else {
                    var wt = ((mb * taps + k) * nb_all) * 4u;
                    for (var i = 0u; i < nb; i++) {
                        let w = mat4x4<f32>(textureLoad(Wt, at(wt, ws), 0), textureLoad(Wt, at(wt + 1u, ws), 0),
                                            textureLoad(Wt, at(wt + 2u, ws), 0), textureLoad(Wt, at(wt + 3u, ws), 0));
                        {{POS_STEP}}
                        wt += 4u;
                    }
                }
            }
        }
    }
    let bias = textureLoad(Wt, at(pu(16u) + mb, ws), 0);
    let lanes = vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(pu(15u) - 4u * mb);
    {{POS_OUT}}
    return out;
}

// One finished output texel: the activation, the padding lanes zero.
fn finish(v: vec4<f32>, lanes: vec4<bool>) -> vec4<f32> {
    return select(vec4<f32>(0.0), vec4<f32>(act(v.x), act(v.y), act(v.z), act(v.w)), lanes);
}
