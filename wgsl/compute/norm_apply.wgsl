// y = (x - MEAN[s]) * INV[s] (* SCALE[p]) (+ BIAS[p]), the statistics and the parameters broadcast
// to x through zero strides. Params: 0 n, 1 rank (<= 6), 2..7 shape, 8..13 statistics strides,
// 14..19 parameter strides. Overrides HAS_SCALE, HAS_BIAS (the unused bindings repeat X).
#include "common/params.wgsl"

override HAS_SCALE: bool = true;
override HAS_BIAS: bool = true;

@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read> MEAN: array<f32>;
@group(0) @binding(2) var<storage, read> INV: array<f32>;
@group(0) @binding(3) var<storage, read> SCALE: array<f32>;
@group(0) @binding(4) var<storage, read> BIAS: array<f32>;
@group(0) @binding(5) var<storage, read_write> Y: array<f32>;
@group(0) @binding(6) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let rank = pu(1u);
    var rem = i;
    var si = 0u;
    var pi_ = 0u;
    for (var d = 0u; d < rank; d++) {
        let axis = rank - 1u - d;
        let dim = pu(2u + axis);
        let idx = rem % dim;
        rem = rem / dim;
        si += idx * pu(8u + axis);
        pi_ += idx * pu(14u + axis);
    }
    var y = (X[i] - MEAN[si]) * INV[si];
    if (HAS_SCALE) { y = y * SCALE[pi_]; }
    if (HAS_BIAS) { y = y + BIAS[pi_]; }
    Y[i] = y;
}
