// MatMul and Gemm as a gpu-pixel program (ops/matmul_pixel.py): Y = act(alpha * A @ B + beta * C), each fragment
// drawing ROWS rows x 4 columns of Y: A is blocked along K, B and Y along N (pixel_layout.TextureLayout), so per
// block of four k a fragment loads four B texels (rows k..k+3, the fragment's four columns) and one A texel per
// row, and adds mat4x4(b0, b1, b2, b3) * a. With ROWS > 1 the rows go to as many render targets, target r holding
// rows mi * ROWS + r of the fragment's (batch, mi, column block): matmul_assemble.wgsl then interleaves them into Y.
// Texel (row m, block kb) of A is a_off + m * pu(10) + kb * pu(11) and (row k, block nb) of B b_off + k * pu(12) +
// nb * pu(13): a transposed operand (Gemm's transA/transB) is one blocked along its first axis, other strides.
// C (optional, ROWS substitution's CLOAD) is read at m * pu(14) + nb * pu(15): a texel of four columns, or with
// pu(16) == 2 one value per row (its lane 0).
// Params: 0 texels of a target, 1-4 log2 of the widths of the targets, A, B and C; 5 rows per target (Mr); 6 NB
// (column blocks); 7 K; 8 N; 9 M; 10-13 A and B strides; 14-16 C's; 17 alpha; 18 beta; 19-21 the activation's
// alpha beta gamma; 22-25 the output's batch dims (leading ones 1); 26-29 and 30-33 A's and B's texel strides
// along them (0 where broadcast).
#include "common/params.wgsl"
#include "common/math.wgsl"
#include "pixel/fullscreen.wgsl"

@group(0) @binding(0) var A: texture_2d<f32>;
@group(0) @binding(1) var B: texture_2d<f32>;
{{DECLS}}

fn at(t: u32, shift: u32) -> vec2<i32> {
    return vec2<i32>(i32(t & ((1u << shift) - 1u)), i32(t >> shift));
}

fn act(v: f32) -> f32 {
    let alpha = pf(19u);
    let beta = pf(20u);
    let gamma = pf(21u);
    return {{ACT}};
}

// One finished texel of row m: alpha * acc (+ beta * C), the activation, lanes past N zero.
fn finish(acc: vec4<f32>, m: u32, nb: u32) -> vec4<f32> {
    var v = pf(17u) * acc;
    {{CLOAD}}
    let y = vec4<f32>(act(v.x), act(v.y), act(v.z), act(v.w));
    return select(vec4<f32>(0.0), y, vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(pu(8u) - 4u * nb));
}

{{OUT_STRUCT}}

@fragment
fn fs_main(@builtin(position) position: vec4<f32>) -> {{OUT_TYPE}} {
    let texel = vec2<u32>(position.xy);
    let t = (texel.y << pu(1u)) + texel.x;
    var out: {{OUT_TYPE}};
    if (t >= pu(0u)) { return out; }
    let ash = pu(2u);
    let bsh = pu(3u);
    let nblocks = pu(6u);
    let nb = t % nblocks;
    let r = t / nblocks;
    let mi = r % pu(5u);
    var bi = r / pu(5u);
    // The batch index's coordinates, innermost first, give each operand's offset (broadcast dims stride 0).
    var a_off = 0u;
    var b_off = 0u;
    var cd = bi % pu(25u);
    a_off += cd * pu(29u);
    b_off += cd * pu(33u);
    bi = bi / pu(25u);
    cd = bi % pu(24u);
    a_off += cd * pu(28u);
    b_off += cd * pu(32u);
    bi = bi / pu(24u);
    cd = bi % pu(23u);
    a_off += cd * pu(27u);
    b_off += cd * pu(31u);
    bi = bi / pu(23u);
    a_off += bi * pu(26u);
    b_off += bi * pu(30u);
    let k = pu(7u);
    let m_last = pu(9u) - 1u;
    let a_sm = pu(10u);
    let a_sk = pu(11u);
    let b_sk = pu(12u);
    var bt = b_off + nb * pu(13u);
    // Rows past M read row M - 1 (valid texels); their results are never assembled into Y.
    {{ROW_INIT}}
    let blocks = k / 4u;
    for (var kb = 0u; kb < blocks; kb++) {
        let bm = mat4x4<f32>(textureLoad(B, at(bt, bsh), 0), textureLoad(B, at(bt + b_sk, bsh), 0),
                             textureLoad(B, at(bt + 2u * b_sk, bsh), 0), textureLoad(B, at(bt + 3u * b_sk, bsh), 0));
        {{ROW_STEP}}
        bt += 4u * b_sk;
    }
    let rem = k % 4u;
    if (rem != 0u) {
        // The last, partial block: B rows past K are never read as numbers (A's lanes there are zero).
        let zero = vec4<f32>(0.0);
        let bm = mat4x4<f32>(textureLoad(B, at(bt, bsh), 0),
                             select(zero, textureLoad(B, at(bt + b_sk, bsh), 0), rem > 1u),
                             select(zero, textureLoad(B, at(bt + 2u * b_sk, bsh), 0), rem > 2u), zero);
        {{ROW_STEP}}
    }
    {{ROW_OUT}}
    return out;
}
