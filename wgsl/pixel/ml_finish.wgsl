// Linear and SVM models on gpu-pixel, last step: the output scores (OUTPUT 0: a fragment draws four columns of
// one row) or the labels (OUTPUT 1: four rows) from the raw scores S (rows, score columns; blocked along the
// columns), by the rules of compute/ml_rows.wgsl; the labels are words of the int32 table L.
// Params: 0 rows, 1 score columns, 2 classes, 3 flags, 4 output columns (ml_rows.wgsl), 5 the output's texels,
// 6-8 the width shifts of the output, S and L.
#include "common/params.wgsl"
#include "pixel/fullscreen.wgsl"
#include "compute/ml_rows.wgsl"

override OUTPUT: u32 = 0u;

@group(0) @binding(0) var S: texture_2d<f32>;
@group(0) @binding(1) var L: texture_2d<i32>;
@group(0) @binding(2) var<uniform> params: Params;

fn at(t: u32, shift: u32) -> vec2<i32> { return vec2<i32>(i32(t & ((1u << shift) - 1u)), i32(t >> shift)); }

fn score(row: u32, c: u32) -> f32 {
    return textureLoad(S, at(row * ((pu(1u) + 3u) / 4u) + c / 4u, pu(7u)), 0)[c % 4u];
}

fn label_word(i: u32) -> i32 { return textureLoad(L, at(i / 4u, pu(8u)), 0)[i % 4u]; }

struct Out { @location(0) v: vec4<{{OUT}}> }

@fragment
fn fs_main(@builtin(position) position: vec4<f32>) -> Out {
    let texel = vec2<u32>(position.xy);
    let t = (texel.y << pu(6u)) + texel.x;
    var out = Out(vec4<{{OUT}}>());
    if (t >= pu(5u)) { return out; }
    if (OUTPUT == 0u) {
        let cols = pu(4u);
        let blocks = (cols + 3u) / 4u;
        let row = t / blocks;
        let first = (t % blocks) * 4u;
        let sm = softmax_of(row);
        for (var l = 0u; l < 4u; l++) {
            if (first + l < cols) { out.v[l] = {{OUT}}(output_column(row, first + l, sm)); }
        }
    } else {
        for (var l = 0u; l < 4u; l++) {
            let row = t * 4u + l;
            if (row < pu(0u)) { out.v[l] = {{OUT}}(label_word(label_index(row))); }
        }
    }
    return out;
}
