// Y of a recurrent op on gpu-pixel (ops/rnn_pixel.py): the step draws leave one state (dirs, batch, hidden) per
// time step; this joins PARTS of them, each (steps, dirs, batch, hidden) blocked on hidden, `size` steps a part
// (the last may hold fewer), texel by texel. The last join gives Y: direction d at time t reads step t, or
// seq_len - 1 - t where d runs backwards; batch row b past its sequence length reads zero; the layout is
// (seq, dirs, batch, hidden) or with layout=1 (batch, seq, dirs, hidden). Joins before it (more steps than one
// draw binds) keep step order. Padding lanes are zero in every part already.
// Params: 0 texels of the output, 1 log2 of its width, 2 steps, 3 dirs, 4 batch, 5 JB (hidden blocks), 6 flags
// (1: lens bound, 2: layout=1, 256 << d: direction d reversed), 7 steps a part, 8 log2 of the lens' width,
// 9 + k log2 of part k's width.
#include "common/params.wgsl"
#include "pixel/fullscreen.wgsl"

{{DECLS}}

fn at(t: u32, shift: u32) -> vec2<i32> {
    return vec2<i32>(i32(t & ((1u << shift) - 1u)), i32(t >> shift));
}

fn part(k: u32, t: u32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    switch (k) {
        {{CASES}}
    }
    return v;
}

@fragment
fn fs_main(@builtin(position) position: vec4<f32>) -> @location(0) vec4<f32> {
    let texel = vec2<u32>(position.xy);
    let t = (texel.y << pu(1u)) + texel.x;
    if (t >= pu(0u)) { return vec4<f32>(0.0); }
    let steps = pu(2u);
    let dirs = pu(3u);
    let batch = pu(4u);
    let jbs = pu(5u);
    let flags = pu(6u);
    let jb = t % jbs;
    var r = t / jbs;
    var time = 0u;
    var d = 0u;
    var b = 0u;
    if ((flags & 2u) != 0u) {  // (batch, seq, dirs, hidden)
        d = r % dirs;
        r = r / dirs;
        time = r % steps;
        b = r / steps;
    } else {  // (seq, dirs, batch, hidden)
        b = r % batch;
        r = r / batch;
        d = r % dirs;
        time = r / dirs;
    }
    let s = select(time, steps - 1u - time, ((flags >> (8u + d)) & 1u) == 1u);
    let size = pu(7u);
    let v = part(s / size, (((s % size) * dirs + d) * batch + b) * jbs + jb);
    if ((flags & 1u) != 0u && i32(time) >= textureLoad(Lens, at(b / 4u, pu(8u)), 0)[b % 4u]) {
        return vec4<f32>(0.0);
    }
    return v;
}
