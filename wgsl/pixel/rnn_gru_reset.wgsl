// The first draw of a GRU time step without linear_before_reset (ops/rnn_pixel.py): R.H = r . H with
// r = f(clip(Xr + H Rr)), (dirs, batch, hidden) like the state, for rnn_gru.wgsl's candidate (r . H) Rh, which
// needs r of every unit. Params and helpers: pixel/rnn_common.wgsl.
#include "pixel/rnn_common.wgsl"

@group(0) @binding(0) var XW: texture_2d<f32>;
@group(0) @binding(1) var R: texture_2d<f32>;
@group(0) @binding(2) var Hin: texture_2d<f32>;
@group(0) @binding(3) var<uniform> params: Params;

@fragment
fn fs_main(@builtin(position) position: vec4<f32>) -> @location(0) vec4<f32> {
    let u = unit_of(position);
    if (!u.inside) { return vec4<f32>(0.0); }
    let h0 = u.d * pu(18u) + u.b * pu(19u);
    let h_prev = textureLoad(Hin, at(h0 + u.jb, pu(12u)), 0);
    let gr = projected(XW, u, time_of(u.d), 1u) + product(R, Hin, pu(12u), h0, u, 1u);
    // H's padding lanes are zero, so are R.H's
    return act_f(clipped(gr), u.d) * h_prev;
}
