// Tree ensembles on gpu-pixel, step 2 of 2: the output scores (OUTPUT 0: a fragment draws four columns of one
// row) or the labels (OUTPUT 1: four rows) from the gathered weights S and H (pixel/tree_scores.wgsl), by the
// rules of compute/tree_finish.wgsl (KIND 0 scores, 1 a classifier of more than two classes, 2 a binary
// classifier as ONNX Runtime decides it). T is the ensemble's table as an int32 texture.
// Params: 0 rows, 1 targets, 2 trees, 3 base values (count), 4 the word where they start, 5 the word where the
// labels start, 6 threshold (f32), 7 flags (1 one class id, 2 every weight positive, 4 divide by trees),
// 8 the output's texels, 9 output columns, 10-12 the width shifts of the output, S and H, and T.
// Override POST: 0 none, 1 softmax, 2 logistic, 3 softmax_zero, 4 probit.
#include "common/params.wgsl"
#include "pixel/fullscreen.wgsl"
#include "compute/ml_post.wgsl"

override KIND: u32 = 0u;
override POST: u32 = 0u;
override OUTPUT: u32 = 0u;

@group(0) @binding(0) var S: texture_2d<f32>;
@group(0) @binding(1) var H: texture_2d<i32>;
@group(0) @binding(2) var T: texture_2d<i32>;
@group(0) @binding(3) var<uniform> params: Params;

fn at(t: u32, shift: u32) -> vec2<i32> { return vec2<i32>(i32(t & ((1u << shift) - 1u)), i32(t >> shift)); }
fn word(i: u32) -> u32 { return bitcast<u32>(textureLoad(T, at(i / 4u, pu(12u)), 0)[i % 4u]); }
fn element(row: u32, c: u32) -> vec2<i32> { return at(row * ((pu(1u) + 3u) / 4u) + c / 4u, pu(11u)); }
fn sum_of(row: u32, c: u32) -> f32 { return textureLoad(S, element(row, c), 0)[c % 4u]; }
fn hit(row: u32, c: u32) -> bool { return textureLoad(H, element(row, c), 0)[c % 4u] != 0; }

fn base_value(c: u32) -> f32 {
    let count = pu(3u);
    if (count == 0u) { return 0.0; }
    return bitcast<f32>(word(pu(4u) + select(c, 0u, count == 1u)));
}

// Score c of the row before the post transform (KIND 0 and 1).
fn raw(row: u32, c: u32) -> f32 {
    if (KIND == 0u) {
        var v = sum_of(row, c);
        if ((pu(7u) & 4u) != 0u) { v = v / f32(pu(2u)); }
        // As ORT: a target no weight reached scores 0, without its base value.
        return select(0.0, v + base_value(c), hit(row, c));
    }
    return select(0.0, sum_of(row, c), hit(row, c)) + base_value(c);
}

// A binary classifier's row: its two scores, whether it has one score only, and the label it decides.
struct Binary { p0: f32, p1: f32, single: bool, label: u32 }

fn binary(row: u32) -> Binary {
    let has0 = hit(row, 0u);
    let has1 = hit(row, 1u);
    var p0 = select(0.0, sum_of(row, 0u), has0);
    var p1 = select(0.0, sum_of(row, 1u), has1);
    let bases = pu(3u);
    if (bases == 2u) {
        // ORT: with a class-1 score, class 1 becomes base[1] + class 0's score and class 0 its negation.
        if (has1) {
            p1 = base_value(1u) + p0;
            p0 = -p1;
        } else {
            p0 = p0 + base_value(0u);
        }
    } else if (bases == 1u) {
        p0 = p0 + base_value(0u);
    }
    let deciding = select(select(0.0, p0, has0), p1, has1);
    return Binary(p0, p1, !has1 && bases != 2u, select(0u, 1u, deciding > pf(6u)));
}

fn transformed(v: f32, peak: f32, total: f32) -> f32 {
    if (POST == 2u) { return logistic(v); }
    if (POST == 4u) { return probit(v); }
    if (POST == 1u || POST == 3u) {
        return select(exp_accurate(v - peak), 0.0, POST == 3u && abs(v) <= 1e-7) / total;
    }
    return v;
}

fn softmax_term(v: f32, peak: f32) -> f32 {
    return select(exp_accurate(v - peak), 0.0, POST == 3u && abs(v) <= 1e-7);
}

// Output columns first .. first + 3 of the row (lanes past the columns stay 0).
fn columns(row: u32, first: u32) -> vec4<f32> {
    var out = vec4<f32>(0.0);
    let cols = pu(9u);
    if (KIND == 2u) {
        let b = binary(row);
        var pair = vec2<f32>(b.p0, b.p1);
        if (!b.single) {
            let peak = max(b.p0, b.p1);
            let total = softmax_term(b.p0, peak) + softmax_term(b.p1, peak);
            pair = vec2<f32>(transformed(b.p0, peak, total), transformed(b.p1, peak, total));
        } else if (POST == 4u) {
            pair = vec2<f32>(probit(b.p0), 0.0);
        } else if ((pu(7u) & 3u) == 3u) {
            pair = vec2<f32>(1.0 - b.p0, b.p0);
        } else if (POST == 2u) {
            pair = vec2<f32>(logistic(-b.p0), logistic(b.p0));
        } else {
            pair = vec2<f32>(-b.p0, b.p0);
        }
        return vec4<f32>(pair, 0.0, 0.0);
    }
    var peak = 0.0;
    var total = 1.0;
    if (POST == 1u || POST == 3u) {
        peak = raw(row, 0u);
        for (var c = 1u; c < cols; c++) { peak = max(peak, raw(row, c)); }
        total = 0.0;
        for (var c = 0u; c < cols; c++) { total += softmax_term(raw(row, c), peak); }
    }
    for (var l = 0u; l < 4u; l++) {
        if (first + l < cols) { out[l] = transformed(raw(row, first + l), peak, total); }
    }
    return out;
}

// The index of the row's label (KIND 1: the best scored class, the first on ties; KIND 2: as binary()).
fn label_index(row: u32) -> u32 {
    if (KIND == 2u) { return binary(row).label; }
    let based = pu(3u) != 0u;
    var best = 0u;
    var best_score = 0.0;
    var found = false;
    for (var c = 0u; c < pu(1u); c++) {
        let v = raw(row, c);
        if ((hit(row, c) || based) && (!found || v > best_score)) { best = c; best_score = v; found = true; }
    }
    return best;
}

struct Out { @location(0) v: vec4<{{OUT}}> }

@fragment
fn fs_main(@builtin(position) position: vec4<f32>) -> Out {
    let texel = vec2<u32>(position.xy);
    let t = (texel.y << pu(10u)) + texel.x;
    var out = Out(vec4<{{OUT}}>());
    if (t >= pu(8u)) { return out; }
    if (OUTPUT == 0u) {
        let blocks = (pu(9u) + 3u) / 4u;
        out.v = vec4<{{OUT}}>(columns(t / blocks, (t % blocks) * 4u));
    } else {
        for (var l = 0u; l < 4u; l++) {
            let row = t * 4u + l;
            if (row < pu(0u)) { out.v[l] = {{OUT}}(bitcast<i32>(word(pu(5u) + label_index(row)))); }
        }
    }
    return out;
}
