// The live viewer's one draw: a screen-covering triangle that samples the channel-grid texture.
@group(0) @binding(0) var grid: texture_2d<f32>;
@group(0) @binding(1) var nearest: sampler;

struct VOut { @builtin(position) pos: vec4<f32>, @location(0) uv: vec2<f32> };

@vertex
fn vs_main(@builtin(vertex_index) i: u32) -> VOut {
    // One triangle that covers the screen.
    let xy = vec2<f32>(f32((i << 1u) & 2u), f32(i & 2u));
    var out: VOut;
    out.pos = vec4<f32>(xy * 2.0 - 1.0, 0.0, 1.0);
    out.uv = vec2<f32>(xy.x, 1.0 - xy.y);
    return out;
}

@fragment
fn fs_main(v: VOut) -> @location(0) vec4<f32> {
    return textureSample(grid, nearest, v.uv);
}
