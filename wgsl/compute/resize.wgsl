// Resize / Upsample: one invocation per output element. Per resized axis the host precomputed, for
// every output coordinate, T source taps (already clamped to the input), their weights and (for
// tf_crop_and_resize) an "outside the input" flag, stored in TB as
//   [taps (out_len * T) | weight bits (out_len * T) | outside flags (out_len)] at the axis' offset.
// Axes with T = 0 are not resized (the coordinate is the input's). NEAREST = 1: one tap, copied
// as is (any dtype); else the weighted sum of the taps' tensor product, in f32.
// Params: 0 n, 1 rank, 2 extrapolation value bits, 3 crop flag, 4..9 out shape, 10..15 in strides,
//         16..21 table offsets, 22..27 taps per axis.
#include "common/params.wgsl"

override NEAREST: u32 = 1u;

@group(0) @binding(0) var<storage, read> X: array<{{T}}>;
@group(0) @binding(1) var<storage, read> TB: array<i32>;
@group(0) @binding(2) var<storage, read_write> Y: array<{{T}}>;
@group(0) @binding(3) var<uniform> params: Params;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= pu(0u)) { return; }
    let rank = pu(1u);
    var coord: array<u32, 6>;
    var rem = i;
    var base = 0u;
    var combos = 1u;
    for (var d = 0u; d < rank; d++) {
        let a = rank - 1u - d;
        let dim = pu(4u + a);
        let q = rem / dim;
        let c = rem - q * dim;
        rem = q;
        coord[a] = c;
        let taps = pu(22u + a);
        if (taps == 0u) {
            base += c * pu(10u + a);
        } else {
            combos *= taps;
            if (pu(3u) != 0u && TB[pu(16u + a) + 2u * dim * taps + c] != 0) {
                Y[i] = bitcast<{{T}}>(pu(2u));
                return;
            }
            if (NEAREST == 1u) {
                base += u32(TB[pu(16u + a) + c]) * pu(10u + a);
            }
        }
    }
    if (NEAREST == 1u) {
        Y[i] = X[base];
        return;
    }
    var acc = 0.0;
    for (var k = 0u; k < combos; k++) {
        var r = k;
        var off = base;
        var w = 1.0;
        for (var a = 0u; a < rank; a++) {
            let taps = pu(22u + a);
            if (taps == 0u) { continue; }
            let t = r % taps;
            r = r / taps;
            let row = pu(16u + a) + coord[a] * taps + t;
            off += u32(TB[row]) * pu(10u + a);
            w *= bitcast<f32>(TB[row + pu(4u + a) * taps]);
        }
        acc += w * f32(X[off]);
    }
    Y[i] = {{T}}(acc);
}
