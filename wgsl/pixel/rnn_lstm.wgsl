// One time step of the LSTM (gates i, o, f, c) as a gpu-pixel draw (ops/rnn_pixel.py), for the fragment's four
// hidden units of one (direction, batch row), into two render targets (H', C'):
//   i = f(Xi + H Ri + Pi . C), f = f(Xf + H Rf + Pf . C) (or 1 - i with input_forget),
//   C' = f . C + i . g(Xc + H Rc), o = f(Xo + H Ro + Po . C'), H' = o . h(C')
// (pre-activations clipped; the biases are folded into XW). A finished sequence keeps H and C. Params and
// helpers: pixel/rnn_common.wgsl.
#include "pixel/rnn_common.wgsl"

@group(0) @binding(0) var XW: texture_2d<f32>;
@group(0) @binding(1) var R: texture_2d<f32>;
@group(0) @binding(2) var Hin: texture_2d<f32>;
@group(0) @binding(3) var Cin: texture_2d<f32>;
@group(0) @binding(4) var Lens: texture_2d<i32>;
@group(0) @binding(5) var P: texture_2d<f32>;
@group(0) @binding(6) var<uniform> params: Params;

struct Out { @location(0) h: vec4<f32>, @location(1) c: vec4<f32> }

@fragment
fn fs_main(@builtin(position) position: vec4<f32>) -> Out {
    let u = unit_of(position);
    var out: Out;
    if (!u.inside) { return out; }
    let time = time_of(u.d);
    var gi = projected(XW, u, time, 0u);
    var go = projected(XW, u, time, 1u);
    var gf = projected(XW, u, time, 2u);
    var gc = projected(XW, u, time, 3u);
    var h_prev = vec4<f32>(0.0);
    if (!has(F_H0_ZERO)) {
        let h0 = u.d * pu(18u) + u.b * pu(19u);
        h_prev = textureLoad(Hin, at(h0 + u.jb, pu(12u)), 0);
        gi += product(R, Hin, pu(12u), h0, u, 0u);
        go += product(R, Hin, pu(12u), h0, u, 1u);
        gf += product(R, Hin, pu(12u), h0, u, 2u);
        gc += product(R, Hin, pu(12u), h0, u, 3u);
    }
    var c_prev = vec4<f32>(0.0);
    if (!has(F_C0_ZERO)) {
        c_prev = textureLoad(Cin, at(u.d * pu(20u) + u.b * pu(21u) + u.jb, pu(13u)), 0);
    }
    let p0 = u.d * 3u * pu(5u) + u.jb;  // P is (dirs, 3, hidden): gates i, o, f
    if (has(F_PEEP)) {
        gi += textureLoad(P, at(p0, pu(15u)), 0) * c_prev;
        gf += textureLoad(P, at(p0 + 2u * pu(5u), pu(15u)), 0) * c_prev;
    }
    let ig = act_f(clipped(gi), u.d);
    var fg = vec4<f32>(1.0) - ig;
    if (!has(F_VARIANT)) {
        fg = act_f(clipped(gf), u.d);
    }
    let inside = lanes_in(u.jb);
    let c_new = select(vec4<f32>(0.0), fg * c_prev + ig * act_g(clipped(gc), u.d), inside);
    if (has(F_PEEP)) {
        go += textureLoad(P, at(p0 + pu(5u), pu(15u)), 0) * c_new;
    }
    let h_new = select(vec4<f32>(0.0), act_f(clipped(go), u.d) * act_h(c_new, u.d), inside);
    let running = live(Lens, u.b, time);
    out.h = select(h_prev, h_new, running);
    out.c = select(c_prev, c_new, running);
    return out;
}
