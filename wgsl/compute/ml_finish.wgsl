// Linear and SVM models, last step: a row's output scores and label from its raw scores (compute/ml_rows.wgsl
// holds the rules); one invocation per row.
// Params: 0 rows, 1 score columns, 2 classes, 3 flags, 4 output columns (see ml_rows.wgsl).
#include "common/params.wgsl"
#include "compute/ml_rows.wgsl"

@group(0) @binding(0) var<storage, read> S: array<f32>;
@group(0) @binding(1) var<storage, read> L: array<i32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<storage, read_write> LABEL: array<i32>;
@group(0) @binding(4) var<uniform> params: Params;

fn score(row: u32, c: u32) -> f32 { return S[row * pu(1u) + c]; }
fn label_word(i: u32) -> i32 { return L[i]; }

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = flat_index(gid, nwg);
    if (row >= pu(0u)) { return; }
    let out = pu(4u);
    let sm = softmax_of(row);
    for (var c = 0u; c < out; c++) { Y[row * out + c] = output_column(row, c, sm); }
    if (WIN != 0u) { LABEL[row] = label_word(label_index(row)); }
}
