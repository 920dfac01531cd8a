// One time step of the simple RNN as a gpu-pixel draw (ops/rnn_pixel.py): H' = f(clip(XW[t] + H R^T)) for the
// fragment's four hidden units of one (direction, batch row); a finished sequence keeps H. Params and helpers:
// pixel/rnn_common.wgsl.
#include "pixel/rnn_common.wgsl"

@group(0) @binding(0) var XW: texture_2d<f32>;
@group(0) @binding(1) var R: texture_2d<f32>;
@group(0) @binding(2) var Hin: texture_2d<f32>;
@group(0) @binding(3) var Lens: texture_2d<i32>;
@group(0) @binding(4) var<uniform> params: Params;

@fragment
fn fs_main(@builtin(position) position: vec4<f32>) -> @location(0) vec4<f32> {
    let u = unit_of(position);
    if (!u.inside) { return vec4<f32>(0.0); }
    let time = time_of(u.d);
    var g = projected(XW, u, time, 0u);
    var h_prev = vec4<f32>(0.0);
    if (!has(F_H0_ZERO)) {
        let h0 = u.d * pu(18u) + u.b * pu(19u);
        h_prev = textureLoad(Hin, at(h0 + u.jb, pu(12u)), 0);
        g += product(R, Hin, pu(12u), h0, u, 0u);
    }
    let h_new = select(vec4<f32>(0.0), act_f(clipped(g), u.d), lanes_in(u.jb));
    return select(h_prev, h_new, live(Lens, u.b, time));
}
