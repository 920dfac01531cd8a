// The generic gpu-pixel reduction (ops/reduce_pixel.py): each output texel reduces the input's texels over the
// reduced region, four lanes at once with vec4 loads. Its output is the input's shape with the reduced axes set
// to 1 (or, for the first stage of a split reduction, one of them set to the number of chunks). Two forms:
// - texel form: the input's blocked axis is kept and is the output's blocked axis, so the four lanes of an
//   output texel are the four lanes of each input texel read (GlobalAveragePool on channels-blocked input);
// - blocked form: the input's blocked axis is reduced; each of the (up to) four lanes of the output texel has
//   its own base texel and accumulator, input lanes past the axis' end are masked to the identity, and the
//   four lanes of each accumulator are combined at the end.
// The loop nest over the reduced groups (runs of reduced dims merged in texel space, outermost first) is generated
// by backends/gpu/shader_gen.py; FUNCS is the texel kind's functions (pixel/reduce_f32.wgsl, reduce_i32.wgsl: the
// combining function, the pre-op (|x|, x^2, exp(x - center)...) and the post-op, chosen by override constants).
// Params: 0-13 the output's addressing (pixel/addressing.wgsl), 14-19 the input's texel stride per output
// dim (0 for reduced dims), 20 the output dim holding the chunk of a split reduction, 21 the chunk length,
// 22 log2 of the input's width, 23 elements in the last block of the reduced blocked axis (1-4), 24 scale
// (f32), 25 p (f32), 26 1/p (f32), 27 epsilon (f32), 28.. (size, texel stride) per reduced group,
// 100-113 the center tensor's addressing.
#include "common/params.wgsl"
#include "common/math.wgsl"
#include "pixel/fullscreen.wgsl"
#include "pixel/addressing.wgsl"
#include "pixel/lanes.wgsl"

@group(0) @binding(0) var X: texture_2d<{{T}}>;
{{BINDINGS}}

fn load(t: u32) -> vec4<{{T}}> {
    let shift = pu(22u);
    return textureLoad(X, vec2<i32>(i32(t & ((1u << shift) - 1u)), i32(t >> shift)), 0);
}

fn is_nan4(v: vec4<f32>) -> vec4<bool> {
    return (bitcast<vec4<u32>>(v) & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u);
}

fn exp4(v: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(exp_accurate(v.x), exp_accurate(v.y), exp_accurate(v.z), exp_accurate(v.w));
}

{{FUNCS}}

@fragment
fn fs_main(@builtin(position) position: vec4<f32>) -> @location(0) vec4<{{T}}> {
    let texel = vec2<u32>(position.xy);
    let t = (texel.y << pu(13u)) + texel.x;
    var inside = false;
    let c = coords_of(0u, t, 0u, &inside);
    if (!inside) { return vec4<{{T}}>(); }
    let axis = pu(12u);
    let valid = vec4<u32>(c.c[axis]) + vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(dim_of(0u, axis));
    var cc = c;
    {{BLOCK_COORD}}
    var b0 = 0u;
    for (var i = 0u; i < 6u; i++) { b0 += cc.c[i] * pu(14u + i); }
    {{BODY}}
    return select(vec4<{{T}}>(), r, valid);
}
