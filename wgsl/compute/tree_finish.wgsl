// Tree ensembles, step 3 of 3: a row's scores from its gathered weights (tree_scores.wgsl), as the numpy
// kernel (ops/ml_trees.py run_tree_model) computes them; one invocation per row.
// KIND 0, scores (TreeEnsembleRegressor, TreeEnsemble): AVERAGE divides by the tree count, base values are
//   added, a target no weight reached scores 0 (no base either, as ORT); then the post transform.
// KIND 1, a classifier with more than two classes: base values are added (every class then counts as
//   scored); the label is that of the best scored class (the first on ties); then the post transform.
// KIND 2, a binary classifier, decided as ONNX Runtime decides it (ml_trees.py _binary_tree_classifier): a row
//   whose class 1 got no weight has one score, compared with the threshold (0.5 for probabilities, else 0),
//   and its two columns are derived from it; other rows keep two scores and compare class 1's.
// Params: 0 rows, 1 targets, 2 trees, 3 base values (count), 4 the word where they start, 5 the word where
// the labels start, 6 threshold (f32), 7 flags: 1 one class id, 2 every weight positive, 4 divide by trees.
// Override POST: 0 none, 1 softmax, 2 logistic, 3 softmax_zero, 4 probit.
#include "common/params.wgsl"
#include "common/math.wgsl"
#include "compute/ml_post.wgsl"

override KIND: u32 = 0u;
override POST: u32 = 0u;

@group(0) @binding(0) var<storage, read> S: array<f32>;
@group(0) @binding(1) var<storage, read> H: array<u32>;
@group(0) @binding(2) var<storage, read> T: array<u32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;
@group(0) @binding(4) var<storage, read_write> LABEL: array<i32>;
@group(0) @binding(5) var<uniform> params: Params;

fn base_value(c: u32) -> f32 {
    let count = pu(3u);
    if (count == 0u) { return 0.0; }
    return bitcast<f32>(T[pu(4u) + select(c, 0u, count == 1u)]);
}

// The post transform of the ``count`` scores at Y[at..], in place.
fn post_transform(at: u32, count: u32) {
    if (POST == 2u) {
        for (var c = 0u; c < count; c++) { Y[at + c] = logistic(Y[at + c]); }
    } else if (POST == 4u) {
        for (var c = 0u; c < count; c++) { Y[at + c] = probit(Y[at + c]); }
    } else if (POST == 1u || POST == 3u) {
        var peak = Y[at];
        for (var c = 1u; c < count; c++) { peak = max(peak, Y[at + c]); }
        var total = 0.0;
        for (var c = 0u; c < count; c++) {
            let v = Y[at + c];
            let e = select(exp_accurate(v - peak), 0.0, POST == 3u && abs(v) <= 1e-7);
            Y[at + c] = e;
            total += e;
        }
        for (var c = 0u; c < count; c++) { Y[at + c] = Y[at + c] / total; }
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = flat_index(gid, nwg);
    if (row >= pu(0u)) { return; }
    let targets = pu(1u);
    let at = row * targets;
    let flags = pu(7u);
    if (KIND == 0u) {
        let trees = f32(pu(2u));
        for (var c = 0u; c < targets; c++) {
            var v = S[at + c];
            if ((flags & 4u) != 0u) { v = v / trees; }
            // As ORT: a target no weight reached scores 0, without its base value.
            Y[at + c] = select(0.0, v + base_value(c), H[at + c] != 0u);
        }
        post_transform(at, targets);
        return;
    }
    if (KIND == 1u) {
        let based = pu(3u) != 0u;
        var best = 0u;
        var best_score = 0.0;
        var found = false;
        for (var c = 0u; c < targets; c++) {
            let hit = H[at + c] != 0u || based;
            let v = select(0.0, S[at + c], H[at + c] != 0u) + base_value(c);
            Y[at + c] = v;
            if (hit && (!found || v > best_score)) { best = c; best_score = v; found = true; }
        }
        LABEL[row] = bitcast<i32>(T[pu(5u) + best]);
        post_transform(at, targets);
        return;
    }
    // KIND 2: two columns.
    let has0 = H[at] != 0u;
    let has1 = H[at + 1u] != 0u;
    var p0 = select(0.0, S[at], has0);
    var p1 = select(0.0, S[at + 1u], has1);
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
    let single = !has1 && bases != 2u;
    let deciding = select(select(0.0, p0, has0), p1, has1);
    LABEL[row] = bitcast<i32>(T[pu(5u) + select(0u, 1u, deciding > pf(6u))]);
    if (!single) {
        Y[at] = p0;
        Y[at + 1u] = p1;
        post_transform(at, 2u);
        return;
    }
    if (POST == 4u) {
        Y[at] = probit(p0);
        Y[at + 1u] = 0.0;
    } else if ((flags & 3u) == 3u) {
        Y[at] = 1.0 - p0;
        Y[at + 1u] = p0;
    } else if (POST == 2u) {
        Y[at] = logistic(-p0);
        Y[at + 1u] = logistic(p0);
    } else {
        Y[at] = -p0;
        Y[at + 1u] = p0;
    }
}
