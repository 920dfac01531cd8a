// Resize / Upsample: one invocation per output element, any number of interpolated axes. Per interpolated
// axis the host computed, for every output coordinate, T source taps (already clamped to the input), their
// weights, an "outside the input" flag (tf_crop_and_resize) and the divisor of that axis' pass (cubic with
// exclude_outside; else 1), stored in TB at the axis' offset as
//   [taps (out_len * T) | weight bits (out_len * T) | outside flags (out_len) | divisor bits (out_len)]
// (image.resize_plan, the CPU kernel's own tables). Axes with T = 0 are not interpolated (the coordinate is
// the input's). The tap combinations run in lexicographic order, the innermost axis fastest. Override KIND
// says how they combine, in ONNX Runtime's float order (image.py):
//   0 nearest: one tap, copied as is (any dtype);
//   1 corners (linear): the sum, from the first term, of (w_innermost * ... * w_outermost) * x;
//   2 passes (cubic): nested sums from 0, the innermost axis' first: a value enters the innermost axis' sum
//     as x * w / d; when an axis' last tap is in, its sum enters the next outer axis' sum the same way.
// Products that are added go through opaque() (math.wgsl), so no driver can contract them into an FMA, and
// division is {{DIV}}, the device's correctly rounded one, only where a divisor is not 1.
// Params: 0 n, 1 rank, 2 extrapolation value bits, 3 crop flag, 4..9 out shape, 10..15 in strides,
//         16..21 table offsets, 22..27 taps per axis.
#include "common/params.wgsl"
#include "common/math.wgsl"

override KIND: u32 = 0u;

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
    var outermost = rank;
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
            outermost = a;
            if (pu(3u) != 0u && TB[pu(16u + a) + 2u * dim * taps + c] != 0) {
                Y[i] = bitcast<{{T}}>(pu(2u));
                return;
            }
            if (KIND == 0u) {
                base += u32(TB[pu(16u + a) + c]) * pu(10u + a);
            }
        }
    }
    if (KIND == 0u) {
        Y[i] = X[base];
        return;
    }
    var sums: array<f32, 6>;  // passes: the open sum of each axis; corners: sums[0]
    var tap: array<u32, 6>;
    for (var k = 0u; k < combos; k++) {
        var r = k;
        var off = base;
        var w = 1.0;
        for (var d = 0u; d < rank; d++) {
            let a = rank - 1u - d;
            let taps = pu(22u + a);
            if (taps == 0u) { continue; }
            let t = r % taps;
            r = r / taps;
            tap[a] = t;
            let row = pu(16u + a) + coord[a] * taps + t;
            off += u32(TB[row]) * pu(10u + a);
            w *= bitcast<f32>(TB[row + pu(4u + a) * taps]);
        }
        let x = f32(X[off]);
        if (KIND == 1u) {
            let term = opaque(w * x, opaque_zero());
            sums[0] = select(sums[0] + term, term, k == 0u);
            continue;
        }
        var carry = x;
        for (var d = 0u; d < rank; d++) {
            let a = rank - 1u - d;
            let taps = pu(22u + a);
            if (taps == 0u) { continue; }
            let out_len = pu(4u + a);
            let row = pu(16u + a) + coord[a] * taps + tap[a];
            var term = opaque(carry * bitcast<f32>(TB[row + out_len * taps]), opaque_zero());
            let divisor = bitcast<f32>(TB[pu(16u + a) + 2u * out_len * taps + out_len + coord[a]]);
            if (divisor != 1.0) { term = {{DIV}}(opaque_zero(), term, divisor); }
            sums[a] = sums[a] + term;
            if (tap[a] + 1u < taps || a == outermost) { break; }
            carry = sums[a];  // this axis' sum is complete: it enters the next outer axis' sum
            sums[a] = 0.0;
        }
    }
    Y[i] = {{T}}(select(sums[outermost], sums[0], KIND == 1u));
}
