// Tree ensembles on gpu-pixel, step 1 of 2: each row's leaf weights gathered per target over the trees
// [first_tree, end_tree), as compute/tree_leaves.wgsl and compute/tree_scores.wgsl find and gather them; a
// fragment draws four targets of one row: it walks each tree from its root to its leaf and adds the leaf's
// weights of those targets. S (the running sums, or minima, maxima) and H (whether any weight reached a
// target) are two render targets (rows, targets), blocked along the targets; a block of trees after the first
// starts from the previous block's PS and PH (one draw per block where all trees would pass lavapipe's loop
// limit).
// T is the ensemble's table (ops/ml_trees_gpu.py tree_table) as an int32 texture, four words a texel: a node's four
// words (see compute/tree_leaves.wgsl) are texel 4 + node, a weight's two (target, f32 bits) one half texel.
// X (rows, features) is blocked along the features.
// Params: 0 output texels, 1 targets, 2 features, 3 first_tree, 4 end_tree, 5 depth, 6 binary-search halvings of
// the largest set, 7 the word where the roots start, 8 the word where the weights start, 9-11 the width shifts
// of the outputs, X and T.
// Override AGG: 0 sum, 1 min, 2 max. Override FIRST: 1 when this draw starts the sums (PS and PH unread).
#include "common/params.wgsl"
#include "common/math.wgsl"
#include "pixel/fullscreen.wgsl"

const LEAF: u32 = 6u;
const MEMBER: u32 = 7u;

override AGG: u32 = 0u;
override FIRST: u32 = 1u;

@group(0) @binding(0) var X: texture_2d<f32>;
@group(0) @binding(1) var T: texture_2d<i32>;
@group(0) @binding(2) var PS: texture_2d<f32>;
@group(0) @binding(3) var PH: texture_2d<i32>;
@group(0) @binding(4) var<uniform> params: Params;

struct Out {
    @location(0) s: vec4<f32>,
    @location(1) h: vec4<i32>,
}

fn at(t: u32, shift: u32) -> vec2<i32> { return vec2<i32>(i32(t & ((1u << shift) - 1u)), i32(t >> shift)); }
fn quad(t: u32) -> vec4<u32> { return bitcast<vec4<u32>>(textureLoad(T, at(t, pu(11u)), 0)); }
fn word(i: u32) -> u32 { return quad(i / 4u)[i % 4u]; }

// Whether x is in the sorted set starting at word `start`: a lower-bound search of `steps` halvings.
fn is_member(x: f32, start: u32, steps: u32) -> bool {
    var lo = start + 1u;
    let end = lo + word(start);
    var hi = end;
    for (var s = 0u; s < steps; s++) {
        if (lo < hi) {
            let mid = (lo + hi) / 2u;
            if (bitcast<f32>(word(mid)) < x) { lo = mid + 1u; } else { hi = mid; }
        }
    }
    return lo < end && bitcast<f32>(word(lo)) == x;
}

@fragment
fn fs_main(@builtin(position) position: vec4<f32>) -> Out {
    let texel = vec2<u32>(position.xy);
    let t = (texel.y << pu(9u)) + texel.x;
    var out = Out(vec4<f32>(0.0), vec4<i32>(0));
    if (t >= pu(0u)) { return out; }
    if (FIRST == 0u) {
        out.s = textureLoad(PS, vec2<i32>(texel), 0);
        out.h = textureLoad(PH, vec2<i32>(texel), 0);
    }
    let blocks = (pu(1u) + 3u) / 4u;
    let row = t / blocks;
    let first = (t % blocks) * 4u;
    let feature_blocks = (pu(2u) + 3u) / 4u;
    let depth = pu(5u);
    let steps = pu(6u);
    for (var tree = pu(3u); tree < pu(4u); tree++) {
        var node = word(pu(7u) + tree);
        for (var level = 0u; level < depth; level++) {
            let n = quad(4u + node);
            let link = n.z;
            let mode = (link >> 28u) & 7u;
            if (mode == LEAF) { break; }
            let x = textureLoad(X, at(row * feature_blocks + n.x / 4u, pu(10u)), 0)[n.x % 4u];
            var go = false;
            if (is_nan_f32(x)) {
                go = mode == 5u || (link >> 31u) == 1u;
            } else if (mode == MEMBER) {
                go = is_member(x, n.y, steps);
            } else {
                let threshold = bitcast<f32>(n.y);
                switch mode {
                    case 0u: { go = x <= threshold; }
                    case 1u: { go = x < threshold; }
                    case 2u: { go = x >= threshold; }
                    case 3u: { go = x > threshold; }
                    case 4u: { go = x == threshold; }
                    default: { go = x != threshold; }
                }
            }
            node = select(n.w, link & 0x0fffffffu, go);
        }
        let leaf = quad(4u + node);
        let start = pu(8u) + 2u * leaf.x;
        for (var k = 0u; k < leaf.y; k++) {
            let pair = quad((start + 2u * k) / 4u);
            let half = ((start + 2u * k) % 4u) / 2u;
            let slot = select(pair.x, pair.z, half == 1u) - first;
            let w = bitcast<f32>(select(pair.y, pair.w, half == 1u));
            if (slot < 4u) {
                if (out.h[slot] == 0) {
                    out.s[slot] = w;
                } else if (AGG == 0u) {
                    out.s[slot] = out.s[slot] + w;
                } else if (AGG == 1u) {
                    out.s[slot] = min(out.s[slot], w);
                } else {
                    out.s[slot] = max(out.s[slot], w);
                }
                out.h[slot] = 1;
            }
        }
    }
    return out;
}
