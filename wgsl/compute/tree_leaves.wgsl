// Tree ensembles, step 1 of 3: the leaf each row reaches in each tree; one invocation per (row, tree).
// T is the ensemble's table (ops/ml_trees_gpu.py tree_table), built once from the layer's attributes: after a
// 16-word header, 4 words per node:
//   0 the feature a branch reads (a leaf: the start of its weight run)
//   1 the threshold's f32 bits (BRANCH_MEMBER: the word where its set starts; a leaf: its weight count)
//   2 the true branch's node | mode << 28 | missing_value_tracks_true << 31
//   3 the false branch's node
// Modes: 0 <=, 1 <, 2 >=, 3 >, 4 ==, 5 !=, 6 leaf, 7 member; a set is its count, then its sorted values.
// A NaN value compares false (true for !=) and takes the true branch where the node tracks missing
// values, as the numpy kernel (ops/ml_trees.py Forest.leaves) and ONNX Runtime do; NaN is tested on the bits.
// Params: 0 rows * trees, 1 trees, 2 features (X's row length), 3 depth (the most branches on a path),
// 4 binary-search halvings of the largest set, 5 the word where the roots start.
#include "common/params.wgsl"
#include "common/math.wgsl"

const HEADER: u32 = 16u;
const LEAF: u32 = 6u;
const MEMBER: u32 = 7u;

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read> T: array<u32>;
@group(0) @binding(2) var<storage, read_write> L: array<u32>;
@group(0) @binding(3) var<uniform> params: Params;

// Whether x is in the sorted set starting at word ``at``: a lower-bound search of ``steps`` halvings.
fn is_member(x: f32, at: u32, steps: u32) -> bool {
    var lo = at + 1u;
    let end = lo + T[at];
    var hi = end;
    for (var s = 0u; s < steps; s++) {
        if (lo < hi) {
            let mid = (lo + hi) / 2u;
            if (bitcast<f32>(T[mid]) < x) { lo = mid + 1u; } else { hi = mid; }
        }
    }
    return lo < end && bitcast<f32>(T[lo]) == x;
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let trees = pu(1u);
    let row = i / trees;
    let row_start = row * pu(2u);
    let depth = pu(3u);
    let steps = pu(4u);
    var node = T[pu(5u) + i % trees];
    for (var level = 0u; level < depth; level++) {
        let at = HEADER + 4u * node;
        let link = T[at + 2u];
        let mode = (link >> 28u) & 7u;
        if (mode == LEAF) { break; }
        let x = X[row_start + T[at]];
        var go = false;
        if (is_nan_f32(x)) {
            go = mode == 5u || (link >> 31u) == 1u;
        } else if (mode == MEMBER) {
            go = is_member(x, T[at + 1u], steps);
        } else {
            let t = bitcast<f32>(T[at + 1u]);
            switch mode {
                case 0u: { go = x <= t; }
                case 1u: { go = x < t; }
                case 2u: { go = x >= t; }
                case 3u: { go = x > t; }
                case 4u: { go = x == t; }
                default: { go = x != t; }
            }
        }
        node = select(T[at + 3u], link & 0x0fffffffu, go);
    }
    L[i] = node;
}
