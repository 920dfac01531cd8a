// A row's outputs from its raw scores, as the numpy kernels of LinearRegressor, LinearClassifier, SVMRegressor
// and SVMClassifier (ops/ml.py) decide them; shared by compute/ml_finish.wgsl and pixel/ml_finish.wgsl, which
// define `score(row, c)` (the raw score of column c) and `label_word(i)` (word i of the int32 label table).
// Params: 0 rows, 1 score columns, 2 classes (one-vs-one votes), 3 flags, 4 output columns.
// Flags: 1 one-class (a score becomes +1 / -1), 2 binary (two columns derived from score 0), 4 the binary
// columns are [1 - s, s], 8 the label index is best > 0, 16 the label index is 1 where best >= 0.5.
// Override POST: 0 none, 1 softmax, 2 logistic, 3 softmax_zero, 4 probit. Override WIN, how the winner and its
// "best" value are found: 0 none (no label), 1 argmax of the scores (the first on ties), 2 one-vs-one votes
// (pair k of classes i < j votes i where its score is > 0, else j; the first class with the most votes).
#include "compute/ml_post.wgsl"

override POST: u32 = 0u;
override WIN: u32 = 0u;

fn value(row: u32, c: u32) -> f32 {
    let v = score(row, c);
    if ((pu(3u) & 1u) != 0u) { return select(-1.0, 1.0, v > 0.0); }
    return v;
}

struct Softmax { peak: f32, total: f32 }

// The largest value of the row and the sum of the exponentials a softmax divides by (POST 1 and 3 only).
fn softmax_of(row: u32) -> Softmax {
    var out = Softmax(0.0, 1.0);
    if (POST != 1u && POST != 3u) { return out; }
    let cols = pu(1u);
    out.peak = value(row, 0u);
    for (var c = 1u; c < cols; c++) { out.peak = max(out.peak, value(row, c)); }
    out.total = 0.0;
    for (var c = 0u; c < cols; c++) {
        let v = value(row, c);
        out.total += select(exp_accurate(v - out.peak), 0.0, POST == 3u && abs(v) <= 1e-7);
    }
    return out;
}

// Column c of the row after the post transform.
fn posted(row: u32, c: u32, sm: Softmax) -> f32 {
    let v = value(row, c);
    if (POST == 2u) { return logistic(v); }
    if (POST == 4u) { return probit(v); }
    if (POST == 1u || POST == 3u) {
        return select(exp_accurate(v - sm.peak), 0.0, POST == 3u && abs(v) <= 1e-7) / sm.total;
    }
    return v;
}

// Column c of the two a binary model derives from its one score s (ml.py _binary_scores): PROBIT keeps one
// column, probit(s); else [1 - s, s] (flag 4), [logistic(-s), logistic(s)], or [-s, s] through the softmax.
fn binary_column(s: f32, c: u32) -> f32 {
    if (POST == 4u) { return probit(s); }
    if ((pu(3u) & 4u) != 0u) { return select(s, 1.0 - s, c == 0u); }
    if (POST == 2u) { return logistic(select(s, -s, c == 0u)); }
    if (POST == 1u || POST == 3u) {
        let peak = max(-s, s);
        let zero = POST == 3u && abs(s) <= 1e-7;
        let e0 = select(exp_accurate(-s - peak), 0.0, zero);
        let e1 = select(exp_accurate(s - peak), 0.0, zero);
        return select(e1, e0, c == 0u) / (e0 + e1);
    }
    return select(s, -s, c == 0u);
}

// Output column c of the row.
fn output_column(row: u32, c: u32, sm: Softmax) -> f32 {
    if ((pu(3u) & 2u) != 0u) { return binary_column(value(row, 0u), c); }
    return posted(row, c, sm);
}

// The index into the label table of the row's label.
fn label_index(row: u32) -> u32 {
    var winner = 0u;
    var best = 0.0;
    if (WIN == 1u) {
        let cols = pu(1u);
        best = value(row, 0u);
        for (var c = 1u; c < cols; c++) {
            let v = value(row, c);
            if (v > best) { best = v; winner = c; }
        }
    } else if (WIN == 2u) {
        let classes = pu(2u);
        var most = -1;
        for (var k = 0u; k < classes; k++) {
            var votes = 0;
            var pair = 0u;
            for (var i = 0u; i < classes; i++) {
                for (var j = i + 1u; j < classes; j++) {
                    let wins_i = value(row, pair) > 0.0;
                    if ((i == k && wins_i) || (j == k && !wins_i)) { votes += 1; }
                    pair += 1u;
                }
            }
            if (votes > most) { most = votes; winner = k; }
        }
        best = f32(most);
    }
    let flags = pu(3u);
    if ((flags & 8u) != 0u) { return select(0u, 1u, best > 0.0); }
    if ((flags & 16u) != 0u && best >= 0.5) { return 1u; }
    return winner;
}
