// One time step of the GRU (gates z, r, h) as a gpu-pixel draw (ops/rnn_pixel.py), for the fragment's four hidden
// units of one (direction, batch row):
//   z = f(Xz + H Rz), h~ = g(Xh + r . (H Rh + Rbh)) (linear_before_reset, r = f(Xr + H Rr) here)
//                     or g(Xh + (r . H) Rh) (R.H drawn before by rnn_gru_reset.wgsl, Rbh folded into XW),
//   H' = (1 - z) . h~ + z . H
// (pre-activations clipped). A finished sequence keeps H. Params and helpers: pixel/rnn_common.wgsl.
#include "pixel/rnn_common.wgsl"

override LINEAR_BEFORE_RESET: bool = false;

@group(0) @binding(0) var XW: texture_2d<f32>;
@group(0) @binding(1) var R: texture_2d<f32>;
@group(0) @binding(2) var Hin: texture_2d<f32>;
@group(0) @binding(3) var Lens: texture_2d<i32>;
@group(0) @binding(4) var Rbh: texture_2d<f32>;
@group(0) @binding(5) var RH: texture_2d<f32>;
@group(0) @binding(6) var<uniform> params: Params;

@fragment
fn fs_main(@builtin(position) position: vec4<f32>) -> @location(0) vec4<f32> {
    let u = unit_of(position);
    if (!u.inside) { return vec4<f32>(0.0); }
    let time = time_of(u.d);
    var gz = projected(XW, u, time, 0u);
    var gh = projected(XW, u, time, 2u);
    var h_prev = vec4<f32>(0.0);
    if (LINEAR_BEFORE_RESET) {
        var gr = projected(XW, u, time, 1u);
        var hh = vec4<f32>(0.0);
        if (has(F_BIAS)) {
            hh = textureLoad(Rbh, at(u.d * pu(5u) + u.jb, pu(16u)), 0);
        }
        if (!has(F_H0_ZERO)) {
            let h0 = u.d * pu(18u) + u.b * pu(19u);
            h_prev = textureLoad(Hin, at(h0 + u.jb, pu(12u)), 0);
            gz += product(R, Hin, pu(12u), h0, u, 0u);
            gr += product(R, Hin, pu(12u), h0, u, 1u);
            hh += product(R, Hin, pu(12u), h0, u, 2u);
        }
        gh += act_f(clipped(gr), u.d) * hh;
    } else if (!has(F_H0_ZERO)) {
        let h0 = u.d * pu(18u) + u.b * pu(19u);
        h_prev = textureLoad(Hin, at(h0 + u.jb, pu(12u)), 0);
        gz += product(R, Hin, pu(12u), h0, u, 0u);
        gh += product(R, RH, pu(17u), (u.d * pu(3u) + u.b) * pu(5u), u, 2u);
    }
    let z = act_f(clipped(gz), u.d);
    let h_new = select(vec4<f32>(0.0), (vec4<f32>(1.0) - z) * act_g(clipped(gh), u.d) + z * h_prev,
                       lanes_in(u.jb));
    return select(h_prev, h_new, live(Lens, u.b, time));
}
