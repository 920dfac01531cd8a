// Y[i] = {{EXPR}} of `a`, `b` and `c` (X, S and Z) with numpy broadcasting of all three through zero strides:
// Where (condition, x, y) and the quantization family's maps (x, its scale, its zero point).
// Params: 0 n, 1 rank, 2..7 out shape, 8..13 x strides, 14..19 s strides, 20..25 z strides, 26 the output
//         element of this dispatch's element 0, 27..29 the element of X/S/Z where its binding starts. An output
//         past the binding limit runs in blocks of n elements: Y (and an operand of its size) bound as windows of
//         the block, a broadcast operand whole.
#include "common/params.wgsl"
#include "common/math.wgsl"

@group(0) @binding(0) var<storage, read> X: array<{{TA}}>;
@group(0) @binding(1) var<storage, read> S: array<{{TB}}>;
@group(0) @binding(2) var<storage, read> Z: array<{{TC}}>;
@group(0) @binding(3) var<storage, read_write> Y: array<{{TY}}>;
@group(0) @binding(4) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let rank = pu(1u);
    var rem = i + pu(26u);
    var ix = 0u;
    var is = 0u;
    var iz = 0u;
    for (var d = 0u; d < rank; d++) {
        let axis = rank - 1u - d;
        let idx = rem % pu(2u + axis);
        rem = rem / pu(2u + axis);
        ix += idx * pu(8u + axis);
        is += idx * pu(14u + axis);
        iz += idx * pu(20u + axis);
    }
    let a = X[ix - pu(27u)];
    let b = S[is - pu(28u)];
    let c = Z[iz - pu(29u)];
    Y[i] = {{EXPR}};
}
