// Pad (constant / edge / reflect / wrap), negative pads crop first: per axis the output
// coordinate minus pad_lo is mapped into [0, len) of the cropped input, then shifted by crop_lo.
// MODE (override): 0 constant, 1 edge, 2 reflect, 3 wrap (a constant, so lavapipe, which runs both
// sides of every branch, only runs one mode's code).
// Params: 0 n, 1 rank, 2 unused, 3 constant value bits,
//         4..9 out shape, 10..15 in strides, 16..21 pad_lo (i32), 22..27 crop_lo, 28..33 len.
#include "common/params.wgsl"
#include "common/math.wgsl"

override MODE: u32 = 0u;

@group(0) @binding(0) var<storage, read> X: array<{{T}}>;
@group(0) @binding(1) var<storage, read_write> Y: array<{{T}}>;
@group(0) @binding(2) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let rank = pu(1u);
    var rem = i;
    var src = 0u;
    for (var d = 0u; d < rank; d++) {
        let axis = rank - 1u - d;
        let dim = pu(4u + axis);
        let q = rem / dim;
        let idx = rem - q * dim;
        rem = q;
        let len = pi(28u + axis);
        var c = i32(idx) - pi(16u + axis);
        if (c < 0 || c >= len) {
            if (MODE == 0u) {
                Y[i] = bitcast<{{T}}>(pu(3u));
                return;
            } else if (MODE == 1u) {
                c = clamp(c, 0, len - 1);
            } else if (MODE == 2u) {
                // numpy 'reflect': mirror without repeating the edge, period 2 * (len - 1).
                if (len == 1) {
                    c = 0;
                } else {
                    let p = 2 * (len - 1);
                    c = srem(c, p);
                    if (c < 0) { c += p; }
                    if (c >= len) { c = p - c; }
                }
            } else {
                c = srem(c, len);
                if (c < 0) { c += len; }
            }
        }
        src += u32(c + pi(22u + axis)) * pu(10u + axis);
    }
    Y[i] = X[src];
}
