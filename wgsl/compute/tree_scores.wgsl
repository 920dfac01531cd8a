// Tree ensembles, step 2 of 3: each row's leaf weights gathered per target over the trees
// [first_tree, end_tree) (one dispatch per block of trees when all of them would pass lavapipe's loop limit);
// one invocation per row. S holds the running sums (or minima, maxima), H whether any weight reached a target.
// Leaves and their weight runs are read from the ensemble's table (see tree_leaves.wgsl); a weight is two
// words: its target, its f32 bits.
// Params: 0 rows, 1 trees, 2 targets, 3 first_tree, 4 end_tree, 5 the word where the weights start.
// Override AGG: 0 sum, 1 min, 2 max. Override FIRST: 1 when this dispatch starts the sums.
#include "common/params.wgsl"

const HEADER: u32 = 16u;

override AGG: u32 = 0u;
override FIRST: u32 = 1u;

@group(0) @binding(0) var<storage, read> L: array<u32>;
@group(0) @binding(1) var<storage, read> T: array<u32>;
@group(0) @binding(2) var<storage, read_write> S: array<f32>;
@group(0) @binding(3) var<storage, read_write> H: array<u32>;
@group(0) @binding(4) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = flat_index(gid, nwg);
    if (row >= pu(0u)) { return; }
    let trees = pu(1u);
    let targets = pu(2u);
    let out = row * targets;
    let weights = pu(5u);
    if (FIRST == 1u) {
        for (var c = 0u; c < targets; c++) { S[out + c] = 0.0; H[out + c] = 0u; }
    }
    for (var t = pu(3u); t < pu(4u); t++) {
        let at = HEADER + 4u * L[row * trees + t];
        let start = weights + 2u * T[at];
        let count = T[at + 1u];
        for (var k = 0u; k < count; k++) {
            let slot = out + T[start + 2u * k];
            let w = bitcast<f32>(T[start + 2u * k + 1u]);
            if (H[slot] == 0u) {
                S[slot] = w;
            } else if (AGG == 0u) {
                S[slot] = S[slot] + w;
            } else if (AGG == 1u) {
                S[slot] = min(S[slot], w);
            } else {
                S[slot] = max(S[slot], w);
            }
            H[slot] = 1u;
        }
    }
}
